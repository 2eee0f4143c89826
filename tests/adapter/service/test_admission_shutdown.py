"""Admission, in process: a failing job frees the slot, the shutdown deadline refuses new work
and ends running work with a retryable error, close() waits for the job on the model thread,
and the Busy family's messages. Scenarios: tests/support/admission_scenarios.py."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from decision_adapter.errors import Busy, Loading, ShuttingDown

from tests.support.admission_scenarios import Gate, scenario, until

# Waits under a second must be met: runs in make test's serial part, alone on the machine.
pytestmark = pytest.mark.serial


def test_a_failing_job_raises_its_own_error_and_frees_the_slot():
    def fails():
        raise ValueError("decode failed")

    async def body(runner):
        with pytest.raises(ValueError, match="decode failed"):
            await runner.run(fails)
        await until(lambda: runner.in_flight == 0)
        return (await runner.run(lambda: "next"))[0]

    assert scenario(body) == "next"


def test_after_the_shutdown_deadline_work_is_refused_and_running_work_ends_retryable():
    async def body(runner):
        gate = Gate()

        def interrupted():
            gate()
            raise RuntimeError("llama_decode aborted")

        running = asyncio.create_task(runner.run(interrupted))
        await until(gate.entered.is_set)
        runner.stop_work()
        gate.open()
        with pytest.raises(ShuttingDown) as ended:
            await running
        with pytest.raises(ShuttingDown) as refused:
            await runner.run(lambda: "never")
        return ended.value, refused.value

    ended, refused = scenario(body, retry_after_s=9)
    for error in (ended, refused):
        assert error.retry_after_s == 9
        assert str(error) == "the server is shutting down; retry the request"


def test_an_error_before_the_deadline_is_not_called_a_shutdown():
    async def body(runner):
        def fails():
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            await runner.run(fails)

    scenario(body)


def test_a_reserved_slot_refuses_work_after_the_deadline():
    async def body(runner):
        async with runner.reserved():
            assert (await runner.run(lambda: 1))[0] == 1
            runner.stop_work()
            with pytest.raises(ShuttingDown) as refused:
                await runner.run(lambda: 2)
        return refused.value.retry_after_s

    assert scenario(body, retry_after_s=8) == 8


def test_the_busy_family_reads_as_its_cause():
    assert str(Loading(5)) == "the model is still loading; retry shortly"
    assert Loading(5).retry_after_s == 5 and isinstance(Loading(5), Busy)
    assert Busy(2).retry_after_s == 2 and ShuttingDown(3).retry_after_s == 3


def test_close_returns_once_the_job_on_the_model_thread_has_ended():
    async def body(runner):
        started, ended = threading.Event(), threading.Event()

        def job():
            started.set()
            time.sleep(0.2)  # still running when close() is called
            ended.set()

        running = asyncio.ensure_future(runner.run(job))
        await until(started.is_set)
        runner.close()
        closed_after_the_job = ended.is_set()
        await running
        return closed_after_the_job

    assert scenario(body) is True
