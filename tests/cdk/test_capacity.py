"""Decision endpoint defaults come from the measurement of the release's model on its instance
type (stacks/capacity.py), or are given; without either, synthesis refuses the release."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from pydantic import ValidationError

from model_packaging.catalog import GEMMA3_270M
from ops.measure import Limits
from stacks import capacity
from stacks.app import endpoint_stack
from stacks.config import (
    AppConfig,
    DecisionCpuEndpoint,
    DecisionGpuEndpoint,
    DlcImages,
    TextGenerationEndpoint,
)
from stacks.endpoint_stack import EndpointStack
from tests.support.cdk_templates import (
    CPU_IMAGE,
    ENDPOINTS,
    GIVEN_CAPACITY,
    GPU_IMAGE,
    MODEL,
    RELEASE,
    ROOT,
    cdk_json_context,
    context_commands,
    one,
    run_app,
)
from tests.support.readme_steps import DEPLOY, block_with

SMALL = "gemma3-270m"
TYPE = "ml.c6i.large"
# A release of the small model on one CPU decision endpoint: the text-generation endpoint off
# (one scaling policy and one latency alarm in the template), the GPU one off.
SMALL_RELEASE = {
    "modelDataUri": MODEL,
    "decisionCpuImage": CPU_IMAGE,
    "builds": {"modelSpec": SMALL},
    "textGenerationEndpoint": {"enabled": False},
    "decisionCpuEndpoint": {"instanceType": TYPE},
    "decisionGpuEndpoint": {"enabled": False},
}
KEYS = (
    "decisionCpuEndpoint.maxQueue, decisionCpuEndpoint.admissionWaitS, "
    "decisionCpuEndpoint.autoscaling.invocationsPerInstance and "
    "decisionCpuEndpoint.alarms.modelLatencyP90Ms"
)


@pytest.fixture(autouse=True)
def measurements(tmp_path, monkeypatch):
    """An empty measurements directory of this test's own."""
    monkeypatch.setattr(capacity, "MEASUREMENTS", tmp_path / "measurements")
    return tmp_path / "measurements"


def filed(model: str, instance_type: str, rps: float, p95_ms: float, **fields) -> Path:
    """A measurement file as `python -m ops measure` writes it, where synthesis reads it."""
    path = capacity.measurement_path(model, instance_type)
    path.parent.mkdir(parents=True, exist_ok=True)
    pair = {"measured": True, "model": model, "instance_type": instance_type}
    figures = {"throughput_rps": rps, "service_p95_ms": p95_ms}
    path.write_text(json.dumps({**pair, **figures, **fields}))
    return path


def config(**context) -> AppConfig:
    return AppConfig.from_context({**cdk_json_context(), **context})


def refusal(**context) -> list[dict]:
    with pytest.raises(ValidationError) as raised:
        config(**context)
    return raised.value.errors()


def decision_cpu_capacity(release: AppConfig) -> tuple[str, str, float, float]:
    """(DECISION_MAX_QUEUE, DECISION_ADMISSION_WAIT_S, scaling target, latency threshold in ms)
    of the CPU decision endpoint in the release's synthesized template."""
    stack = endpoint_stack(cdk.App(context=cdk_json_context()), "Endpoints", config=release)
    template = Template.from_stack(stack)
    _, model = one(template, "AWS::SageMaker::Model")
    _, policy = one(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    _, latency = one(template, "AWS::CloudWatch::Alarm", {"MetricName": "ModelLatency"})
    environment = model["Properties"]["PrimaryContainer"]["Environment"]
    return (
        environment["DECISION_MAX_QUEUE"],
        environment["DECISION_ADMISSION_WAIT_S"],
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


def test_measurements_are_filed_by_model_and_instance_type(measurements):
    assert capacity.measurement_path(SMALL, TYPE) == measurements / SMALL / f"{TYPE}.json"
    assert capacity.measurement_path("qwen3.5-4b-q4_k_m", "ml.g6e.xlarge").parts[-2:] == (
        "qwen3.5-4b-q4_k_m",
        "ml.g6e.xlarge.json",
    )


def test_the_synthesized_defaults_follow_the_pairs_file_and_change_with_it():
    path = filed(SMALL, TYPE, rps=2.5, p95_ms=410.0)
    measured = decision_cpu_capacity(config(**SMALL_RELEASE))
    assert measured == expect(capacity.derive(_measured(2.5, 410.0)))

    # Remeasured twice as fast: the next synthesis carries the new values.
    filed(SMALL, TYPE, rps=5.0, p95_ms=205.0)
    remeasured = decision_cpu_capacity(config(**SMALL_RELEASE))
    assert remeasured == expect(capacity.derive(capacity.Measurement.read(path)))
    assert remeasured[2] > measured[2] and remeasured[3] < measured[3]


def test_a_release_without_a_measurement_is_refused_naming_pair_file_and_keys():
    (error,) = refusal(**SMALL_RELEASE)
    assert error["loc"] == ("decisionCpuEndpoint",)
    assert error["msg"] == (
        f"Value error, no measurement of model '{SMALL}' on {TYPE}: "
        f"{capacity.shown(capacity.measurement_path(SMALL, TYPE))} does not exist (the model is "
        "the spec modelDataUri names, else builds.modelSpec). Until it is measured, deploy it "
        "to be measured (`python -m ops context set decisionCpuEndpoint.measuring=true`) or "
        f"give {KEYS}; then `python -m ops "
        "measure --endpoint decision-models-decision-cpu` on the deployed endpoint writes the "
        "file of the instance type it runs on (commit it, and unset "
        "decisionCpuEndpoint.measuring or the values given)"
    )


def test_the_default_release_has_no_measurement_so_synthesis_stops(tmp_path):
    """Qwen3.5-4B on ml.c6i.2xlarge has never been measured: `cdk synth` says so and stops,
    before any template is written (the real directory of measurements, read by app.py)."""
    release = {k: v for k, v in RELEASE.items() if k not in ("decisionCpuEndpoint",)}
    result = run_app(tmp_path, **release)
    assert result.returncode == 1
    assert "Invalid configuration (cdk.json context or -c):" in result.stderr
    assert (
        "no measurement of model 'qwen3.5-4b-q4_k_m' on ml.c6i.2xlarge: stacks/measurements/"
        "qwen3.5-4b-q4_k_m/ml.c6i.2xlarge.json does not exist" in result.stderr
    )
    assert KEYS in result.stderr
    assert not list(tmp_path.glob("*.template.json"))


def test_given_values_need_no_measurement():
    parsed = config(**{**SMALL_RELEASE, "decisionCpuEndpoint": {**GIVEN_CAPACITY}})
    cpu = parsed.decision_cpu_endpoint
    assert (cpu.max_queue, cpu.admission_wait_s) == (4, 8.0)
    assert cpu.autoscaling.invocations_per_instance == 20
    assert cpu.alarms.model_latency_p90_ms == 15000
    assert decision_cpu_capacity(parsed) == ("4", "8.0", 20, 15000)


def test_a_given_value_wins_and_the_measurement_fills_the_rest():
    filed(SMALL, TYPE, rps=2.5, p95_ms=410.0)
    given = {"instanceType": TYPE, "maxQueue": 0, "alarms": {"modelLatencyP90Ms": 900}}
    parsed = config(**{**SMALL_RELEASE, "decisionCpuEndpoint": given})
    derived = capacity.derive(_measured(2.5, 410.0))
    assert decision_cpu_capacity(parsed) == (
        "0",
        str(derived.admission_wait_s),
        derived.invocations_per_instance,
        900,
    )
    # snake_case names count as given as well as camelCase ones.
    given = {"instance_type": TYPE, "max_queue": 0}
    assert (
        config(**{**SMALL_RELEASE, "decisionCpuEndpoint": given}).decision_cpu_endpoint.max_queue
        == 0
    )


def test_without_a_measurement_only_the_values_not_given_are_asked_for():
    given = {"instanceType": TYPE, "maxQueue": 0, "admissionWaitS": 2}
    (error,) = refusal(**{**SMALL_RELEASE, "decisionCpuEndpoint": given})
    assert (
        "give decisionCpuEndpoint.autoscaling.invocationsPerInstance and "
        "decisionCpuEndpoint.alarms.modelLatencyP90Ms; then" in error["msg"]
    )
    assert "maxQueue" not in error["msg"] and "admissionWaitS" not in error["msg"]


def test_the_stateful_stack_alone_and_disabled_endpoints_need_no_measurement():
    """Before a release (no modelDataUri) nothing is derived; an endpoint switched off is not
    deployed, so it needs neither a measurement nor values."""
    before = config()
    assert not before.deploys_endpoints
    assert before.decision_cpu_endpoint.unmeasured() == [
        "maxQueue",
        "admissionWaitS",
        "autoscaling.invocationsPerInstance",
        "alarms.modelLatencyP90Ms",
    ]
    released = config(**{**SMALL_RELEASE, "decisionCpuEndpoint": {"enabled": False}})
    assert released.deploys_endpoints
    assert released.decision_cpu_endpoint.max_queue is None


def test_a_gpu_pool_derives_from_its_slowest_measured_type():
    pool = ["ml.g6e.xlarge", "ml.g5.2xlarge"]
    release = {
        **SMALL_RELEASE,
        "decisionCpuEndpoint": {"enabled": False},
        "decisionGpuImage": GPU_IMAGE,
        "decisionGpuEndpoint": {"enabled": True, "instancePool": pool},
    }
    filed(SMALL, "ml.g6e.xlarge", rps=20.0, p95_ms=60.0)
    (error,) = refusal(**release)
    assert error["loc"] == ("decisionGpuEndpoint",)
    assert f"no measurement of model '{SMALL}' on ml.g5.2xlarge: " in error["msg"]
    assert "ml.g6e.xlarge" not in error["msg"].split("(the model")[0]

    filed(SMALL, "ml.g5.2xlarge", rps=8.0, p95_ms=150.0)
    gpu = config(**release).decision_gpu_endpoint
    slowest = capacity.derive(_measured(8.0, 150.0))
    assert (gpu.max_queue, gpu.admission_wait_s) == (slowest.max_queue, slowest.admission_wait_s)
    assert gpu.autoscaling.invocations_per_instance == slowest.invocations_per_instance
    assert gpu.alarms.model_latency_p90_ms == slowest.model_latency_p90_ms
    # The fastest rate and the slowest latency of two types: the rate from one, the wait from
    # the other.
    mixed = capacity.slowest(
        [capacity.Measurement(8.0, 60.0, "a"), capacity.Measurement(20.0, 150.0, "b")]
    )
    assert (mixed.throughput_rps, mixed.service_p95_ms, mixed.source) == (
        8.0,
        150.0,
        "slowest of a, b",
    )


def test_a_file_that_is_no_measurement_of_its_pair_is_refused():
    filed(SMALL, TYPE, rps=2.5, p95_ms=410.0, measured=False)
    (error,) = refusal(**SMALL_RELEASE)
    assert "is not a measurement (its 'measured' is not true)" in error["msg"]

    path = capacity.measurement_path(SMALL, TYPE)
    data = {"measured": True, "model": "qwen3.5-4b-q4_k_m", "instance_type": TYPE}
    path.write_text(json.dumps({**data, "throughput_rps": 1.0, "service_p95_ms": 900.0}))
    (error,) = refusal(**SMALL_RELEASE)
    assert (
        f"measured model 'qwen3.5-4b-q4_k_m', not '{SMALL}': a measurement is filed under the "
        "model and instance type it measured" in error["msg"]
    )


def test_the_model_of_a_spec_file_is_the_name_inside_it(tmp_path, monkeypatch):
    """The build takes a built-in spec's name or a spec file of the repository; its manifest,
    and so the measurement, names the spec's `name`."""
    monkeypatch.setattr(capacity, "ROOT", tmp_path)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "mine.json").write_text(
        GEMMA3_270M.model_copy(update={"name": "mine-270m"}).to_json()
    )
    assert config(builds={"modelSpec": "specs/mine.json"}).builds.model == "mine-270m"
    assert config(builds={"modelSpec": SMALL}).builds.model == SMALL
    filed("mine-270m", TYPE, rps=2.5, p95_ms=410.0)
    release = {**SMALL_RELEASE, "builds": {"modelSpec": "specs/mine.json"}}
    derived = capacity.derive(_measured(2.5, 410.0))
    assert config(**release).decision_cpu_endpoint.max_queue == derived.max_queue


def test_the_capacity_follows_the_model_the_archive_holds_not_the_configured_spec():
    """The model build writes the manifest's spec into the archive's key: a release of an
    archive of the small model is looked up as the small model, whatever builds.modelSpec says
    (the stateful stack's build may package another model by now)."""
    filed(SMALL, TYPE, rps=2.5, p95_ms=410.0)
    archive = f"s3://artifacts-bucket/models/{SMALL}/{'0a' * 32}/model.tar.gz"
    release = {**SMALL_RELEASE, "modelDataUri": archive, "builds": {}}
    assert config(**release).builds.model == "qwen3.5-4b-q4_k_m"
    assert config(**release).release_model == SMALL
    derived = capacity.derive(_measured(2.5, 410.0))
    assert decision_cpu_capacity(config(**release)) == expect(derived)
    # Another model in the key: its own measurement, which does not exist.
    other = archive.replace(SMALL, "smollm2-135m-instruct")
    (error,) = refusal(**{**release, "modelDataUri": other})
    assert "no measurement of model 'smollm2-135m-instruct'" in error["msg"]
    # A key without a spec (an archive uploaded by hand): builds.modelSpec's model.
    assert config(**SMALL_RELEASE).release_model == SMALL


def test_the_endpoint_stack_refuses_settings_left_to_a_measurement():
    with pytest.raises(ValueError, match="^DecisionCpu: maxQueue, admissionWaitS, "):
        EndpointStack(
            cdk.App(context=cdk_json_context()),
            "Endpoints",
            model_data_uri=MODEL,
            dlc=DlcImages(),
            text_generation=TextGenerationEndpoint(enabled=False),
            decision_cpu=DecisionCpuEndpoint(),
            decision_cpu_image=CPU_IMAGE,
            decision_gpu=DecisionGpuEndpoint(enabled=False),
            decision_gpu_image=None,
            release_model=SMALL,
        )


def _measured(throughput_rps: float, service_p95_ms: float) -> capacity.Measurement:
    return capacity.Measurement(throughput_rps, service_p95_ms, source="test")


def test_the_derivation_from_a_measurement():
    derived = capacity.derive(_measured(5.0, 250.0))
    assert derived.invocations_per_instance == 210  # 0.7 x 5/s x 60 s
    assert derived.admission_wait_s == 1.0  # four decisions of 250 ms
    assert derived.max_queue == 5  # what 5/s drains in 1 s
    assert derived.model_latency_p90_ms == 1875  # (1 s + 0.25 s) x 1.5


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


def test_readmes_deploy_steps_measure_then_deploy_again(tmp_path, monkeypatch):
    """README's deploy steps as ops receives them, on a copy of cdk.json: step 3 keeps the
    release switched to be measured, so the default release (no measurement) is deployable
    with one instance, a queue for every measuring client and the alarm at InvokeEndpoint's
    60 s; step 4 unsets the switches, and then only the committed measurement deploys it."""
    from ops.context import update

    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    release = {"MODEL_URI": MODEL, "CPU_IMAGE_URI": CPU_IMAGE}
    step_3 = context_commands(block_with(DEPLOY, 'mark-released $CPU_IMAGE_URI"'), **release)
    step_4 = context_commands(block_with(DEPLOY, "ops ARGS='measure "))
    assert [action for action, _ in step_3 + step_4] == ["set", "unset"]

    def written() -> AppConfig:
        return AppConfig.from_context(json.loads((tmp_path / "cdk.json").read_text())["context"])

    update(*step_3[0], path=tmp_path / "cdk.json")
    for endpoint in (written().decision_cpu_endpoint, written().text_generation_endpoint):
        assert endpoint.measuring and endpoint.unmeasured() == []
        assert endpoint.autoscaling.min_capacity == endpoint.autoscaling.max_capacity == 1
        assert endpoint.alarms.model_latency_p90_ms == 60_000  # InvokeEndpoint's limit
    assert written().decision_cpu_endpoint.max_queue >= Limits().max_clients - 1
    update(*step_4[0], path=tmp_path / "cdk.json")
    with pytest.raises(ValidationError, match="no measurement of model 'qwen3.5-4b-q4_k_m'"):
        written()
    # Measured (as ops measure files it): the deploy after step 4 takes its values.
    filed("qwen3.5-4b-q4_k_m", "ml.c6i.2xlarge", rps=0.5, p95_ms=2_000.0)
    text = written_text_measurement("qwen3.5-4b-q4_k_m", "ml.c6i.2xlarge")
    cpu = written().decision_cpu_endpoint
    assert not cpu.measuring and cpu.max_queue == capacity.derive(_measured(0.5, 2000.0)).max_queue
    assert written().text_generation_endpoint.alarms.model_latency_p90_ms == 2 * text * 1.5


def written_text_measurement(model: str, instance_type: str) -> float:
    """A text-generation measurement of the default flags filed for the pair; its p95 in ms."""
    from stacks import text_generation_capacity
    from stacks.config import TextGenerationEndpoint

    path = text_generation_capacity.measurement_path(model, instance_type)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"measured": True, "kind": "text-generation", "model": model}
    data |= {"instance_type": instance_type, "server_args": TextGenerationEndpoint().server_args}
    data |= {"max_tokens": 256, "throughput_rps": 0.2, "completion_p95_ms": 9_000.0}
    path.write_text(json.dumps(data))
    return 9_000.0


def test_readmes_clean_up_synthesizes_a_release_that_was_never_measured(tmp_path):
    """`make destroy` as README writes it, on a checkout whose cdk.json holds the release as
    steps 3 and 4 leave it but no measurement (a failed `ops measure`, another clone): the
    CDK CLI's context is cdk.json's plus what make passes, and the app synthesizes the endpoint
    stack to delete, not a refusal."""
    from ops.context import update
    from tests.support.make_dry_run import cdk_command
    from tests.support.readme_steps import commands

    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    release = {"MODEL_URI": MODEL, "CPU_IMAGE_URI": CPU_IMAGE}
    steps = context_commands(block_with(DEPLOY, 'mark-released $CPU_IMAGE_URI"'), **release)
    steps += context_commands(block_with(DEPLOY, "ops ARGS='measure "))
    for action, items in steps:
        update(action, items, path=tmp_path / "cdk.json")
    committed = json.loads((tmp_path / "cdk.json").read_text())["context"]

    (endpoints, _stateful) = commands(block_with(DEPLOY, "make destroy"))
    command = cdk_command(*shlex.split(endpoints)[1:])  # after `make`
    assert command[:2] == ["cdk", "destroy"]
    given = {}
    for flag, value in zip(command, command[1:], strict=False):
        if flag == "-c":
            key, _, text = value.partition("=")
            given[key] = text
    assert given == {"forDestroy": "true"}  # the release itself comes from cdk.json
    result = run_app(tmp_path / "destroy", **committed, **given)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "destroy" / f"{ENDPOINTS}.template.json").is_file()
    # The same release without the clean-up's flag is refused: the flag is what lets it pass.
    refused = run_app(tmp_path / "deploy", **committed)
    assert refused.returncode == 1 and "no measurement of model" in refused.stderr


def test_the_capacity_module_holds_the_adapters_scoring_deadline():
    from decision_adapter.settings import Settings

    assert capacity.SCORING_DEADLINE_S == Settings().scoring_deadline_s


@pytest.mark.parametrize(
    "p95_ms, wait_s, threshold_ms",
    [
        (7_000.0, 28.0, 52_500),  # (28 + 7) x 1.5: the last p95 whose threshold is derived
        (8_000.0, 32.0, capacity.ALARM_CEILING_MS),  # 60 s: could never fire, capped
        (12_500.0, 32.5, capacity.ALARM_CEILING_MS),  # 4 x p95 = 50 s: shortened to fit
        (16_000.0, 29.0, capacity.ALARM_CEILING_MS),  # 64 s: past the wait's own 60 s limit
        (44_900.0, 0.1, capacity.ALARM_CEILING_MS),
    ],
)
def test_the_wait_and_a_decision_end_inside_the_scoring_deadline(p95_ms, wait_s, threshold_ms):
    derived = capacity.derive(_measured(1.0, p95_ms))
    assert derived.admission_wait_s == wait_s
    assert derived.admission_wait_s + p95_ms / 1000 <= capacity.SCORING_DEADLINE_S
    assert derived.model_latency_p90_ms == threshold_ms < 60_000


def test_a_decision_that_fills_the_deadline_alone_is_refused_naming_the_measurement():
    with pytest.raises(capacity.NothingFits, match=r"p95 is 45000 ms.*45 s scoring deadline"):
        capacity.derive(_measured(1.0, 45_000.0))


# Gemma 3 270M's KV cell in f16: K and V of 18 layers of one 256-dimension head.
GEMMA_KV_BYTES = 2 * 18 * 256 * 2


def test_the_capacity_follows_the_concurrency_it_was_measured_at():
    """A release that scores two decisions at once takes its rate from a measurement at two:
    one taken one at a time is refused naming the key, since its rate is not this release's."""
    at_two = {"maxScoringRequests": 2, "kvBytesPerToken": GEMMA_KV_BYTES}
    batching = {
        **SMALL_RELEASE,
        "decisionCpuEndpoint": {"instanceType": TYPE, "concurrency": at_two},
    }
    filed(SMALL, TYPE, rps=2.5, p95_ms=410.0)  # recorded no concurrency: the adapter's defaults
    (error,) = refusal(**batching)
    assert error["loc"] == ("decisionCpuEndpoint",)
    assert "at concurrency.maxScoringRequests 1, the release sets 2" in error["msg"]

    at_two_measured = {"concurrency": {"max_scoring_requests": 2}, "decisions_at_once": 2}
    filed(SMALL, TYPE, rps=4.5, p95_ms=430.0, **at_two_measured)
    assert decision_cpu_capacity(config(**batching)) == expect(
        capacity.derive(_measured(4.5, 430.0))
    )
    # The measurement at two is no measurement of the release that scores one at a time.
    (error,) = refusal(**SMALL_RELEASE)
    assert "at concurrency.maxScoringRequests 2, the release sets 1" in error["msg"]


def chat_limits(release: AppConfig) -> tuple[int, float]:
    """(max tokens, deadline) of a chat on the CPU decision endpoint, as its adapter reads them
    from the synthesized Model's environment."""
    from decision_adapter.settings import Settings

    stack = endpoint_stack(cdk.App(context=cdk_json_context()), "Endpoints", config=release)
    _, model = one(Template.from_stack(stack), "AWS::SageMaker::Model")
    settings = Settings.from_environment(model["Properties"]["PrimaryContainer"]["Environment"])
    return settings.max_chat_tokens, settings.chat_deadline_s


def test_chat_on_a_decision_endpoint_ends_within_the_wait_of_a_decision_behind_it():
    """Not the adapter's 1,024 tokens and 50 s, which hold the model past every queued
    decision's wait: 256 tokens, and the measured admission wait unless the release says."""
    filed(SMALL, TYPE, rps=2.5, p95_ms=410.0)
    wait_s = capacity.derive(_measured(2.5, 410.0)).admission_wait_s
    assert chat_limits(config(**SMALL_RELEASE)) == (256, wait_s)

    given = {"instanceType": TYPE, "chat": {"maxTokens": 64, "deadlineS": 3.5}}
    assert chat_limits(config(**{**SMALL_RELEASE, "decisionCpuEndpoint": given})) == (64, 3.5)
    (error,) = refusal(**{**SMALL_RELEASE, "decisionCpuEndpoint": {"chat": {"deadlineS": 55}}})
    assert error["loc"] == ("decisionCpuEndpoint", "chat", "deadlineS")
