"""`python -m ops load`: closed-loop load on an endpoint, written as the figures file that
stacks/capacity.py derives the decision endpoints' defaults from.

At each level N clients each send the body, then the next as soon as the last answered; a
client refused for backpressure (503) waits the retry hint and counts the refusal. Run it
against an endpoint with a known instance count (min = max capacity) so that the rate per
instance is the endpoint's rate divided by it; one client gives the latency of a decision that
waited for nothing.
"""

from __future__ import annotations

import math
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ops.retry import Backoff, Retryable


@dataclass
class Level:
    clients: int
    elapsed_s: float = 0.0
    answered: list[float] = field(default_factory=list)  # seconds each
    refused: int = 0

    def as_dict(self, instances: int) -> dict[str, Any]:
        return {
            "clients": self.clients,
            "answered": len(self.answered),
            "refused_503": self.refused,
            "throughput_rps_per_instance": round(self.rate(instances), 3),
            "p95_ms": round(p95(self.answered) * 1000, 2) if self.answered else None,
        }

    def rate(self, instances: int) -> float:
        return len(self.answered) / self.elapsed_s / instances if self.elapsed_s else 0.0


def p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def run_level(
    send: Callable[[], object],
    clients: int,
    requests_per_client: int,
    *,
    sleep: Callable[[float], None] = time.sleep,
    until: float | None = None,
    backoff: Backoff | None = None,
    rng: random.Random | None = None,
    own_time: Callable[[Any], float] | None = None,
) -> Level:
    """Any failure other than backpressure stops every client and is raised here. No client
    sends after `until` (a time.perf_counter() value). After a refusal a client waits the retry
    hint, or with `backoff` its delay for that many refusals in a row (which honours the hint).
    An answer's latency is the client's round trip, or `own_time(answer)` in seconds: the
    server's own timing, without the network between client and endpoint."""
    level = Level(clients)
    lock = threading.Lock()
    failures: list[Exception] = []
    rng = rng if rng is not None else random.Random()

    def client() -> None:
        refused_in_a_row = 0
        for _ in range(requests_per_client):
            if failures or (until is not None and time.perf_counter() >= until):
                return
            started = time.perf_counter()
            try:
                answer = send()
                took = time.perf_counter() - started if own_time is None else own_time(answer)
            except Retryable as refusal:
                with lock:
                    level.refused += 1
                    delay = (
                        backoff.delay(refused_in_a_row, refusal.retry_after, rng)
                        if backoff is not None
                        else refusal.retry_after or 1.0
                    )
                refused_in_a_row += 1
                if until is not None:  # a pause past the end would only lengthen the level
                    delay = max(0.0, min(delay, until - time.perf_counter()))
                sleep(delay)
                continue
            except Exception as failure:  # noqa: BLE001 - handed to the caller's thread
                failures.append(failure)
                return
            refused_in_a_row = 0
            with lock:
                level.answered.append(took)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    level.elapsed_s = time.perf_counter() - started
    if failures:
        raise failures[0]
    return level


def figures(levels: list[Level], *, instances: int, endpoint: str) -> dict[str, Any]:
    """The figures file of stacks/capacity.py: the median rate per instance over the levels,
    and the one-client p95."""
    single = [level for level in levels if level.clients == 1 and level.answered]
    answered = [level for level in levels if level.answered]
    if not single:
        raise ValueError("no decision answered at the one-client level")
    return {
        "measured": True,
        "source": f"python -m ops load --endpoint {endpoint} ({instances} instance(s))",
        "throughput_rps": round(statistics.median(lv.rate(instances) for lv in answered), 3),
        "service_p95_ms": round(max(p95(level.answered) for level in single) * 1000, 2),
        "levels": [level.as_dict(instances) for level in levels],
    }
