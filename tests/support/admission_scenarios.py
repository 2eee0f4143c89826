"""Scenarios for ModelRunner in process: jobs held on a threading.Event (Gate), requests as the
server makes them, and a fresh loop and runner per scenario, so that every state is reached by
waiting on the runner's counters, never on a sleep."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

from decision_adapter import metrics
from decision_adapter.errors import Busy
from decision_adapter.service.admission import ModelRunner

SCENARIO_LIMIT_S = 10  # a scenario takes well under a second; a broken runner fails, not hangs
GATES: list[Gate] = []


class Gate:
    """A job that holds the model thread until `open()`; `entered` is set once it runs."""

    def __init__(self, result=None) -> None:
        self.entered = threading.Event()
        self._may_end = threading.Event()
        self.result = result
        self.thread: str | None = None
        GATES.append(self)

    def __call__(self):
        self.thread = threading.current_thread().name
        self.entered.set()
        self._may_end.wait(SCENARIO_LIMIT_S)
        return self.result

    def open(self) -> None:
        self._may_end.set()


async def until(condition, poll_s: float = 0.001) -> None:
    """Yield to the loop until `condition()` holds (each request is a task of its own)."""
    deadline = time.monotonic() + SCENARIO_LIMIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the runner never reached the expected state")
        await asyncio.sleep(poll_s)


def request(runner: ModelRunner, job, *args) -> asyncio.Task:
    """A request as the server makes one: its own task, its own context (and metrics record)."""

    async def handle():
        outcome = metrics.start_request()
        try:
            result, waited_ms = await runner.run(job, *args)
        except Busy as error:
            return error, outcome
        return (result, waited_ms), outcome

    return asyncio.create_task(handle(), context=contextvars.Context())


async def hold_the_slot(runner: ModelRunner) -> tuple[Gate, asyncio.Task]:
    """A request whose job is on the model thread until its gate opens."""
    gate = Gate()
    running = request(runner, gate)
    await until(gate.entered.is_set)
    return gate, running


def scenario(coroutine_function, **runner_args):
    """Run `coroutine_function(runner)` on a fresh loop and runner; close the runner after."""

    async def main():
        runner = ModelRunner(**{"max_queue": 0, "wait_s": 0.0, "retry_after_s": 7, **runner_args})
        try:
            return await asyncio.wait_for(coroutine_function(runner), SCENARIO_LIMIT_S)
        finally:
            while GATES:  # a failed scenario must not leave the model thread held
                GATES.pop().open()
            runner.close()

    return asyncio.run(main())
