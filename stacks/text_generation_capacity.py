"""Text-generation endpoint defaults derived from a measured completion rate.

The text-generation endpoint is llama-server as the DLC runs it: `parallel` slots generate at
once and further requests wait for a slot, without a bound. Its cost is a completion, and a
completion's cost is set by how many tokens it may generate (llama-server's `n-predict`, the
release's most tokens per answer). So it is measured at that length: completions per second of
one instance with every slot busy, and the p95 of one completion with nothing waiting, both
from llama-server's own timings (`python -m ops measure` on the deployed endpoint). From them:

- autoscaling target (invocations per instance per minute) = UTILISATION x rate x 60, as for
  the decision endpoints (stacks/capacity.py);
- latency alarm threshold = a completion that waited for a slot's whole previous completion,
  with the decision endpoints' margin: 2 x p95 x LATENCY_MARGIN, kept under ALARM_CEILING_MS
  (no invocation lasts past InvokeEndpoint's 60 s, so a higher threshold could never fire);
- a completion whose p95 alone reaches InvokeEndpoint's 60 s is refused: lower `n-predict`.

A rate belongs to one model on one instance type with one set of llama-server flags, so the
file is `MEASUREMENTS/<model>/<instance type>.text-generation.json` and names the flags it was
measured with (`server_args`); synthesis refuses a release whose flags differ.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stacks import capacity
from stacks.capacity import ALARM_CEILING_MS, INVOKE_TIMEOUT_S, LATENCY_MARGIN, UTILISATION, shown

KIND = "text-generation"


def measurement_path(model: str, instance_type: str) -> Path:
    """Where the text-generation measurement of `model` on `instance_type` is committed."""
    return capacity.MEASUREMENTS / model / f"{instance_type}.{KIND}.json"


@dataclass(frozen=True)
class Measurement:
    throughput_rps: float  # completions per second of one instance, every slot busy
    completion_p95_ms: float  # one completion of max_tokens tokens with nothing waiting
    max_tokens: int
    source: str

    @classmethod
    def read(
        cls, path: Path, *, model: str, instance_type: str, server_args: Mapping[str, str]
    ) -> Measurement:
        """The file's figures; it must be a text-generation measurement of the pair it is
        filed under, taken with the llama-server flags the release runs."""
        data = json.loads(path.read_text())
        if data.get("measured") is not True or data.get("kind") != KIND:
            raise ValueError(f"{shown(path)} is not a text-generation measurement")
        for key, expected in (("model", model), ("instance_type", instance_type)):
            if data.get(key) != expected:
                raise ValueError(
                    f"{shown(path)} measured {key} {data.get(key)!r}, not {expected!r}: a "
                    "measurement is filed under the model and instance type it measured"
                )
        if data.get("server_args") != dict(server_args):
            raise ValueError(
                f"{shown(path)} was measured with llama-server flags {data.get('server_args')}, "
                f"the release runs {dict(server_args)}: measure the endpoint again "
                "(`python -m ops measure`) or give the values"
            )
        return cls(
            throughput_rps=float(data["throughput_rps"]),
            completion_p95_ms=float(data["completion_p95_ms"]),
            max_tokens=int(data["max_tokens"]),
            source=shown(path),
        )


@dataclass(frozen=True)
class Capacity:
    """What the text-generation endpoint is configured with, derived from one measurement."""

    invocations_per_instance: int
    model_latency_p90_ms: int
    measurement: Measurement


# What `make destroy` synthesizes an unmeasured endpoint with (stacks/capacity.py says why).
DESTROY_PLACEHOLDER = Measurement(
    throughput_rps=1.0,
    completion_p95_ms=1000.0,
    max_tokens=1,
    source="placeholder: synthesized for destroy",
)


def derive(measurement: Measurement) -> Capacity:
    if measurement.completion_p95_ms >= INVOKE_TIMEOUT_S * 1000:
        raise capacity.NothingFits(
            f"{measurement.source}: one completion of {measurement.max_tokens} tokens takes "
            f"{measurement.completion_p95_ms:g} ms at p95, past InvokeEndpoint's "
            f"{INVOKE_TIMEOUT_S:g} s: lower textGenerationEndpoint.llamaServerArgs.n-predict, "
            "or measure a faster instance type"
        )
    threshold_ms = math.ceil(2 * measurement.completion_p95_ms * LATENCY_MARGIN)
    return Capacity(
        invocations_per_instance=max(1, math.floor(UTILISATION * measurement.throughput_rps * 60)),
        model_latency_p90_ms=min(threshold_ms, ALARM_CEILING_MS),
        measurement=measurement,
    )


def for_release(model: str, instance_type: str, server_args: Mapping[str, str]) -> Capacity:
    """The derivation from the committed measurement of the pair; MissingMeasurement when the
    pair has none."""
    path = measurement_path(model, instance_type)
    if not path.is_file():
        raise capacity.MissingMeasurement(model, [instance_type], paths=[path])
    return derive(
        Measurement.read(path, model=model, instance_type=instance_type, server_args=server_args)
    )
