"""make bench's readout experiment: every strategy asked by name on one 6-option request, the
default's cost against letters, and its docs/benchmarks.md row (in process, over the fake
service)."""

import json

from bench import experiments, report
from bench.timing import Caller
from research.readout_cost import study as readout_cost
from tests.support.fake_service import FakeService, app_client


def test_each_strategy_is_asked_by_name_on_the_same_six_option_request():
    service = FakeService()
    with app_client(lambda _: service) as client:
        cost = experiments.readout_cost(Caller(client), "/invocations", repeats=2)
    asked = [request[0].question for request in service.scored]
    # One cold round, then `repeats` rounds taking turns.
    assert [q.readout for q in asked] == list(experiments.READOUTS) * 3
    assert {len(q.option_ids) for q in asked} == {6} and cost["options"] == 6
    assert len({(q.question, tuple(q.option_ids)) for q in asked}) == 1
    assert cost["ratio_to_letters"]["letters"] == 1.0
    assert set(cost["median_ms"]) == set(experiments.READOUTS)
    assert cost["default"] in experiments.READOUTS
    assert cost["meets_target"] == (cost["ratio_to_letters"][cost["default"]] <= 2.0)


def test_the_report_row_names_the_default_its_ratio_and_each_accuracy():
    cost = {
        "options": 6,
        "default": "calibrated",
        "median_ms": {"letters": 200.0, "calibrated": 110.0},
        "ratio_to_letters": {"letters": 1.0, "calibrated": 0.55},
        "dev_accuracy": {"letters": 0.3, "calibrated": 0.41},
        "accuracy_source": "evaluation/results/readout-choice/choose_readout.json",
        "target_max_ratio": 2.0,
    }
    row = report.readout_row(cost)
    assert "default `calibrated` **0.55x** letters (110 vs 200 ms" in row
    assert "letters 1.00x (acc 0.30), calibrated 0.55x (acc 0.41)" in row


def test_the_readout_row_alone_is_measured_on_a_live_adapter_and_written_as_json(
    adapter, tmp_path, capsys
):
    output = tmp_path / "cost.json"
    readout_cost.main(["--url", adapter.url, "--repeats", "1", "--output", str(output)])
    written = json.loads(output.read_text())
    cost = written["readout_cost"]
    assert written["adapter"] == adapter.url and cost["repeats"] == 1
    assert set(cost["ratio_to_letters"]) == set(experiments.READOUTS)
    # The real model reads each strategy its own way: the request sizes differ.
    tokens = cost["request_tokens"]
    assert tokens["permuted_letters"] > tokens["letters"] > tokens["option_text"] > 0
    assert str(output) in capsys.readouterr().out
