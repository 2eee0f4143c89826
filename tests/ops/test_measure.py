"""ops measure: the endpoint's placement (sagemaker) and its answers (sagemaker-runtime) through
botocore's Stubber; the file it writes is what synthesis reads. The run against the real
adapter is tests/ops/test_measure_rehearsal.py."""

import json
import random
import time

import pytest
from botocore.stub import ANY

from ops.cli import main
from ops.load import run_level
from ops.measure import CHAT_PROMPT, Limits
from ops.retry import Backoff, Retryable
from ops.workloads import load_decision
from stacks import capacity, text_generation_capacity
from stacks.config import TextGenerationEndpoint
from tests.ops.test_invoke import streaming
from tests.support.aws_stubs import stubbed_client
from tests.support.endpoint_descriptions import NOW, config, endpoint, pool_config, pool_variant
from tests.support.fake_service import overload_bodies

ENDPOINT = "decisions"
INVOKE = {
    "EndpointName": ENDPOINT,
    "Body": ANY,  # the load decision, its state numbered (test_every_measured_state_...)
    "ContentType": "application/json",
    "Accept": "application/json",
}


def answer(
    spec: str | None = "gemma3-270m",
    cache: str = "miss",
    total_ms: float = 250.0,
    at_once: int | None = None,
) -> dict:
    """A decision answer as the adapter writes it, its model's manifest naming `spec`, timed
    by the adapter at `total_ms`; `at_once`: the decisions it admits together, if it says."""
    manifest = {"spec": spec, "manifest_version": 1} if spec else None
    model = {"name": "Gemma-3-270M-Q4_K_M", "gguf_sha256": "ab" * 32, "manifest": manifest}
    if at_once is not None:
        model["decisions_at_once"] = at_once
    timing = {"state_cache": cache, "total_ms": total_ms}
    return {
        "result": {
            "id": "d0",
            "option_ids": ["a", "b"],
            "model": model,
            "input_tokens": 41,
            "timing": timing,
        }
    }


# The decision adapter's environment: no llama-server flags (those make a text-generation one).
ADAPTER = {"DECISION_N_THREADS": "8", "DECISION_METRICS_ENDPOINT": ENDPOINT}


def placed(
    stubber,
    instance_type="ml.c6i.2xlarge",
    instances=1,
    status="InService",
    name=ENDPOINT,
    serving: dict | None = None,
) -> None:
    """describe_endpoint and describe_endpoint_config of a fixed-type variant; with `serving`,
    then its config and model again, as ops measure reads the model's environment."""
    variant = {"VariantName": "AllTraffic", "CurrentInstanceCount": instances}
    stubber.add_response(
        "describe_endpoint",
        {**endpoint(status, [variant]), "EndpointName": name},
        expected_params={"EndpointName": name},
    )
    configured = {"VariantName": "AllTraffic", "ModelName": "m", "InstanceType": instance_type}
    stubber.add_response(
        "describe_endpoint_config",
        config([configured]),
        expected_params={"EndpointConfigName": "config-1"},
    )
    if serving is not None:
        served(stubber, [configured], serving)


def served(stubber, variants: list[dict], environment: dict) -> None:
    """The endpoint's config and its model, whose container runs with `environment`."""
    stubber.add_response(
        "describe_endpoint_config",
        config(variants),
        expected_params={"EndpointConfigName": "config-1"},
    )
    model = {"ModelName": "m", "ModelArn": "arn:aws:sagemaker:eu-west-1:123456789012:model/m"}
    container = {"Image": "image", "Environment": environment}
    stubber.add_response(
        "describe_model",
        {**model, "PrimaryContainer": container, "CreationTime": NOW},
        expected_params={"ModelName": variants[0]["ModelName"]},
    )


def answers(stubber, count: int, spec: str | None = "gemma3-270m") -> None:
    for _ in range(count):
        stubber.add_response(
            "invoke_endpoint", {"Body": streaming(answer(spec))}, expected_params=INVOKE
        )


def overloaded(stubber, retry_after_s: int) -> None:
    """The adapter's 503 as InvokeEndpoint raises it: the hint only in OriginalMessage."""
    stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        http_status_code=424,
        modeled_fields={
            "OriginalStatusCode": 503,
            "OriginalMessage": overload_bodies(retry_after_s)["decision"],
        },
        expected_params=INVOKE,
    )


@pytest.fixture
def clients():
    with stubbed_client("sagemaker") as sagemaker, stubbed_client("sagemaker-runtime") as runtime:
        yield sagemaker, runtime


@pytest.fixture
def measurements(tmp_path, monkeypatch):
    """Where synthesis reads measurements, for this test only."""
    monkeypatch.setattr(capacity, "MEASUREMENTS", tmp_path / "measurements")
    return tmp_path / "measurements"


def run(argv, clients, sleeps) -> int:
    (sagemaker, _), (runtime, _) = clients
    by_service = {"sagemaker": sagemaker, "sagemaker-runtime": runtime}
    return main(
        ["measure", "--endpoint", ENDPOINT, *argv],
        clients=by_service.__getitem__,
        sleep=sleeps.append,
        rng=random.Random(5),
    )


SMALL = ["--max-clients", "2", "--max-requests", "4"]


def test_measure_writes_the_pair_it_measured_where_synthesis_reads_it(
    clients, measurements, capsys
):
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=ADAPTER)
    # A warm-up; then 1 client x 2 requests and 2 clients x 1, one of them refused for 3 s.
    answers(runtime, 4)
    overloaded(runtime, retry_after_s=3)
    placed(sagemaker)
    sleeps = []
    assert run(SMALL, clients, sleeps) == 0
    assert sleeps == [3.0]  # the adapter's hint, from the 503's body
    written = measurements / "gemma3-270m" / "ml.c6i.2xlarge.json"
    out, err = capsys.readouterr()
    assert out == f"MEASUREMENT={written}\n"
    assert err.splitlines() == [
        "1 client(s): 2 answered, 0 refused",
        "2 client(s): 1 answered, 1 refused",
    ]
    text = written.read_text(encoding="utf-8")
    measured = json.loads(text)
    assert text == json.dumps(measured, indent=2) + "\n"
    assert (measured["measured"], measured["model"], measured["instance_type"]) == (
        True,
        "gemma3-270m",
        "ml.c6i.2xlarge",
    )
    assert measured["source"].startswith(f"python -m ops measure --endpoint {ENDPOINT} (1 ")
    assert [(lv["clients"], lv["answered"], lv["refused_503"]) for lv in measured["levels"]] == [
        (1, 2, 0),
        (2, 1, 1),
    ]
    derived = capacity.for_release("gemma3-270m", ["ml.c6i.2xlarge"])
    assert derived.measurement.throughput_rps == measured["throughput_rps"]
    assert derived.measurement.service_p95_ms == measured["service_p95_ms"]


def test_measure_writes_to_output_when_given(clients, measurements, tmp_path, capsys):
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, "ml.c7i.xlarge", serving=ADAPTER)
    answers(runtime, 2)
    placed(sagemaker, "ml.c7i.xlarge")
    output = tmp_path / "review" / "m.json"
    argv = ["--max-clients", "1", "--max-requests", "1", "--output", str(output)]
    assert run(argv, clients, []) == 0
    assert capsys.readouterr().out == f"MEASUREMENT={output}\n"
    assert json.loads(output.read_text())["instance_type"] == "ml.c7i.xlarge"
    assert "(1 instance," in json.loads(output.read_text())["source"]
    assert not measurements.exists()


def test_an_adapter_that_scores_decisions_together_is_measured_up_to_its_bound(
    clients, measurements
):
    """DECISION_MAX_SCORING_REQUESTS=2 behind the endpoint: asked for one client, ops measure
    goes on to 2 (its rate peaks where it batches), each level keeping a request per client."""
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=ADAPTER)
    for _ in range(5):  # a warm-up, then 1 client x 2 requests and 2 clients x 1
        runtime.add_response(
            "invoke_endpoint", {"Body": streaming(answer(at_once=2))}, expected_params=INVOKE
        )
    placed(sagemaker)
    assert run(["--max-clients", "1", "--max-requests", "1"], clients, []) == 0
    measured = json.loads((measurements / "gemma3-270m" / "ml.c6i.2xlarge.json").read_text())
    assert measured["decisions_at_once"] == 2
    assert [level["clients"] for level in measured["levels"]] == [1, 2]


def test_the_measurement_records_the_concurrency_the_endpoints_model_runs_with(
    clients, measurements
):
    """Read from the Model's environment, so synthesis can tell which release it measured."""
    (_, sagemaker), (_, runtime) = clients
    batching = {**ADAPTER, "DECISION_MAX_SCORING_REQUESTS": "2", "DECISION_MAX_CHAT_STREAMS": "3"}
    placed(sagemaker, serving=batching)
    for _ in range(5):
        runtime.add_response(
            "invoke_endpoint", {"Body": streaming(answer(at_once=2))}, expected_params=INVOKE
        )
    placed(sagemaker)
    assert run(["--max-clients", "1", "--max-requests", "1"], clients, []) == 0
    measured = json.loads((measurements / "gemma3-270m" / "ml.c6i.2xlarge.json").read_text())
    assert measured["concurrency"] == {
        "max_scoring_requests": 2,
        "max_chat_streams": 3,
        "chat_shared_batches": False,
    }
    at_the_release = dict(measured["concurrency"])
    capacity.for_release("gemma3-270m", ["ml.c6i.2xlarge"], concurrency=at_the_release)
    contradicted = "maxScoringRequests 2, the release sets 1"
    with pytest.raises(capacity.ContradictedMeasurement, match=contradicted):
        capacity.for_release("gemma3-270m", ["ml.c6i.2xlarge"])


@pytest.mark.parametrize(
    ("limits", "clients", "reached"),
    [
        (Limits(8, 400), 4, Limits(8, 400)),
        (Limits(8, 400), 16, Limits(16, 500)),
        (Limits(1, 1), 64, Limits(64, 448)),
    ],
)
def test_limits_reaching_a_concurrency_keep_each_levels_share(limits, clients, reached):
    assert limits.reaching(clients) == reached


def test_measure_refuses_more_than_one_instance(clients, measurements, capsys):
    """Its rate is per instance, and SageMaker spreads requests over instances unevenly."""
    (_, sagemaker), _ = clients
    placed(sagemaker, instances=2)
    assert run([], clients, []) == 1
    assert capsys.readouterr().err == (
        f"ops: error: endpoint {ENDPOINT} runs 2 instances: a measurement is of one (deploy it "
        "with `measuring` on, or autoscaling minCapacity = maxCapacity = 1)\n"
    )
    assert not measurements.exists()


def test_latency_is_the_adapters_own_timing_not_the_round_trip(clients, measurements):
    """The operator's network is no part of the endpoint's latency: the file's p95 is the
    adapter's timing.total_ms, however long the round trip took."""
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=ADAPTER)
    runtime.add_response("invoke_endpoint", {"Body": streaming(answer())}, expected_params=INVOKE)
    for total_ms in (120.0, 480.0):
        runtime.add_response(
            "invoke_endpoint",
            {"Body": streaming(answer(total_ms=total_ms))},
            expected_params=INVOKE,
        )
    placed(sagemaker)
    assert run(["--max-clients", "1", "--max-requests", "2"], clients, []) == 0
    measured = json.loads((measurements / "gemma3-270m" / "ml.c6i.2xlarge.json").read_text())
    assert measured["service_p95_ms"] == 480.0
    assert measured["latency"] == "the adapter's timing.total_ms"


def test_measure_refuses_an_endpoint_whose_capacity_changed_while_measured(
    clients, measurements, capsys
):
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=ADAPTER)
    answers(runtime, 2)
    placed(sagemaker, instances=2)
    assert run(["--max-clients", "1", "--max-requests", "1"], clients, []) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"ops: error: endpoint {ENDPOINT} went from 1 instance(s) of ml.c6i.2xlarge to 2 of "
        "ml.c6i.2xlarge while measured: hold its capacity (autoscaling minCapacity = "
        "maxCapacity) and measure again"
    )
    assert not measurements.exists()


def test_measure_refuses_a_pool_that_runs_on_two_types(clients, capsys):
    (_, sagemaker), _ = clients
    sagemaker.add_response(
        "describe_endpoint",
        endpoint("InService", [pool_variant("gpu", {"ml.g6e.xlarge": 1, "ml.g5.xlarge": 1})]),
    )
    sagemaker.add_response(
        "describe_endpoint_config", config([pool_config("gpu", ["ml.g6e.xlarge", "ml.g5.xlarge"])])
    )
    assert run([], clients, []) == 1
    assert capsys.readouterr().err == (
        f"ops: error: endpoint {ENDPOINT} runs on ml.g6e.xlarge, ml.g5.xlarge: a measurement "
        "is of one instance type (deploy a pool of one type to measure it)\n"
    )


def test_measure_takes_a_pools_one_running_type(clients, measurements):
    (_, sagemaker), (_, runtime) = clients
    pool = pool_config("gpu", ["ml.g6e.xlarge", "ml.g5.xlarge"])
    for placement in range(2):
        sagemaker.add_response(
            "describe_endpoint",
            endpoint("InService", [pool_variant("gpu", {"ml.g6e.xlarge": 0, "ml.g5.xlarge": 1})]),
        )
        sagemaker.add_response("describe_endpoint_config", config([pool]))
        if placement == 0:
            served(sagemaker, [pool], ADAPTER)
    answers(runtime, 2, spec="qwen3.5-4b-q4_k_m")
    assert run(["--max-clients", "1", "--max-requests", "1"], clients, []) == 0
    assert (measurements / "qwen3.5-4b-q4_k_m" / "ml.g5.xlarge.json").is_file()


def test_measure_refuses_an_endpoint_not_in_service(clients, capsys):
    (_, sagemaker), _ = clients
    placed(sagemaker, status="Updating")
    assert run([], clients, []) == 1
    assert capsys.readouterr().err == (
        f"ops: error: endpoint {ENDPOINT} is Updating, not InService\n"
    )


def test_measure_refuses_a_model_without_a_manifest(clients, measurements, capsys):
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=ADAPTER)
    answers(runtime, 1, spec=None)
    assert run([], clients, []) == 1
    assert capsys.readouterr().err == (
        "ops: error: the answer names no packaged model (model.manifest.spec): the endpoint "
        "does not serve a model archive built by `python -m ops build model`\n"
    )
    assert not measurements.exists()


def test_measure_stops_at_a_failure_that_is_not_backpressure(clients, measurements, capsys):
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=ADAPTER)
    answers(runtime, 1)
    runtime.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        http_status_code=424,
        modeled_fields={"OriginalStatusCode": 500, "OriginalMessage": '{"error": "boom"}'},
    )
    assert run(["--max-clients", "1", "--max-requests", "1"], clients, []) == 1
    assert capsys.readouterr().err == ('ops: error: container answered 500: {"error": "boom"}\n')
    assert not measurements.exists()


def test_measure_gives_up_when_the_warm_up_is_refused_every_time(clients, capsys):
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=ADAPTER)
    for _ in range(6):  # Backoff's attempts
        overloaded(runtime, retry_after_s=1)
    sleeps = []
    assert run([], clients, sleeps) == 1
    assert len(sleeps) == 5 and min(sleeps) >= 1.0
    assert capsys.readouterr().err == (
        "ops: error: gave up after 6 attempts: container answered 503\n"
    )


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--max-clients", "0"], "--max-clients must be at least 1 and --max-minutes above 0"),
        (["--max-minutes", "0"], "--max-clients must be at least 1 and --max-minutes above 0"),
        (
            ["--max-clients", "8", "--max-requests", "31"],
            "--max-requests must give each of the 4 levels a request per client: at least 32",
        ),
    ],
)
def test_measure_refuses_limits_that_measure_nothing(clients, capsys, argv, complaint):
    assert run(argv, clients, []) == 2
    assert capsys.readouterr().err == f"ops: error: {complaint}\n"


def test_measure_needs_an_endpoint(monkeypatch, capsys):
    monkeypatch.delenv("OPS_ENDPOINT_NAME", raising=False)
    assert main(["measure"], clients={}.__getitem__) == 2
    assert capsys.readouterr().err == (
        "ops: error: pass --endpoint NAME or set OPS_ENDPOINT_NAME\n"
    )


@pytest.mark.parametrize(
    ("max_clients", "levels"),
    [(1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8]), (9, [1, 2, 4, 8, 9])],
)
def test_levels_double_from_one_and_end_at_the_most_clients(max_clients, levels):
    assert Limits(max_clients=max_clients, max_requests=1000).levels() == levels


def test_the_defaults_bound_a_run_to_400_requests_and_10_minutes():
    from ops.cli import build_parser

    args = build_parser().parse_args(["measure"])
    assert (args.max_clients, args.max_requests, args.max_minutes, args.output) == (
        8,
        400,
        10.0,
        None,
    )
    assert Limits().levels() == [1, 2, 4, 8]


def test_a_level_sends_nothing_after_its_end():
    calls = []
    level = run_level(lambda: calls.append(1), 4, 10, until=time.perf_counter() - 1)
    assert calls == [] and level.answered == [] and level.refused == 0


def test_refusals_in_a_row_back_off_and_the_hint_is_a_floor():
    outcomes = [Retryable("busy"), Retryable("busy"), Retryable("busy", 2.0), None, Retryable("b")]

    def send():
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    sleeps = []
    level = run_level(send, 1, 5, sleep=sleeps.append, backoff=Backoff(), rng=random.Random(7))
    assert (len(level.answered), level.refused) == (1, 4)
    same = random.Random(7)
    # Each refusal in a row doubles the ceiling of the jittered delay; an answer starts again.
    expected = [Backoff().delay(n, hint, same) for n, hint in ((0, None), (1, None), (2, 2.0))]
    expected.append(Backoff().delay(0, None, same))
    assert sleeps == expected
    assert sleeps[2] >= 2.0


def test_a_pause_ends_with_its_level():
    sleeps = []

    def refused():
        raise Retryable("busy", 30.0)

    until = time.perf_counter() + 0.5
    run_level(refused, 1, 1, sleep=sleeps.append, until=until, backoff=Backoff())
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= 0.5


def test_every_measured_state_is_new_and_what_was_read_is_recorded(clients, measurements):
    """A repeated state is a state-cache hit, answered without its prefill: a measurement of the
    cache. Each request numbers its state; the file says how the answers were read."""
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=ADAPTER)
    answers(runtime, 5)
    placed(sagemaker)
    assert run(SMALL, clients, []) == 0
    measured = json.loads((measurements / "gemma3-270m" / "ml.c6i.2xlarge.json").read_text())
    assert measured["requests"]["state_cache"] == {"miss": 4}
    assert measured["requests"]["input_tokens"] == {"min": 41, "max": 41}
    assert len(measured["requests"]["bodies_sha256"]) == 64


def test_measured_bodies_differ_in_their_state_only():
    from ops.measure import MeasuredBodies

    bodies = MeasuredBodies()
    sent = [json.loads(bodies.next()) for _ in range(3)]
    states = [body["decision"].pop("state") for body in sent]
    assert len(set(states)) == 3 and all(load_decision()["decision"]["state"] in s for s in states)
    assert sent[0] == sent[1] == sent[2]


def test_a_run_whose_answers_came_from_the_state_cache_is_refused(clients, capsys):
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=ADAPTER)
    runtime.add_response("invoke_endpoint", {"Body": streaming(answer())}, expected_params=INVOKE)
    for _ in range(4):
        runtime.add_response(
            "invoke_endpoint", {"Body": streaming(answer(cache="hit"))}, expected_params=INVOKE
        )
    placed(sagemaker)
    assert run(SMALL, clients, []) == 1
    assert "4 of 4 measured answers came from the state cache" in capsys.readouterr().err


# --- the text-generation endpoint (llama-server as the DLC runs it) ----------------------------
# Its model's environment as the endpoint stack writes it: llama-server flags, the alias the model.
SERVER = {
    "SM_LLAMA_CPP_CTX_SIZE": "8192",
    "SM_LLAMA_CPP_THREADS": "8",
    "SM_LLAMA_CPP_PARALLEL": "2",
    "SM_LLAMA_CPP_N_PREDICT": "256",
    "SM_LLAMA_CPP_ALIAS": "gemma3-270m",
}


def completion(
    predicted_ms: float,
    predicted_n: int = 256,
    prompt_ms: float = 200.0,
    prompt_n: int = 30,
    model: str = "gemma3-270m",
) -> dict:
    """A chat completion as llama-server answers it, with its own timings."""
    message = {"role": "assistant", "content": "Once upon a time"}
    return {
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
        "usage": {"prompt_tokens": prompt_n, "completion_tokens": predicted_n, "total_tokens": 286},
        "timings": {
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "predicted_n": predicted_n,
            "predicted_ms": predicted_ms,
        },
    }


def completions(stubber, *predicted_ms: float, **fields) -> None:
    for ms in predicted_ms:
        stubber.add_response(
            "invoke_endpoint", {"Body": streaming(completion(ms, **fields))}, expected_params=INVOKE
        )


def test_a_text_generation_endpoint_is_measured_at_its_n_predict_and_filed_for_synthesis(
    clients, measurements, capsys
):
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=SERVER)
    # A warm-up; one client twice (8.2 s and 9.2 s of llama-server's own time); then one client
    # per slot, each completion slower with the other slot busy (16 s).
    completions(runtime, 9_000.0, 8_000.0, 9_000.0, 15_800.0, 15_800.0)
    placed(sagemaker)
    assert run(SMALL, clients, []) == 0
    written = measurements / "gemma3-270m" / "ml.c6i.2xlarge.text-generation.json"
    assert capsys.readouterr().out == f"MEASUREMENT={written}\n"
    measured = json.loads(written.read_text())
    assert (measured["kind"], measured["max_tokens"], measured["slots"]) == (
        "text-generation",
        256,
        2,
    )
    assert measured["server_args"] == {
        "ctx-size": "8192",
        "threads": "8",
        "parallel": "2",
        "n-predict": "256",
    }
    assert measured["completion_p95_ms"] == 9_200.0
    assert measured["requests"]["count"] == 4  # the warm-up checked, not counted
    assert measured["throughput_rps"] == 0.125  # two slots, 16 s each
    # What synthesis derives from it, with the flags the config renders.
    derived = text_generation_capacity.for_release(
        "gemma3-270m", "ml.c6i.2xlarge", TextGenerationEndpoint().server_args
    )
    assert (derived.invocations_per_instance, derived.model_latency_p90_ms) == (5, 27_600)


def test_a_completion_cut_short_of_n_predict_refuses_the_run(clients, measurements, capsys):
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=SERVER)
    runtime.add_response(
        "invoke_endpoint",
        {"Body": streaming(completion(3_000.0, predicted_n=100))},
        expected_params=INVOKE,
    )
    assert run([], clients, []) == 1
    assert capsys.readouterr().err.startswith(
        "ops: error: a completion generated 100 of its 256 tokens"
    )
    assert not measurements.exists()


def test_measured_completions_are_new_prompts_held_to_n_predict():
    from ops.measure import MeasuredCompletions

    bodies = MeasuredCompletions(256)
    sent = [json.loads(bodies.next()) for _ in range(3)]
    prompts = [body.pop("messages")[0]["content"] for body in sent]
    assert len(set(prompts)) == 3
    assert sent[0] == {"max_tokens": 256, "ignore_eos": True, "cache_prompt": False}
    for number, body in enumerate(sent):
        assert prompts[number] == f"Request {number}. {CHAT_PROMPT}"
        assert body == sent[0]
    roles = [json.loads(bodies.next())["messages"][0]["role"] for _ in range(2)]
    assert roles == ["user", "user"]


def test_a_text_generation_measurement_says_what_was_run_and_what_llama_server_timed(
    clients, measurements
):
    """The whole file: the workload and the source; the prompts' sizes, of the measured
    completions only; one client's p95 and the busy slots' rate from llama-server's own
    timings (prefill and generation); the tokens generated per second of each completion."""
    from ops.measure import MeasuredCompletions

    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=SERVER)
    completions(runtime, 9_000.0, prompt_n=10)  # the warm-up: checked, not counted
    runtime.add_response(
        "invoke_endpoint",
        {"Body": streaming(completion(8_000.0, prompt_n=31))},
        expected_params=INVOKE,
    )
    runtime.add_response(
        "invoke_endpoint",
        {"Body": streaming(completion(9_000.125, prompt_n=29))},
        expected_params=INVOKE,
    )
    # Both slots busy: 16.0 s, 16.1 s.
    completions(runtime, 15_800.0, prompt_n=32)
    completions(runtime, 15_900.0, prompt_n=33)
    placed(sagemaker)
    day = time.strftime("%Y-%m-%d", time.gmtime())
    assert run(SMALL, clients, []) == 0
    written = measurements / "gemma3-270m" / "ml.c6i.2xlarge.text-generation.json"
    measured = json.loads(written.read_text())
    sent = MeasuredCompletions(256)
    for _ in range(5):
        sent.next()
    levels = measured.pop("levels")
    assert measured == {
        "measured": True,
        "kind": "text-generation",
        "model": "gemma3-270m",
        "instance_type": "ml.c6i.2xlarge",
        "server_args": {"ctx-size": "8192", "threads": "8", "parallel": "2", "n-predict": "256"},
        "max_tokens": 256,
        "slots": 2,
        "source": f"python -m ops measure --endpoint {ENDPOINT} (1 instance, {day})",
        "workload": "chat completions of 256 tokens (ignore_eos), each prompt numbered",
        "latency": "llama-server's timings (prompt_ms + predicted_ms)",
        "requests": {
            "count": 4,
            "prompt_tokens": {"min": 29, "max": 33},
            "bodies_sha256": sent.digest.hexdigest(),
        },
        "throughput_rps": 0.1246,  # 2 slots / 16.05 s
        "completion_p95_ms": 9_200.12,
        "tokens_per_s": 23.19,  # 256 tokens in 8, 9.000125, 15.8 and 15.9 s
    }
    assert [(lv["clients"], lv["answered"], lv["refused_503"]) for lv in levels] == [
        (1, 2, 0),
        (2, 2, 0),
    ]
    assert [lv["p95_ms"] for lv in levels] == [9_200.12, 16_100.0]


def test_a_server_without_parallel_has_one_slot_measured_at_one_client(clients, measurements):
    (_, sagemaker), (_, runtime) = clients
    serial = {k: v for k, v in SERVER.items() if k != "SM_LLAMA_CPP_PARALLEL"}
    placed(sagemaker, serving=serial)
    completions(runtime, 9_000.0, 7_800.0, 7_800.0, 9_800.0, 9_800.0)
    placed(sagemaker)
    assert run(SMALL, clients, []) == 0
    written = measurements / "gemma3-270m" / "ml.c6i.2xlarge.text-generation.json"
    measured = json.loads(written.read_text())
    assert (measured["slots"], [lv["clients"] for lv in measured["levels"]]) == (1, [1])
    assert measured["requests"]["count"] == 4  # one level: all four requests
    assert measured["throughput_rps"] == 0.1111  # 1 slot / 9 s
    assert measured["completion_p95_ms"] == 10_000.0


def test_a_refused_completion_is_waited_out_with_the_runs_backoff(clients, measurements, capsys):
    """A 503 at the warm-up and in a level: each waited out with the jittered backoff, drawn
    from the run's random source, and counted at its level."""
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=SERVER)
    overloaded(runtime, 0)
    completions(runtime, 9_000.0)
    overloaded(runtime, 0)
    completions(runtime, 8_000.0, 15_800.0, 15_800.0)
    placed(sagemaker)
    sleeps: list[float] = []
    assert run(SMALL, clients, sleeps) == 0
    rng = random.Random(5)
    assert sleeps == [rng.uniform(0.0, 0.5), rng.uniform(0.0, 0.5)]
    written = measurements / "gemma3-270m" / "ml.c6i.2xlarge.text-generation.json"
    levels = json.loads(written.read_text())["levels"]
    assert [(lv["answered"], lv["refused_503"]) for lv in levels] == [(1, 1), (2, 0)]
    assert capsys.readouterr().err.splitlines()[:1] == ["1 client(s): 1 answered, 1 refused"]


def test_a_text_generation_endpoint_without_n_predict_is_not_measured(clients, capsys):
    (_, sagemaker), _ = clients  # nothing sent: no completion queued
    unbounded = {k: v for k, v in SERVER.items() if k != "SM_LLAMA_CPP_N_PREDICT"}
    placed(sagemaker, serving=unbounded)
    assert run(SMALL, clients, []) == 1
    assert capsys.readouterr().err == (
        f"ops: error: endpoint {ENDPOINT} runs llama-server without n-predict: a completion has"
        " no length to measure at (textGenerationEndpoint.llamaServerArgs)\n"
    )


def test_a_text_generation_endpoint_whose_instances_changed_is_not_written(
    clients, measurements, capsys
):
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=SERVER)
    completions(runtime, 9_000.0, 8_000.0, 9_000.0, 15_800.0, 15_800.0)
    placed(sagemaker, instances=2)
    assert run(SMALL, clients, []) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"ops: error: endpoint {ENDPOINT} changed its instances while measured: hold its"
        " capacity (autoscaling minCapacity = maxCapacity = 1) and measure again"
    )
    assert not measurements.exists()


def test_a_level_without_one_completion_refuses_the_run(clients, measurements, capsys):
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=SERVER)
    completions(runtime, 9_000.0)
    overloaded(runtime, 0)
    overloaded(runtime, 0)  # one client's two requests, both refused
    completions(runtime, 15_800.0, 15_800.0)
    placed(sagemaker)
    assert run(SMALL, clients, []) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "ops: error: no completion answered at 1 client(s)"
    )
    assert not measurements.exists()


@pytest.mark.parametrize(
    "models, named",
    [(["gemma3-270m", "qwen2.5-0.5b"], "['gemma3-270m', 'qwen2.5-0.5b']"), ([""], "['']")],
)
def test_answers_that_do_not_name_one_model_refuse_the_run(
    clients, measurements, capsys, models, named
):
    """The file is filed under the model the answers name: two models, or a nameless one,
    give no such place."""
    (_, sagemaker), (_, runtime) = clients
    placed(sagemaker, serving=SERVER)
    completions(runtime, 9_000.0)
    for model in [models[0], models[-1]]:
        completions(runtime, 8_000.0, model=model)
    completions(runtime, 15_800.0, 15_800.0, model=models[0])
    placed(sagemaker)
    assert run(SMALL, clients, []) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"ops: error: the answers name models {named}, not one"
    )
    assert not measurements.exists()


@pytest.mark.parametrize(
    ("lines", "complaint"),
    [
        ('{"decision": {}}\n{"prompt": "hi"}\n', "line 2: neither a decision"),
        ('{"decision": {}}\nnot json\n', "line 2: not JSON"),
        ('{"messages": []}\n', "holds no decision"),
    ],
)
def test_a_body_file_that_is_not_decisions_and_chats_is_refused_naming_the_line(
    clients, capsys, tmp_path, lines, complaint
):
    body = tmp_path / "requests.jsonl"
    body.write_text(lines)
    assert run(["--body", str(body)], clients, []) != 0
    assert complaint in capsys.readouterr().err
