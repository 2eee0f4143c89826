"""Which BatchStrategy a transform job runs with.

`MultiRecord` packs up to MaxPayloadInMB of lines into one request, which the adapter answers
line by line under one admission: fast, as long as a full payload finishes inside the
invocation timeout (an hour at most). At this release's speed a megabyte of lines can take
longer; the request then times out, its retry is refused, and the job fails hours later. So a
job whose full payload would take more than PAYLOAD_SHARE of the timeout, at the instance's
measured rate, sends one line per request (`SingleRecord`) instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from stacks import capacity

MULTI, SINGLE = "MultiRecord", "SingleRecord"
STRATEGIES = ("auto", MULTI, SINGLE)
# A planned payload may take this share of the invocation timeout: lines vary, instances too.
PAYLOAD_SHARE = 0.5
# The container's MaxPayloadInMB (its DECISION_MAX_JSONLINES_BYTES, 1 MiB, in whole MB), what a
# job without --max-payload-mb is given through /execution-parameters.
CONTAINER_PAYLOAD_MB = 1
MB = 1 << 20


@dataclass(frozen=True)
class Choice:
    strategy: str
    reason: str


def measured_rate(
    instance_type: str, archive: str | None, cdk_json: Path = capacity.ROOT / "cdk.json"
) -> float | None:
    """Decisions per second of one `instance_type` instance serving the model archive `archive`
    (an S3 URI), from its committed measurement; None without one. The model is the spec the
    archive's key records, as synthesis reads it (stacks.config.release_model); an archive whose
    key names none holds cdk.json's builds.modelSpec."""
    from stacks.config import Builds, release_model

    context = json.loads(cdk_json.read_text()).get("context", {})
    model = release_model(archive or "", Builds.model_validate(context.get("builds", {})))
    path = capacity.measurement_path(model, instance_type)
    if not path.is_file():
        return None
    return capacity.Measurement.read(path, model=model, instance_type=instance_type).throughput_rps


def mean_line_bytes(path: Path) -> float | None:
    """The mean size of a local JSON Lines file's lines; None for an empty file."""
    size, lines = 0, 0
    with path.open("rb") as file:
        for line in file:
            size += len(line)
            lines += 1
    return size / lines if lines else None


def choose(
    *,
    line_bytes: float | None,
    payload_mb: int | None,
    lines_per_second: float | None,
    invocation_timeout_s: int,
) -> Choice:
    if line_bytes is None or lines_per_second is None:
        missing = "no measured rate" if lines_per_second is None else "an input in S3"
        return Choice(
            MULTI,
            f"{MULTI}: {missing} to tell how long a full payload takes; pass --lines-per-second "
            f"(or --batch-strategy {SINGLE}) where lines are slow",
        )
    lines = (payload_mb or CONTAINER_PAYLOAD_MB) * MB / line_bytes
    seconds = lines / lines_per_second
    budget = PAYLOAD_SHARE * invocation_timeout_s
    if seconds > budget:
        return Choice(
            SINGLE,
            f"{SINGLE}: a full payload of about {lines:,.0f} lines would take {seconds:,.0f} s "
            f"at {lines_per_second:g} lines/s, over {budget:,.0f} s of the "
            f"{invocation_timeout_s} s invocation timeout",
        )
    return Choice(
        MULTI,
        f"{MULTI}: a full payload of about {lines:,.0f} lines takes about {seconds:,.0f} s at "
        f"{lines_per_second:g} lines/s",
    )
