"""Admission to the one model slot, in process: run at once, wait in a bounded FIFO queue, the slot
grace, 503s with their Retry-After. Jobs are held on a threading.Event
(tests/support/admission_scenarios.py), so every state is reached by waiting on the runner's
counters, never on a sleep. Failures and shutdown: test_admission_shutdown.py; streaming:
test_admission_streaming.py. The same rules over real adapters:
tests/adapter/http/test_robustness.py, test_overload.py, test_admission_grace.py."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from decision_adapter.errors import Busy

from tests.support.admission_scenarios import (
    SCENARIO_LIMIT_S,
    Gate,
    hold_the_slot,
    request,
    scenario,
    until,
)

# Waits under a second must be met: runs in make test's serial part, alone on the machine.
pytestmark = pytest.mark.serial


def test_a_free_model_runs_the_job_at_once_on_the_model_thread():
    async def body(runner):
        assert runner.counters() == {
            "in_flight": 0,
            "waiting": 0,
            "admitted": 0,
            "waited": 0,
            "refused_queue_full": 0,
            "refused_wait_expired": 0,
            "admitted_in_grace": 0,
        }
        (result, waited_ms), outcome = await request(runner, lambda a, b: (a, b), 1, 2)
        return result, waited_ms, outcome, runner.counters()

    result, waited_ms, outcome, counters = scenario(body)
    assert result == (1, 2) and 0 <= waited_ms < 1000
    assert outcome.admitted and outcome.queue_wait_ms == 0.0 and outcome.overloaded == 0
    assert counters["admitted"] == 1 and counters["waited"] == 0 and counters["in_flight"] == 0


def test_one_job_at_a_time_and_the_slot_passes_to_the_oldest_waiter():
    order = []

    def job(name):
        order.append((name, threading.current_thread().name))
        return name

    async def body(runner):
        first = Gate("first")
        running = request(runner, first)
        await until(first.entered.is_set)
        waiters = []
        for name in ("second", "third"):
            waiters.append(request(runner, job, name))
            await until(lambda n=len(waiters): runner.waiting == n)  # noqa: B008 - bound now
        assert runner.in_flight == 1 and order == []  # nobody ran beside the first job
        held_from = time.perf_counter()
        await asyncio.sleep(0.05)  # the waiters' measured wait must cover this
        held_ms = (time.perf_counter() - held_from) * 1000
        first.open()
        outcomes = [await task for task in (running, *waiters)]
        return first.thread, outcomes, held_ms, runner.counters()

    first_thread, outcomes, held_ms, counters = scenario(body, max_queue=2, wait_s=30.0)
    assert [name for name, _ in order] == ["second", "third"]
    assert {thread for _, thread in order} == {first_thread}
    assert first_thread.startswith("llama")
    (_, (second, second_ms), (third, third_ms)) = [r for r, _ in outcomes]
    assert (second, third) == ("second", "third")
    assert second_ms >= held_ms and third_ms >= held_ms
    waited = outcomes[1][1]
    assert waited.admitted and held_ms <= waited.queue_wait_ms <= second_ms + 1
    assert counters["admitted"] == 3 and counters["waited"] == 2
    assert counters["in_flight"] == 0 and counters["waiting"] == 0


def test_a_full_queue_is_refused_at_once_with_the_retry_after():
    async def body(runner):
        gate, running = await hold_the_slot(runner)
        late = request(runner, lambda: "never")
        # Refused before the job ends: no grace unless one is configured.
        await until(lambda: late.done() or runner.waiting)
        gate.open()
        refused, outcome = await late
        await running
        return refused, outcome, runner.counters()

    refused, outcome, counters = scenario(body, max_queue=0, retry_after_s=7)
    assert type(refused) is Busy and refused.retry_after_s == 7
    assert str(refused) == "the model is busy with other requests; retry shortly"
    assert outcome.overloaded == 1 and not outcome.admitted
    assert counters["refused_queue_full"] == 1 and counters["refused_wait_expired"] == 0
    assert counters["admitted"] == 1 and counters["in_flight"] == 0


def test_a_waiter_whose_wait_runs_out_gets_a_503_and_leaves_the_line():
    async def body(runner):
        gate, running = await hold_the_slot(runner)
        expired, outcome = await request(runner, lambda: "never")
        assert runner.waiting == 0
        assert isinstance((await request(runner, lambda: "never"))[0], Busy)
        gate.open()
        await running
        await until(lambda: runner.in_flight == 0)  # not handed to the waiter that left
        after, _ = await request(runner, lambda: "after")
        return expired, outcome, after, runner.counters()

    expired, outcome, after, counters = scenario(body, max_queue=1, wait_s=0.05, retry_after_s=4)
    assert type(expired) is Busy and expired.retry_after_s == 4
    assert outcome.overloaded == 1 and not outcome.admitted
    assert after[0] == "after"
    assert counters["refused_wait_expired"] == 2 and counters["refused_queue_full"] == 0
    assert counters["admitted"] == 2 and counters["waited"] == 0


def test_no_wait_configured_means_the_queue_cannot_hold_anyone():
    async def body(runner):
        gate, running = await hold_the_slot(runner)
        refused, _ = await request(runner, lambda: "never")
        gate.open()
        await running
        return refused, runner.counters()

    refused, counters = scenario(body, max_queue=5, wait_s=0.0)
    assert isinstance(refused, Busy)
    assert counters["refused_wait_expired"] == 1 and counters["waiting"] == 0


def test_the_slot_grace_admits_one_request_when_the_queue_is_full():
    async def body(runner):
        graced = []
        for turn in range(2):  # once used and over, the grace is there for the next one
            gate, running = await hold_the_slot(runner)
            in_grace = request(runner, lambda t=turn: f"graced {t}")
            await until(lambda: runner.waiting == 1)
            late = request(runner, lambda: "never")  # the grace is taken: refused at once
            await until(lambda: late.done() or runner.waiting == 2)  # noqa: B023 - awaited here
            gate.open()
            refused, _ = await late
            (result, _), outcome = await in_grace
            graced.append((result, outcome.admitted, isinstance(refused, Busy)))
            await running
        return graced, runner.counters()

    graced, counters = scenario(body, max_queue=0, grace_s=30.0)
    assert graced == [("graced 0", True, True), ("graced 1", True, True)]
    assert counters["admitted_in_grace"] == 2 and counters["refused_queue_full"] == 2
    assert counters["admitted"] == 4 and counters["waited"] == 0


def test_a_grace_that_runs_out_is_a_queue_full_503():
    async def body(runner):
        gate, running = await hold_the_slot(runner)
        refused, outcome = await request(runner, lambda: "never")
        gate.open()
        await running
        return refused, outcome, runner.counters()

    refused, outcome, counters = scenario(body, max_queue=0, grace_s=0.05)
    assert isinstance(refused, Busy) and outcome.overloaded == 1
    assert counters["refused_queue_full"] == 1 and counters["admitted_in_grace"] == 0
    assert counters["waiting"] == 0


def test_a_request_in_its_grace_does_not_take_a_queue_place():
    async def body(runner):
        gate, running = await hold_the_slot(runner)
        queued = request(runner, lambda: "queued")
        await until(lambda: runner.waiting == 1)
        graced = request(runner, lambda: "graced")  # the queue (1) is full: it takes the grace
        await until(lambda: runner.waiting == 2)
        queued.cancel()  # the queued client leaves; its place is free again
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert runner.waiting == 1
        requeued = request(runner, lambda: "requeued")
        await until(lambda: runner.waiting == 2)
        late = request(runner, lambda: "never")  # queue full and grace taken: refused at once
        await until(late.done)
        assert isinstance((await late)[0], Busy) and runner.waiting == 2
        gate.open()
        results = [(await task)[0][0] for task in (graced, requeued)]
        await running
        return results, runner.counters()

    results, counters = scenario(body, max_queue=1, wait_s=30.0, grace_s=30.0)
    assert results == ["graced", "requeued"]
    assert counters["refused_queue_full"] == 1 and counters["admitted_in_grace"] == 1


@pytest.mark.parametrize("queue,grace", [(1, 0.0), (0, 0.9)])
def test_a_wait_or_grace_under_a_second_still_gets_a_slot_freed_in_time(queue, grace):
    async def body(runner):
        gate, running = await hold_the_slot(runner)
        waiting = request(runner, lambda: "served")
        await until(lambda: runner.waiting == 1)
        gate.open()
        (served, _), outcome = await waiting
        await running
        return served, outcome

    served, outcome = scenario(body, max_queue=queue, wait_s=0.9, grace_s=grace)
    assert served == "served" and outcome.admitted


def test_a_waiter_cancelled_as_the_slot_reaches_it_passes_the_slot_on():
    async def body(runner):
        gate, running = await hold_the_slot(runner)
        leaving = request(runner, ran.append, "leaving")
        await until(lambda: runner.waiting == 1)
        staying = request(runner, lambda: "served")
        await until(lambda: runner.waiting == 2)
        gate.open()
        # Polled every loop turn: the slot was just handed to `leaving`, which has not run yet
        # (its wake-up is two turns away), and its client leaves now.
        await until(lambda: runner.waiting == 1, poll_s=0)
        leaving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leaving
        (served, _), _ = await staying
        await running
        await until(lambda: runner.in_flight == 0)
        return served, runner.counters()

    ran = []
    served, counters = scenario(body, max_queue=2, wait_s=30.0)
    assert served == "served" and counters["in_flight"] == 0 and ran == []


def test_jobs_submitted_together_still_run_one_after_the_other():
    """Jobs of one reservation skip admission; the single model thread still serialises them
    (the llama.cpp context is not thread-safe)."""

    async def body(runner):
        first_running, first_may_end = threading.Event(), threading.Event()
        overlapped = []

        def first():
            first_running.set()
            first_may_end.wait(SCENARIO_LIMIT_S)
            first_running.clear()

        def second():
            overlapped.append(first_running.is_set())

        async with runner.reserved():
            first_job = asyncio.ensure_future(runner.run(first))
            await until(first_running.is_set)
            second_job = asyncio.ensure_future(runner.run(second))
            # A second model thread would run it now; the one thread runs it only later.
            done, _ = await asyncio.wait({second_job}, timeout=0.2)
            first_may_end.set()
            await asyncio.gather(first_job, second_job)
        return bool(done), overlapped

    assert scenario(body) == (False, [False])
