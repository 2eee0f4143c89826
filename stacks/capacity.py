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

Two bounds every real-time request meets cap these: the adapter's scoring deadline
(SCORING_DEADLINE_S, counted from the request's arrival, its wait included) and InvokeEndpoint's
60 s. The wait is shortened so a waited-for decision still ends inside the deadline; the alarm
threshold stays under ALARM_CEILING_MS, since no invocation lasts past 60 s and a threshold
above it could never fire; a decision whose p95 alone fills the deadline is refused.

A rate belongs to one model on one instance type, so measurements are keyed by both: the file
`MEASUREMENTS/<model spec>/<instance type>.json` that `python -m ops measure` writes from the
endpoint deployed with them (`{measured, model, instance_type, throughput_rps, service_p95_ms,
...}`). The p95 of one unqueued decision stands in for its p90 (it is the higher of the two).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENTS = ROOT / "stacks" / "measurements"
UTILISATION = 0.7
WAIT_SERVICE_TIMES = 4
LATENCY_MARGIN = 1.5
# The adapter's DECISION_SCORING_DEADLINE_S, which the real-time endpoints run with (a test
# holds it equal to the container's default), and InvokeEndpoint's own limit.
SCORING_DEADLINE_S = 45.0
INVOKE_TIMEOUT_S = 60.0
ALARM_CEILING_MS = 55_000


# What the adapter runs with when its environment sets no concurrency (settings.py's defaults):
# what a measurement that records none was taken at.
DEFAULT_CONCURRENCY: Mapping[str, int | bool] = {
    "max_scoring_requests": 1,
    "max_chat_streams": 1,
    "chat_shared_batches": False,
}


def measurement_path(model: str, instance_type: str) -> Path:
    """Where the measurement of `model` (a model spec name) on `instance_type` is committed."""
    return MEASUREMENTS / model / f"{instance_type}.json"


def shown(path: Path) -> str:
    """A path as an operator finds it: relative to the repository when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


@dataclass(frozen=True)
class Measurement:
    throughput_rps: float  # decisions per second of one instance, its model slot always busy
    service_p95_ms: float  # one decision with nothing queued ahead of it
    source: str
    # The adapter's concurrency settings on the measured endpoint (its Model's environment).
    concurrency: Mapping[str, int | bool] = field(default_factory=lambda: DEFAULT_CONCURRENCY)
    # What was measured (`shape`): the median request's input tokens (None: not recorded),
    # the decisions the adapter scored at once, and the share of chats among the requests.
    input_tokens: int | None = None
    decisions_at_once: int = 1
    chat_share: float = 0.0

    @classmethod
    def read(
        cls, path: Path, *, model: str | None = None, instance_type: str | None = None
    ) -> Measurement:
        """The file's figures; it must say it is a measurement, and of the pair it is filed
        under when `model` and `instance_type` are given."""
        data = json.loads(path.read_text())
        if data.get("measured") is not True:
            raise ValueError(f"{shown(path)} is not a measurement (its 'measured' is not true)")
        for key, expected in (("model", model), ("instance_type", instance_type)):
            if expected is not None and data.get(key) != expected:
                raise ValueError(
                    f"{shown(path)} measured {key} {data.get(key)!r}, not {expected!r}: a "
                    "measurement is filed under the model and instance type it measured"
                )
        shape = data.get("shape", {})
        return cls(
            throughput_rps=float(data["throughput_rps"]),
            service_p95_ms=float(data["service_p95_ms"]),
            source=shown(path),
            concurrency={**DEFAULT_CONCURRENCY, **data.get("concurrency", {})},
            input_tokens=shape.get("input_tokens"),
            decisions_at_once=int(shape.get("decisions_at_once", data.get("decisions_at_once", 1))),
            chat_share=float(shape.get("chat_share", 0.0)),
        )


class ContradictedMeasurement(ValueError):
    """A measurement taken with settings the release does not run with."""


@dataclass(frozen=True)
class Traffic:
    """What a release expects its decision endpoint to serve (its `traffic` section), which the
    measurement's shape must match: capacity measured on other requests is not its capacity."""

    input_tokens: int | None = None
    chat_share: float = 0.0
    decisions_at_once: int = 1


# How far a measured median input length may lie from the expected one, either way.
INPUT_TOKENS_TOLERANCE = 0.25
CHAT_SHARE_TOLERANCE = 0.05


def check_shape(measurement: Measurement, traffic: Traffic) -> None:
    """ContradictedMeasurement when what was measured is not what the release expects."""
    source = measurement.source
    if measurement.decisions_at_once != traffic.decisions_at_once:
        raise ContradictedMeasurement(
            f"{source} scored {measurement.decisions_at_once} decision(s) at once, the release "
            f"concurrency.maxScoringRequests {traffic.decisions_at_once}: a hybrid-memory model "
            "or a trained decision head scores one at a time whatever the setting (set 1 there)"
        )
    expected = traffic.input_tokens
    if expected is not None:
        measured = measurement.input_tokens
        if measured is None or abs(measured - expected) > INPUT_TOKENS_TOLERANCE * expected:
            raise ContradictedMeasurement(
                f"{source} measured requests of {measured or 'unrecorded'} input tokens "
                f"(median), the release expects traffic.inputTokens {expected}: latency grows "
                "with length. Measure with `ops measure --body FILE` of representative requests"
            )
    if abs(measurement.chat_share - traffic.chat_share) > CHAT_SHARE_TOLERANCE:
        raise ContradictedMeasurement(
            f"{source} measured a chat share of {measurement.chat_share:g}, the release "
            f"expects traffic.chatShare {traffic.chat_share:g}. Measure with `ops measure "
            "--body FILE` holding chats in that share"
        )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def check_concurrency(measurement: Measurement, concurrency: Mapping[str, int | bool]) -> None:
    """The release runs the adapter as it was measured: a rate measured at other concurrency
    settings is not this release's rate."""
    for name, value in concurrency.items():
        measured = measurement.concurrency.get(name)
        if measured != value:
            raise ContradictedMeasurement(
                f"{measurement.source} was measured at concurrency.{_camel(name)} {measured}, "
                f"the release sets {value}: its rate is not this release's. Deploy the release "
                "to be measured (`measuring`) and measure it again, or set the measured value"
            )


class MissingMeasurement(ValueError):
    """No committed measurement for some (model, instance type) pairs of a release."""

    def __init__(
        self, model: str, instance_types: Sequence[str], *, paths: Sequence[Path] | None = None
    ) -> None:
        self.model = model
        self.instance_types = list(instance_types)
        self.paths = list(paths or [measurement_path(model, t) for t in instance_types])
        files = ", ".join(shown(path) for path in self.paths)
        super().__init__(
            f"no measurement of model {model!r} on {', '.join(self.instance_types)}: {files} "
            + ("does not exist" if len(self.paths) == 1 else "do not exist")
        )


@dataclass(frozen=True)
class Capacity:
    """What the endpoint is configured with, derived from one measurement."""

    invocations_per_instance: int
    max_queue: int
    admission_wait_s: float
    model_latency_p90_ms: int
    measurement: Measurement


# What `make destroy` synthesizes an unmeasured endpoint with: any valid values do, since
# CloudFormation only deletes what the stack holds.
DESTROY_PLACEHOLDER = Measurement(
    throughput_rps=1.0, service_p95_ms=1000.0, source="placeholder: synthesized for destroy"
)


# A first deployment, before its measurement (the endpoint's `measuring` switch): one instance,
# since a measured rate is per instance; a queue for `python -m ops measure`'s clients (8 at
# most) and a wait they can sit out; the latency alarm at InvokeEndpoint's 60 s, since what is
# slow is not known yet.
MEASURING = Capacity(
    invocations_per_instance=60,
    max_queue=8,
    admission_wait_s=30.0,
    model_latency_p90_ms=60_000,
    measurement=Measurement(
        throughput_rps=1.0, service_p95_ms=7500.0, source="measuring: the first deployment"
    ),
)


class NothingFits(ValueError):
    """One measured decision takes the whole scoring deadline: no wait leaves it room."""


def derive(measurement: Measurement) -> Capacity:
    service_s = measurement.service_p95_ms / 1000
    room_s = min(SCORING_DEADLINE_S, INVOKE_TIMEOUT_S) - service_s
    if room_s < 0.1:
        raise NothingFits(
            f"{measurement.source}: one decision's p95 is {measurement.service_p95_ms:g} ms, "
            f"which leaves no room inside the adapter's {SCORING_DEADLINE_S:g} s scoring "
            "deadline for any wait: measure a faster instance type or a smaller model, or give "
            "admissionWaitS, maxQueue and modelLatencyP90Ms yourself"
        )
    # Rounded down to a tenth, so the wait and a decision still end inside the deadline.
    wait_s = math.floor(min(WAIT_SERVICE_TIMES * service_s, room_s) * 10 + 1e-9) / 10
    threshold_ms = math.ceil((wait_s + service_s) * LATENCY_MARGIN * 1000)
    return Capacity(
        invocations_per_instance=max(1, math.floor(UTILISATION * measurement.throughput_rps * 60)),
        max_queue=math.ceil(measurement.throughput_rps * wait_s),
        admission_wait_s=wait_s,
        model_latency_p90_ms=min(threshold_ms, ALARM_CEILING_MS),
        measurement=measurement,
    )


def slowest(measurements: Sequence[Measurement]) -> Measurement:
    """One figure for instances of several types (a GPU pool, whichever type SageMaker placed):
    the lowest rate and the highest latency among them."""
    if len(measurements) == 1:
        return measurements[0]
    return Measurement(
        throughput_rps=min(m.throughput_rps for m in measurements),
        service_p95_ms=max(m.service_p95_ms for m in measurements),
        source="slowest of " + ", ".join(m.source for m in measurements),
        concurrency=measurements[0].concurrency,
        input_tokens=measurements[0].input_tokens,
        decisions_at_once=measurements[0].decisions_at_once,
        chat_share=measurements[0].chat_share,
    )


def for_release(
    model: str,
    instance_types: Sequence[str],
    *,
    concurrency: Mapping[str, int | bool] = DEFAULT_CONCURRENCY,
    traffic: Traffic | None = None,
) -> Capacity:
    """The derivation for `model` served on any of `instance_types` at the adapter's
    `concurrency`, from each pair's committed measurement; MissingMeasurement names the pairs
    that have none, ContradictedMeasurement a measurement taken at other settings or, with
    `traffic`, of other requests."""
    missing = [t for t in instance_types if not measurement_path(model, t).is_file()]
    if missing:
        raise MissingMeasurement(model, missing)
    measured = [
        Measurement.read(measurement_path(model, t), model=model, instance_type=t)
        for t in instance_types
    ]
    for measurement in measured:
        check_concurrency(measurement, concurrency)
        if traffic is not None:
            check_shape(measurement, traffic)
    return derive(slowest(measured))


if __name__ == "__main__":
    # The text-generation endpoint's files beside them are stacks/text_generation_capacity.py's.
    decision_files = [
        p for p in MEASUREMENTS.glob("*/*.json") if not p.name.endswith(".text-generation.json")
    ]
    if not decision_files:
        print(f"no measurement under {shown(MEASUREMENTS)}/ (python -m ops measure writes one)")
    for path in sorted(decision_files):
        model, instance_type = path.parent.name, path.stem
        measured = Measurement.read(path, model=model, instance_type=instance_type)
        print(model, instance_type, derive(measured))
