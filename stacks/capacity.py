"""Decision endpoint defaults derived from a measured per-instance throughput.

One decision instance runs one model operation at a time, so its capacity is a rate: decisions
per second with the slot always busy. From that rate and the latency of one unqueued decision:

- autoscaling target (invocations per instance per minute) = UTILISATION x rate x 60, so
  scaling starts while each instance still has headroom for a burst;
- admission wait = WAIT_SERVICE_TIMES unqueued decisions: a request may wait that long for the
  slot before it gets a 503 with a retry hint (backpressure, not a fault);
- queue = what one instance drains within that wait (rate x wait, rounded up): a longer queue
  would only hold requests that time out waiting;
- latency alarm threshold = (wait + one decision) x LATENCY_MARGIN: the slowest admitted
  request under load, with a margin; p90 above it means instances are slower than measured,
  not busier (being busier shows as backpressure).

The measurement per endpoint is a committed JSON file (MEASUREMENTS): the concurrency section
of `make bench` results (bench/concurrency.py), or a figures file
`{measured, throughput_rps, service_p95_ms, ...}`. The bench reports p95, not p90: the p95 of
one unqueued decision stands in for it (it is the higher of the two).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The CPU figure: this machine's `make bench` (2 CPUs, Gemma 3 270M), copied here; a stand-in
# until the bench runs on the endpoint's instance type with the deployed model. The GPU file
# holds a documented conservative figure, not a measurement.
MEASUREMENTS = {
    "decision-cpu": ROOT / "stacks" / "measurements" / "decision-cpu.json",
    "decision-gpu": ROOT / "stacks" / "measurements" / "decision-gpu.json",
}
UTILISATION = 0.7
WAIT_SERVICE_TIMES = 4
LATENCY_MARGIN = 1.5


@dataclass(frozen=True)
class Measurement:
    throughput_rps: float  # decisions per second of one instance, its model slot always busy
    service_p95_ms: float  # one decision with nothing queued ahead of it
    measured: bool
    source: str

    @classmethod
    def read(cls, path: Path) -> Measurement:
        data = json.loads(path.read_text())
        if "concurrency" in data:
            return cls.from_bench(data, source=str(path))
        return cls(
            throughput_rps=float(data["throughput_rps"]),
            service_p95_ms=float(data["service_p95_ms"]),
            measured=bool(data["measured"]),
            source=str(path),
        )

    @classmethod
    def from_bench(cls, data: dict, *, source: str) -> Measurement:
        """From the bench's closed-loop runs with a queue: no request refused, so each level
        measures the instance's rate (the median over levels), and the one-client level the
        latency of a decision that waited for nothing."""
        rows = [
            row
            for run in data["concurrency"]["runs"]
            if run["max_queue"] > 0
            for row in run["rows"]
            if row["answered"] and not row["errors"]
        ]
        single = [row["latency"]["p95_ms"] for row in rows if row["clients"] == 1]
        if not rows or not single:
            raise ValueError(f"{source}: no queued concurrency run with a one-client level")
        return cls(
            throughput_rps=statistics.median(row["throughput_rps"] for row in rows),
            service_p95_ms=max(single),
            measured=True,
            source=source,
        )


@dataclass(frozen=True)
class Capacity:
    """What the endpoint is configured with, derived from one measurement."""

    invocations_per_instance: int
    max_queue: int
    admission_wait_s: float
    model_latency_p90_ms: int
    measurement: Measurement


def derive(measurement: Measurement) -> Capacity:
    service_s = measurement.service_p95_ms / 1000
    wait_s = round(WAIT_SERVICE_TIMES * service_s, 1)
    return Capacity(
        invocations_per_instance=max(1, math.floor(UTILISATION * measurement.throughput_rps * 60)),
        max_queue=math.ceil(measurement.throughput_rps * wait_s),
        admission_wait_s=wait_s,
        model_latency_p90_ms=math.ceil((wait_s + service_s) * LATENCY_MARGIN * 1000),
        measurement=measurement,
    )


def for_endpoint(kind: str) -> Capacity:
    """The derivation for `decision-cpu` or `decision-gpu` from its committed measurement."""
    return derive(Measurement.read(MEASUREMENTS[kind]))


if __name__ == "__main__":
    for kind in MEASUREMENTS:
        print(kind, for_endpoint(kind))
