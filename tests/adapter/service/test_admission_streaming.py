"""Admission of streams, in process: admitted on the first item, items handed over in order, a
closed stream stops production and frees the slot, refusals and the shutdown deadline reach the
reader. Scenarios: tests/support/admission_scenarios.py."""

from __future__ import annotations

import threading
import time

import pytest
from decision_adapter.errors import Busy, ShuttingDown

from tests.support.admission_scenarios import SCENARIO_LIMIT_S, hold_the_slot, scenario, until

# Waits under a second must be met: runs in make test's serial part, alone on the machine.
pytestmark = pytest.mark.serial


def test_a_stream_admits_on_its_first_item_and_hands_items_over_in_order():
    async def body(runner):
        stream = runner.generate(lambda: iter(["a", "b", "c"]))
        assert runner.stats.admitted == 0  # nothing admitted before the first item is asked
        items = [item async for item in stream]
        return items, runner.counters()

    items, counters = scenario(body)
    assert items == ["a", "b", "c"]
    assert counters["admitted"] == 1 and counters["in_flight"] == 0


def test_a_closed_stream_stops_production_and_frees_the_slot_before_it_returns():
    produced = []

    def produce():
        for i in range(250):
            produced.append(i)
            yield i
            time.sleep(0.02)  # 5 s for all: only a stream nobody stopped gets far

    async def body(runner):
        stream = runner.generate(produce)
        assert await anext(stream) == 0
        await stream.aclose()
        in_flight = runner.in_flight
        return in_flight, len(produced)

    in_flight, count = scenario(body)
    assert in_flight == 0 and count < 250


def test_a_stream_refused_for_a_busy_model_and_a_failing_one_raise_to_the_reader():
    def fails():
        yield "first"
        raise ValueError("tokenizer broke")

    async def body(runner):
        gate, running = await hold_the_slot(runner)
        with pytest.raises(Busy):
            await anext(runner.generate(lambda: iter(["x"])))
        gate.open()
        await running
        await until(lambda: runner.in_flight == 0)
        got = []
        with pytest.raises(ValueError, match="tokenizer broke"):
            async for item in runner.generate(fails):
                got.append(item)
        return got, runner.in_flight

    got, in_flight = scenario(body)
    assert got == ["first"] and in_flight == 0


def test_a_stream_at_the_shutdown_deadline_ends_with_a_retryable_error():
    async def body(runner):
        paused, release = threading.Event(), threading.Event()

        def produce():
            yield "first"
            paused.set()
            release.wait(SCENARIO_LIMIT_S)
            yield "second"
            yield "third"

        stream = runner.generate(produce)
        assert await anext(stream) == "first"
        await until(paused.is_set)  # past the first item's checks, producing the second
        runner.stop_work()
        release.set()
        got = []
        with pytest.raises(ShuttingDown) as ended:
            async for item in stream:
                got.append(item)
        with pytest.raises(ShuttingDown) as refused:
            await anext(runner.generate(lambda: iter(["x"])))
        return got, ended.value.retry_after_s, refused.value.retry_after_s

    assert scenario(body, retry_after_s=6) == (["second"], 6, 6)
