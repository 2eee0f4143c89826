"""Decision endpoint defaults come from the committed measurements (stacks/capacity.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from stacks import capacity
from stacks.config import (
    DecisionCpuEndpoint,
    DecisionGpuEndpoint,
    DlcImages,
    TextGenerationEndpoint,
)
from stacks.endpoint_stack import EndpointStack
from tests.cdk_templates import CPU_IMAGE, MODEL, cdk_json_context, one

# The concurrency section of the idle `make bench` run the CPU figures were taken from.
BENCH = Path(__file__).with_name("data") / "bench_concurrency.json"
CPU = capacity.MEASUREMENTS["decision-cpu"]


def test_the_cpu_figures_are_the_benchs_queued_concurrency_run():
    """Read here independently of the module: the median rate of the queued levels and the
    one-client p95 of the bench results; the committed figures file holds them."""
    runs = json.loads(BENCH.read_text())["concurrency"]["runs"]
    (queued,) = [run for run in runs if run["max_queue"] > 0]
    rates = sorted(row["throughput_rps"] for row in queued["rows"])
    (single,) = [row for row in queued["rows"] if row["clients"] == 1]
    measured = capacity.Measurement.read(BENCH)
    assert measured.throughput_rps == rates[len(rates) // 2]
    assert measured.service_p95_ms == single["latency"]["p95_ms"]
    assert measured.measured
    committed = capacity.Measurement.read(CPU)
    assert committed.measured
    assert committed.throughput_rps == pytest.approx(measured.throughput_rps, abs=5e-4)
    assert committed.service_p95_ms == pytest.approx(measured.service_p95_ms, abs=0.05)


def test_the_derivation_from_a_measurement():
    derived = capacity.derive(
        capacity.Measurement(throughput_rps=5.0, service_p95_ms=250.0, measured=True, source="x")
    )
    assert derived.invocations_per_instance == 210  # 0.7 x 5/s x 60 s
    assert derived.admission_wait_s == 1.0  # four decisions of 250 ms
    assert derived.max_queue == 5  # what 5/s drains in 1 s
    assert derived.model_latency_p90_ms == 1875  # (1 s + 0.25 s) x 1.5


def test_the_gpu_figure_is_marked_as_no_measurement():
    data = json.loads(capacity.MEASUREMENTS["decision-gpu"].read_text())
    assert data["measured"] is False
    assert "NOT A MEASUREMENT" in data["note"]
    # Conservative: no faster than the CPU stand-in.
    assert data["throughput_rps"] <= capacity.Measurement.read(BENCH).throughput_rps


def synthesized_cpu(settings: DecisionCpuEndpoint) -> tuple[dict, float, float]:
    """(environment, scaling target, latency threshold in ms) of the decision CPU endpoint."""
    stack = EndpointStack(
        cdk.App(context=cdk_json_context()),
        "Endpoints",
        model_data_uri=MODEL,
        dlc=DlcImages(),
        text_generation=TextGenerationEndpoint(enabled=False),
        decision_cpu=settings,
        decision_cpu_image=CPU_IMAGE,
        decision_gpu=DecisionGpuEndpoint(enabled=False),
        decision_gpu_image=None,
    )
    template = Template.from_stack(stack)
    _, model = one(template, "AWS::SageMaker::Model")
    _, policy = one(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    _, latency = one(template, "AWS::CloudWatch::Alarm", {"MetricName": "ModelLatency"})
    return (
        model["Properties"]["PrimaryContainer"]["Environment"],
        policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]["TargetValue"],
        latency["Properties"]["Threshold"] / 1000,
    )


def expect(derived: capacity.Capacity) -> tuple[str, str, float, float]:
    return (
        str(derived.max_queue),
        str(derived.admission_wait_s),
        derived.invocations_per_instance,
        derived.model_latency_p90_ms,
    )


def observed(synthesized: tuple[dict, float, float]) -> tuple[str, str, float, float]:
    environment, target, latency_ms = synthesized
    return (
        environment["DECISION_MAX_QUEUE"],
        environment["DECISION_ADMISSION_WAIT_S"],
        target,
        latency_ms,
    )


def test_synthesized_defaults_follow_the_committed_file_and_change_with_it(tmp_path, monkeypatch):
    committed = observed(synthesized_cpu(DecisionCpuEndpoint()))
    assert committed == expect(capacity.derive(capacity.Measurement.read(CPU)))

    # The same figures for an instance twice as fast and half as slow per decision.
    data = json.loads(CPU.read_text())
    data["throughput_rps"] *= 2
    data["service_p95_ms"] /= 2
    faster = tmp_path / "faster.json"
    faster.write_text(json.dumps(data))
    monkeypatch.setitem(capacity.MEASUREMENTS, "decision-cpu", faster)
    remeasured = observed(synthesized_cpu(DecisionCpuEndpoint()))
    assert remeasured == expect(capacity.derive(capacity.Measurement.read(faster)))
    assert remeasured[2] > committed[2] and remeasured[3] < committed[3]


def test_a_value_in_the_config_wins_over_the_derivation():
    settings = DecisionCpuEndpoint.model_validate(
        {"maxQueue": 0, "autoscaling": {"maxCapacity": 4}, "alarms": {"modelLatencyP90Ms": 900}}
    )
    derived = capacity.for_endpoint("decision-cpu")
    assert settings.max_queue == 0
    assert settings.admission_wait_s == derived.admission_wait_s
    assert settings.autoscaling.max_capacity == 4
    assert settings.autoscaling.invocations_per_instance == derived.invocations_per_instance
    assert settings.alarms.model_latency_p90_ms == 900
    # snake_case names win as well as camelCase ones.
    assert DecisionCpuEndpoint.model_validate({"max_queue": 0}).max_queue == 0


def test_a_bench_file_without_a_queued_run_is_refused(tmp_path):
    data = json.loads(BENCH.read_text())
    data["concurrency"]["runs"] = [r for r in data["concurrency"]["runs"] if not r["max_queue"]]
    path = tmp_path / "unqueued.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="no queued concurrency run"):
        capacity.Measurement.read(path)


def test_the_gpu_endpoint_derives_from_its_file():
    figures = json.loads(capacity.MEASUREMENTS["decision-gpu"].read_text())
    settings = DecisionGpuEndpoint()
    assert settings.autoscaling.invocations_per_instance == math.floor(
        capacity.UTILISATION * figures["throughput_rps"] * 60
    )


def _measured(throughput_rps: float, service_p95_ms: float) -> capacity.Measurement:
    return capacity.Measurement(throughput_rps, service_p95_ms, measured=True, source="test")


def test_the_wait_is_rounded_to_a_tenth_and_the_queue_is_what_the_rate_drains_in_it():
    derived = capacity.derive(_measured(3.0, 212.0))
    assert derived.admission_wait_s == 0.8  # 4 x 212 ms, to a tenth of a second
    assert derived.max_queue == 3  # 3/s x 0.8 s, rounded up
    assert derived.measurement == _measured(3.0, 212.0)  # what `python -m stacks.capacity` shows


def test_the_latency_threshold_rounds_up_to_the_next_millisecond():
    # (0.8 s + 0.2001 s) x 1.5 = 1500.15 ms
    assert capacity.derive(_measured(5.0, 200.1)).model_latency_p90_ms == 1501


def test_a_very_slow_instance_still_scales_at_one_invocation_per_minute():
    assert capacity.derive(_measured(0.01, 200.0)).invocations_per_instance == 1


def _bench(rows: list[dict], max_queue: int = 1) -> dict:
    return {"concurrency": {"runs": [{"max_queue": max_queue, "rows": rows}]}}


def _row(clients: int, rps: float, p95_ms: float = 300.0, errors: int = 0) -> dict:
    return {
        "clients": clients,
        "answered": 10,
        "errors": errors,
        "throughput_rps": rps,
        "latency": {"p95_ms": p95_ms},
    }


def test_a_bench_level_with_errors_does_not_count_and_any_queue_does():
    rows = [_row(1, 2.0, 300.0), _row(2, 4.0, 500.0), _row(4, 100.0, errors=3)]
    measured = capacity.Measurement.from_bench(_bench(rows, max_queue=1), source="b.json")
    assert (measured.throughput_rps, measured.service_p95_ms) == (3.0, 300.0)
    assert measured.source == "b.json"
    with pytest.raises(ValueError, match="b.json: no queued concurrency run"):
        capacity.Measurement.from_bench(_bench([_row(2, 4.0)]), source="b.json")


def test_a_measurement_names_the_file_it_was_read_from(tmp_path):
    assert capacity.Measurement.read(CPU).source == str(CPU)
    assert capacity.Measurement.read(BENCH).source == str(BENCH)
