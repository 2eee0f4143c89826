"""One deadline type on one clock: an instant on time.monotonic() past which no model work starts.

Every deadline of the adapter is one: a request's scoring or chat deadline, a JSON Lines body's
time bound (contract.WORK_DEADLINE), the soonest running chat's. Durations (the timings an
answer reports) are measured apart, with time.perf_counter().
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Deadline:
    """No model work starts past `at` (time.monotonic()); checked between batches, so a batch
    already running ends first."""

    at: float

    @classmethod
    def after(cls, seconds: float, since: float | None = None) -> Deadline:
        """`seconds` after `since` (time.monotonic(); now by default)."""
        return cls((time.monotonic() if since is None else since) + seconds)

    def passed(self) -> bool:
        return time.monotonic() >= self.at


NEVER = Deadline(math.inf)
