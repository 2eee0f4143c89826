"""One polling loop for whatever ops waits on: a build, a transform job, an S3 object."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Polling:
    """How often to look and how long to wait (the --poll-seconds and --timeout-minutes
    options); sleep and clock are parameters so that tests need not wait."""

    poll_seconds: float
    timeout_seconds: float
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def until(
        self,
        read: Callable[[], T],
        finished: Callable[[T], bool],
        *,
        state: Callable[[T], object] | None = None,
        report: Callable[[str], None] | None = None,
        timeout: Callable[[T], float] | None = None,
    ) -> tuple[T, bool]:
        """Read until `finished(value)`: the last value and whether it finished, which is False
        once the timeout has passed. `state` comes with `report`, which gets each state
        once, as it appears, with the seconds elapsed. `timeout`, given, reads the timeout from
        each value instead (a build says how long it may run)."""
        started = self.clock()
        reported = None
        while True:
            value = read()
            if state is not None and (current := state(value)) != reported:
                assert report is not None  # `state` comes with `report`
                report(f"[{self.clock() - started:6.0f}s] {current}")
                reported = current
            if finished(value):
                return value, True
            limit = self.timeout_seconds if timeout is None else timeout(value)
            if self.clock() - started >= limit:
                return value, False
            self.sleep(self.poll_seconds)
