"""The text-generation endpoint's autoscaling target and latency alarm come from the measurement
of the release's model on its instance type at its llama-server flags
(stacks/text_generation_capacity.py), or are given; without either, synthesis refuses the
release, except for a removal (forDestroy) and a deployment to be measured (measuring)."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from pydantic import ValidationError

from stacks import capacity
from stacks import text_generation_capacity as text_capacity
from stacks.app import endpoint_stack
from stacks.config import AppConfig
from tests.support.cdk_templates import CPU_IMAGE, MODEL, cdk_json_context, one, run_app

SMALL = "gemma3-270m"
TYPE = "ml.c6i.large"
SERVER_ARGS = {"ctx-size": "8192", "threads": "8", "parallel": "2", "n-predict": "256"}
# The text-generation endpoint alone (its scaling policy and latency alarm are the only ones).
TEXT_RELEASE = {
    "modelDataUri": MODEL,
    "decisionCpuImage": CPU_IMAGE,
    "builds": {"modelSpec": SMALL},
    "textGenerationEndpoint": {"instanceType": TYPE},
    "decisionCpuEndpoint": {"enabled": False},
    "decisionGpuEndpoint": {"enabled": False},
}


@pytest.fixture(autouse=True)
def measurements(tmp_path, monkeypatch):
    monkeypatch.setattr(capacity, "MEASUREMENTS", tmp_path / "measurements")
    return tmp_path / "measurements"


def filed(rps: float, p95_ms: float, **fields) -> Path:
    """A text-generation measurement as `python -m ops measure` writes it."""
    path = text_capacity.measurement_path(SMALL, TYPE)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "measured": True,
        "kind": "text-generation",
        "model": SMALL,
        "instance_type": TYPE,
        "server_args": SERVER_ARGS,
        "max_tokens": 256,
        "throughput_rps": rps,
        "completion_p95_ms": p95_ms,
        **fields,
    }
    path.write_text(json.dumps(data))
    return path


def config(**context) -> AppConfig:
    return AppConfig.from_context({**cdk_json_context(), **TEXT_RELEASE, **context})


def synthesized(release: AppConfig) -> tuple[float, float, int, int]:
    """(scaling target, latency threshold in ms, min and max capacity) of the text-generation
    endpoint in the release's template, as CloudFormation reads it."""
    stack = endpoint_stack(cdk.App(context=cdk_json_context()), "Endpoints", config=release)
    template = Template.from_stack(stack)
    _, policy = one(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    _, target = one(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    _, latency = one(template, "AWS::CloudWatch::Alarm", {"MetricName": "ModelLatency"})
    return (
        policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]["TargetValue"],
        latency["Properties"]["Threshold"] / 1000,
        target["Properties"]["MinCapacity"],
        target["Properties"]["MaxCapacity"],
    )


def test_the_template_carries_the_derivation_from_the_committed_measurement():
    filed(rps=0.2, p95_ms=9_000.0)
    # 0.7 x 0.2/s x 60 s = 8.4 -> 8 per instance per minute; 2 x 9 s x 1.5 = 27 s.
    assert synthesized(config()) == (8, 27_000, 1, 2)
    filed(rps=0.4, p95_ms=4_500.0)  # remeasured twice as fast: the next synthesis follows
    assert synthesized(config()) == (16, 13_500, 1, 2)


def test_the_default_release_is_refused_without_a_measurement_naming_file_and_keys(tmp_path):
    """The real directory of measurements, read by app.py as `cdk synth` runs it: the default
    release (Qwen3.5-4B on ml.c6i.2xlarge) was never measured, so synthesis stops."""
    result = run_app(tmp_path, modelDataUri=MODEL, decisionCpuImage=CPU_IMAGE)
    assert result.returncode == 1
    assert (
        "Value error, no measurement of model 'qwen3.5-4b-q4_k_m' on "
        "ml.c6i.2xlarge: stacks/measurements/qwen3.5-4b-q4_k_m/"
        "ml.c6i.2xlarge.text-generation.json does not exist"
    ) in result.stderr
    assert (
        "give textGenerationEndpoint.autoscaling.invocationsPerInstance and "
        "textGenerationEndpoint.alarms.modelLatencyP90Ms"
    ) in result.stderr
    assert "python -m ops measure --endpoint decision-models-text-generation" in result.stderr
    assert not (tmp_path / "DecisionModels-Endpoints.template.json").exists()


def test_a_measurement_taken_with_other_llama_server_flags_is_refused():
    filed(rps=0.2, p95_ms=9_000.0)
    longer = {"llamaServerArgs": {**SERVER_ARGS, "n-predict": 1024}}
    with pytest.raises(ValidationError, match=r"measured with llama-server flags .*'n-predict'"):
        config(textGenerationEndpoint={"instanceType": TYPE, **longer})


def test_a_completion_past_invoke_endpoints_60_seconds_is_refused_naming_n_predict():
    filed(rps=0.02, p95_ms=61_000.0)
    with pytest.raises(
        ValidationError, match=r"one completion of 256 tokens .*llamaServerArgs\.n-predict"
    ):
        config()


@pytest.mark.parametrize(
    "p95_ms, threshold_ms",
    [(1_000.0, 3_000), (18_000.0, 54_000), (18_400.0, capacity.ALARM_CEILING_MS)],
)
def test_the_threshold_is_a_completion_after_a_whole_one_kept_under_the_ceiling(
    p95_ms, threshold_ms
):
    measured = text_capacity.Measurement(1.0, p95_ms, max_tokens=256, source="test")
    assert text_capacity.derive(measured).model_latency_p90_ms == threshold_ms


def test_given_values_win_over_the_measurement():
    filed(rps=0.2, p95_ms=9_000.0)
    given = {"instanceType": TYPE, "alarms": {"modelLatencyP90Ms": 50_000}}
    assert synthesized(config(textGenerationEndpoint=given)) == (8, 50_000, 1, 2)


def test_a_release_deployed_to_be_measured_holds_one_instance_and_the_measuring_values():
    measuring = config(textGenerationEndpoint={"instanceType": TYPE, "measuring": True})
    assert synthesized(measuring) == (60, 60_000, 1, 1)


def test_the_clean_up_synthesizes_an_unmeasured_text_generation_endpoint():
    removal = config(forDestroy=True).text_generation_endpoint
    assert removal.unmeasured() == []
    with pytest.raises(ValidationError, match="no measurement of model 'gemma3-270m'"):
        config()
