"""ops load: closed-loop load through botocore's Stubber, written as capacity figures."""

import json
import threading
import time

import pytest

from ops.cli import build_parser, main
from ops.load import Level, figures, p95, run_level
from ops.retry import Retryable
from stacks import capacity
from tests.ops.test_invoke import DECISION_ANSWER, busy, invoke_params, streaming


def answer(stubber):
    stubber.add_response(
        "invoke_endpoint", {"Body": streaming(DECISION_ANSWER)}, expected_params=invoke_params()
    )


BAD_COUNTS = "--clients must include 1; counts, --requests, --instances at least 1"


def run(argv, client, sleeps):
    return main(argv, clients={"sagemaker-runtime": client}.__getitem__, sleep=sleeps.append)


def test_load_writes_figures_that_the_capacity_derivation_reads(
    runtime, body_file, tmp_path, capsys
):
    client, stubber = runtime
    # One client, two requests; then two clients, two requests each, one refused with a hint.
    for _ in range(3):
        answer(stubber)
    busy(stubber, HTTPHeaders={"retry-after": "2"})
    for _ in range(2):
        answer(stubber)
    output = tmp_path / "figures.json"
    sleeps = []
    argv = ["load", "--endpoint", "decisions", str(body_file), "--clients", "1,2"]
    argv += ["--requests", "2", "--instances", "2", "--output", str(output)]
    assert run(argv, client, sleeps) == 0
    assert sleeps == [2.0]  # the refused client waited the retry hint
    assert capsys.readouterr().err.splitlines() == [
        "1 client(s): 2 answered, 0 refused",
        "2 client(s): 3 answered, 1 refused",
    ]
    text = output.read_text(encoding="utf-8")
    figures = json.loads(text)
    assert text == json.dumps(figures, indent=2) + "\n"
    assert figures["measured"] is True
    levels = figures["levels"]
    assert [(lv["clients"], lv["answered"], lv["refused_503"]) for lv in levels] == [
        (1, 2, 0),
        (2, 3, 1),
    ]
    rates = sorted(lv["throughput_rps_per_instance"] for lv in levels)
    assert figures["throughput_rps"] == pytest.approx(sum(rates) / 2, abs=0.002)
    assert figures["service_p95_ms"] == pytest.approx(levels[0]["p95_ms"], abs=0.01)
    measured = capacity.Measurement.read(output)
    assert measured.throughput_rps == figures["throughput_rps"]
    assert capacity.derive(measured).invocations_per_instance >= 1


def test_load_prints_the_figures_without_output(runtime, body_file, capsys):
    client, stubber = runtime
    answer(stubber)
    argv = ["load", "--endpoint", "decisions", str(body_file), "--clients", "1", "--requests", "1"]
    assert run(argv, client, []) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["levels"][0]["answered"] == 1
    assert out == json.dumps(json.loads(out), indent=2) + "\n"


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        (["--clients", "2,4"], BAD_COUNTS),
        (["--clients", "0,1"], BAD_COUNTS),
        (["--requests", "0"], BAD_COUNTS),
        (["--instances", "0"], BAD_COUNTS),
        (["--clients", "1,x"], "--clients expects counts such as 1,2,4, got '1,x'"),
        (["--clients", "1;2"], "--clients expects counts such as 1,2,4, got '1;2'"),
    ],
)
def test_load_refuses_bad_options(runtime, body_file, capsys, extra, complaint):
    client, _ = runtime
    assert run(["load", "--endpoint", "decisions", str(body_file), *extra], client, []) == 2
    assert capsys.readouterr().err == f"ops: error: {complaint}\n"


def test_load_takes_the_endpoint_from_the_environment(runtime, body_file, monkeypatch, capsys):
    client, stubber = runtime
    argv = ["load", str(body_file), "--clients", "1", "--requests", "1"]
    monkeypatch.delenv("OPS_ENDPOINT_NAME", raising=False)
    assert run(argv, client, []) == 2
    assert capsys.readouterr().err == (
        "ops: error: pass --endpoint NAME or set OPS_ENDPOINT_NAME\n"
    )
    monkeypatch.setenv("OPS_ENDPOINT_NAME", "decisions")
    answer(stubber)
    assert run(argv, client, []) == 0
    assert json.loads(capsys.readouterr().out)["source"] == (
        "python -m ops load --endpoint decisions (1 instance(s))"
    )


def test_load_defaults_four_levels_of_fifty_requests_on_one_instance():
    args = build_parser().parse_args(["load", "body.json"])
    assert (args.clients, args.requests, args.instances, args.output) == ("1,2,4,8", 50, 1, None)
    args = build_parser().parse_args(["load", "b.json", "--requests", "3", "--instances", "2"])
    assert (args.requests, args.instances) == (3, 2)


def test_load_stops_at_a_failure_that_is_not_backpressure(runtime, body_file, capsys):
    client, stubber = runtime
    busy(stubber, status=500)
    argv = ["load", "--endpoint", "decisions", str(body_file), "--clients", "1", "--requests", "1"]
    assert run(argv, client, []) == 1
    assert capsys.readouterr().err == (
        'ops: error: container answered 500: {"error": "busy", "retryable": true}\n'
    )


def test_p95_is_the_nearest_rank():
    assert p95([0.1] * 19 + [9.0]) == 0.1
    assert p95([0.1] * 18 + [8.0, 9.0]) == 8.0
    assert p95([0.3]) == 0.3


def test_figures_from_known_timings():
    """Rates per instance, their median over the levels that answered, the one-client p95."""
    levels = [
        Level(1, elapsed_s=2.0, answered=[0.1] * 19 + [0.5]),
        Level(1, elapsed_s=1.0, answered=[0.3004567]),
        Level(2, elapsed_s=1.0, answered=[0.2, 0.4, 0.3], refused=1),
        Level(4, elapsed_s=3.0, answered=[0.012] * 15 + [0.123456]),
        Level(8, elapsed_s=0.0, refused=5),
    ]
    assert figures(levels, instances=2, endpoint="decisions") == {
        "measured": True,
        "source": "python -m ops load --endpoint decisions (2 instance(s))",
        "throughput_rps": 2.083,  # median of 5.0, 0.5, 1.5, 2.667: the 8-client level is out
        "service_p95_ms": 300.46,  # the slower of the two one-client levels
        "levels": [
            {
                "clients": 1,
                "answered": 20,
                "refused_503": 0,
                "throughput_rps_per_instance": 5.0,
                "p95_ms": 100.0,
            },
            {
                "clients": 1,
                "answered": 1,
                "refused_503": 0,
                "throughput_rps_per_instance": 0.5,
                "p95_ms": 300.46,
            },
            {
                "clients": 2,
                "answered": 3,
                "refused_503": 1,
                "throughput_rps_per_instance": 1.5,
                "p95_ms": 400.0,
            },
            {
                "clients": 4,
                "answered": 16,
                "refused_503": 0,
                "throughput_rps_per_instance": 2.667,
                "p95_ms": 123.46,
            },
            {
                "clients": 8,
                "answered": 0,
                "refused_503": 5,
                "throughput_rps_per_instance": 0.0,
                "p95_ms": None,
            },
        ],
    }


def test_figures_need_an_answered_one_client_level():
    levels = [Level(1, elapsed_s=1.0, refused=2), Level(2, elapsed_s=1.0, answered=[0.1])]
    with pytest.raises(ValueError, match="^no decision answered at the one-client level$"):
        figures(levels, instances=1, endpoint="e")


def test_run_level_times_each_answer_and_waits_each_refusals_hint():
    lock = threading.Lock()
    calls = []
    refusals = {2: Retryable("busy", 2.5), 3: Retryable("busy")}

    def send():
        with lock:
            calls.append(1)
            n = len(calls)
        if n in refusals:
            raise refusals[n]
        time.sleep(0.005)

    sleeps = []
    before = time.perf_counter()
    level = run_level(send, 1, 5, sleep=sleeps.append)
    assert level.elapsed_s <= time.perf_counter() - before
    assert (level.clients, len(level.answered), level.refused) == (1, 3, 2)
    assert sleeps == [2.5, 1.0]  # the hint, else a second
    assert all(0.005 <= seconds <= level.elapsed_s for seconds in level.answered)
    assert level.elapsed_s >= 0.015

    level = run_level(lambda: None, 3, 4)
    assert (level.clients, len(level.answered), level.refused) == (3, 12, 0)


def test_run_level_stops_every_client_at_a_failure_and_raises_it():
    calls = []

    def send():
        calls.append(1)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_level(send, 2, 10)
    # At most one call each: a client stops at its own failure and at the other's.
    assert 1 <= len(calls) <= 2


def test_load_reports_a_sagemaker_refusal_as_it_came(runtime, body_file, capsys):
    client, stubber = runtime
    stubber.add_client_error(
        "invoke_endpoint", "ValidationError", "Endpoint decisions not found.", 400
    )
    argv = ["load", "--endpoint", "decisions", str(body_file), "--clients", "1", "--requests", "1"]
    assert run(argv, client, []) == 1
    assert capsys.readouterr().err == (
        "ops: error: SageMaker: ValidationError: Endpoint decisions not found.\n"
    )
