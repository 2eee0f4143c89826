"""ops load: closed-loop load through botocore's Stubber, written as capacity figures."""

import json

import pytest

from ops.cli import main
from ops.load import p95
from stacks import capacity
from tests.test_ops_invoke import DECISION_ANSWER, busy, invoke_params, streaming


def answer(stubber):
    stubber.add_response(
        "invoke_endpoint", {"Body": streaming(DECISION_ANSWER)}, expected_params=invoke_params()
    )


def run(argv, client, sleeps):
    return main(argv, clients={"sagemaker-runtime": client}.__getitem__, sleep=sleeps.append)


def test_load_writes_figures_that_the_capacity_derivation_reads(runtime, body_file, tmp_path):
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
    figures = json.loads(output.read_text())
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
    assert (measured.throughput_rps, measured.measured) == (figures["throughput_rps"], True)
    assert capacity.derive(measured).invocations_per_instance >= 1


def test_load_prints_the_figures_without_output(runtime, body_file, capsys):
    client, stubber = runtime
    answer(stubber)
    argv = ["load", "--endpoint", "decisions", str(body_file), "--clients", "1", "--requests", "1"]
    assert run(argv, client, []) == 0
    assert json.loads(capsys.readouterr().out)["levels"][0]["answered"] == 1


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        (["--clients", "2,4"], "--clients must include 1"),
        (["--clients", "1,x"], "--clients expects counts"),
        (["--requests", "0"], "at least 1"),
    ],
)
def test_load_refuses_bad_options(runtime, body_file, capsys, extra, complaint):
    client, _ = runtime
    assert run(["load", "--endpoint", "decisions", str(body_file), *extra], client, []) == 2
    assert complaint in capsys.readouterr().err


def test_load_stops_at_a_failure_that_is_not_backpressure(runtime, body_file, capsys):
    client, stubber = runtime
    busy(stubber, status=500)
    argv = ["load", "--endpoint", "decisions", str(body_file), "--clients", "1", "--requests", "1"]
    assert run(argv, client, []) == 1
    assert "container answered 500" in capsys.readouterr().err


def test_p95_is_the_nearest_rank():
    assert p95([0.1] * 19 + [9.0]) == 0.1
    assert p95([0.1] * 18 + [8.0, 9.0]) == 8.0
    assert p95([0.3]) == 0.3
