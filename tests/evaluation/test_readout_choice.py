"""evaluation --choose-readout and evaluation.readout_choice: ranking readouts on labelled dev
and held-out splits, and the per-model file it writes, with no model (strategies answer like the
adapter); the committed readout splits are what evaluation.make_data makes."""

import json

import pytest

from evaluation import cli, labelled, metrics, readout_choice
from tests.support.labelled_files import write_jsonl

SHA = "cd" * 32
QUEUES = {"billing": "Money.", "shipping": "Parcels.", "account": "Logins."}


def readout_rows(prefix, seed_states):
    """System One lines whose state names the right queue; a noul question answered by it."""
    rows = []
    for n, (state, queue) in enumerate(seed_states):
        rows.append(
            {
                "id": f"{prefix}{n}",
                "category": {"queue": "routing.queue", "urgent": "priority.urgent"},
                "systemone": {
                    "state": state,
                    "questions": {
                        "queue": {"type": "choice", "criteria": QUEUES},
                        "urgent": {"type": "noul"},
                    },
                },
                "expected": {"queue": queue, "urgent": "now" in state},
            }
        )
    return rows


def strategy(read):
    """A send(kind, body) answering like the adapter, with `read(state, names) -> logits`."""

    def send(kind, body):
        answers = {}
        for qid, question in body["questions"].items():
            names = list(question.get("criteria") or {"true": None, "false": None})
            logits = read(body["state"], names)
            probabilities = metrics.softmax(logits).tolist()
            answers[qid] = {
                "type": question["type"],
                "probabilities": dict(zip(names, probabilities, strict=False)),
                "x_logits": dict(zip(names, logits, strict=False)),
            }
            if question["type"] == "noul":
                answers[qid]["noul"] = probabilities[0]
        return {"answers": answers, "x_model_info": {"gguf_sha256": SHA}}, 0.01, 0

    return send


def by_position(state, names):  # what the letter readout does on a small model
    return [1.0 if i == 0 else 0.0 for i in range(len(names))]


def by_content(state, names):
    hits = [name in state or (name == "true" and "now" in state) for name in names]
    if names == ["true", "false"]:
        hits[1] = not hits[0]
    return [2.0 * hit for hit in hits]


def test_categories_per_question_and_majority_baselines():
    (item,) = [labelled.parse_line(r, 1) for r in readout_rows("d", [("billing now", "billing")])]
    assert item.categories == {"queue": "routing.queue", "urgent": "priority.urgent"}
    with pytest.raises(labelled.LabelError, match="category for unknown question 'x'"):
        labelled.parse_line({**readout_rows("d", [("s", "billing")])[0], "category": {"x": "a"}}, 1)
    assert readout_choice.kind_of("routing.queue") == "routing"
    assert readout_choice.kind_of("systemone") == "systemone"
    assert readout_choice.majority_accuracy(["a", "b", "a", "a"]) == 0.75


def test_choose_readout_ranks_by_the_targets_and_writes_the_per_model_file(tmp_path):
    states = [
        ("billing charged twice now", "billing"),
        ("shipping parcel lost", "shipping"),
        ("account locked now", "account"),
        ("shipping late", "shipping"),
        ("account password reset", "account"),
        ("billing invoice copy", "billing"),
    ]
    dev = [labelled.parse_line(r, 1) for r in readout_rows("d", states)]
    test = [labelled.parse_line(r, 1) for r in readout_rows("t", states[::-1])]
    choice = cli.choose_readout(
        dev,
        test,
        {"letters": strategy(by_position), "option_text": strategy(by_content)},
        dev_file=tmp_path / "dev.jsonl",
        test_file=tmp_path / "test.jsonl",
    )
    assert choice["winner"] == "option_text"
    letters = choice["strategies"]["letters"]
    assert letters["order_change_rate"] == 1.0  # always the first option: every reversal flips
    assert letters["by_question"]["routing.queue"]["majority"] == pytest.approx(1 / 3)
    assert letters["below_majority"] == ["priority.urgent"]  # always "true"; "false" is 4/6
    assert set(letters["by_kind"]) == {"routing", "priority"}
    assert choice["ranking"][1] == {
        "readout": "letters",
        "missed": ["1 question(s) below majority", "order change 100%"],
    }
    content = choice["strategies"]["option_text"]
    assert content["accuracy"] == 1.0 and content["order_change_rate"] == 0.0
    # The ranking AUC tells position from content whatever the bias: the first option gets
    # everything on every item (no ranking), against a reading that orders every item right.
    assert letters["by_question"]["routing.queue"]["auc"] == 0.5
    assert content["by_question"]["routing.queue"]["auc"] == 1.0
    assert content["by_question"]["priority.urgent"]["auc"] == 1.0
    assert "below their majority" not in cli.render_choice(choice)  # all right held out
    alone = cli.choose_readout(
        dev,
        test,
        {"letters": strategy(by_position)},
        dev_file=tmp_path / "dev.jsonl",
        test_file=tmp_path / "test.jsonl",
    )
    assert cli.render_choice(alone).splitlines()[-1] == (
        "  held-out questions below their majority: priority.urgent (AUC 0.50)"
    )
    file = choice["calibration"]
    assert file["readout"] == "option_text" and file["gguf_sha256"] == SHA
    assert file["held_out_metrics"]["n"] == 12 and file["held_out"] == "test.jsonl"
    # all correct at logit gap 2: NLL falls as the temperature falls, towards its bound
    assert metrics.TEMPERATURE_BOUNDS[0] <= file["temperature"] < 0.1
    assert file["nll_after"] < file["nll_before"]
    # the adapter's loader accepts the file (extra fields are ignored), and refuses other GGUFs
    from decision_adapter.calibration import CalibrationError, load_calibration

    (tmp_path / "calibration.json").write_text(json.dumps(file))
    gguf = tmp_path / "model.gguf"
    assert load_calibration(None, gguf, SHA).temperature == file["temperature"]
    with pytest.raises(CalibrationError):
        load_calibration(None, gguf, "ef" * 32)


def test_rank_counts_cost_against_letters():
    def report(p50, accuracy):
        return {"below_majority": [], "latency": {"p50_ms": p50}, "accuracy": accuracy, "nll": 1}

    ranking = readout_choice.rank(
        {"letters": report(10, 0.3), "slow": report(25, 0.9), "cloze": report(15, 0.6)}
    )
    assert ranking == [("cloze", []), ("letters", []), ("slow", ["cost 2.5x letters"])]


def test_adapter_readout_names_the_strategy_in_each_format():
    sent = []

    class Recorder:
        retries = 0

        def send(self, kind, body):
            sent.append((kind, body))
            return {}, 0.0, 0

    readout = readout_choice.AdapterReadout(Recorder(), "option_text")
    readout.send("decision", {"decision": {"id": "a"}})
    readout.send("systemone", {"model": "jev-latest", "questions": {}})
    assert sent == [
        ("decision", {"decision": {"id": "a", "readout": "option_text"}}),
        ("systemone", {"model": "jev-latest", "questions": {}, "x_readout": "option_text"}),
    ]


def test_choose_readout_needs_a_held_out_file(tmp_path, capsys):
    data = write_jsonl(tmp_path / "dev.jsonl", readout_rows("d", [("billing", "billing")]))
    assert cli.main([str(data), "--url", "http://127.0.0.1:9", "--choose-readout", "a"]) == 2
    assert "--choose-readout needs --test" in capsys.readouterr().err


def test_the_committed_readout_splits_are_what_make_data_makes():
    from evaluation import make_data

    assert make_data.main(["--check"]) == 0
    dev = labelled.load(make_data.DATA / "readout_dev.jsonl")
    test = labelled.load(make_data.DATA / "readout_test.jsonl")
    questions = [c for item in dev + test for c in item.categories.values()]
    assert len(questions) >= 300
    assert {readout_choice.kind_of(c) for c in questions} >= {
        "routing",
        "priority",
        "policy",
        "extraction",
        "agent_action",
        "safety",
    }
    routing = labelled.load(make_data.DATA / "readout_routing.jsonl")
    multi_option_routing = [
        c for item in routing for c in item.categories.values() if c.startswith("routing.")
    ]
    assert len(multi_option_routing) >= 100
    ids = [{i.item_id for i in split} for split in (dev, test, routing)]
    assert not ids[0] & ids[1] and not ids[0] & ids[2] and not ids[1] & ids[2]


def kind_cases(prefix, rng, *, noul_hit_rate, score_hit_rate, n=60):
    """Yes/no cases read at a logit gap of 3 (95% sure) and right `noul_hit_rate` of the time;
    three-option choices at a gap of 2 right 79% of the time (calibrated at T = 1); levels 0-2
    at a gap of 2 right `score_hit_rate` of the time."""
    cases = []
    shapes = (
        ("noul", ["true", "false"], [3.0, 0.0], noul_hit_rate),
        ("choice", ["billing", "shipping", "account"], [2.0, 0.0, 0.0], 0.787),
        ("score", ["0", "1", "2"], [2.0, 0.0, 0.0], score_hit_rate),
    )
    for kind, option_ids, logits, hit_rate in shapes:
        for n_case in range(n):
            expected = option_ids[0] if rng.random() < hit_rate else option_ids[1]
            cases.append(
                labelled.Case(
                    item_id=f"{prefix}{kind}{n_case}",
                    category=f"{kind}.q",
                    option_ids=option_ids,
                    probabilities=metrics.softmax(logits).tolist(),
                    logits=logits,
                    expected=expected,
                    latency_s=0.01,
                )
            )
    return cases


def test_a_kind_gets_its_own_temperature_only_where_it_improves_held_out_calibration():
    import numpy as np

    rng = np.random.default_rng(7)
    # Yes/no over-confident on both splits: its own temperature helps held out. Levels are
    # over-confident on dev only, so their own (hot) temperature fitted there hurts held out.
    dev = kind_cases("d", rng, noul_hit_rate=0.6, score_hit_rate=0.5)
    test = kind_cases("t", rng, noul_hit_rate=0.6, score_hit_rate=0.95)
    held = readout_choice.fit_and_hold_out(dev, test)
    fits = held.kind_fits
    assert set(fits) == {"noul", "choice", "score"}
    assert "noul" in held.by_kind and held.by_kind["noul"] > held.temperature
    assert fits["noul"]["held_out_ece_own"] < fits["noul"]["held_out_ece_single"]
    assert "score" not in held.by_kind
    assert fits["score"]["held_out_ece_own"] >= fits["score"]["held_out_ece_single"]

    # The held-out report is measured at the kept temperatures: each case at its kind's.
    def served(case):
        kind = case.category.split(".")[0]
        return metrics.softmax(case.logits, held.by_kind.get(kind, held.temperature))

    expected_ece = metrics.expected_calibration_error(
        [served(c) for c in test], [c.expected_index for c in test]
    )
    assert held.test["ece"] == pytest.approx(expected_ece)
    # The per-model file carries them; the adapter's loader reads them back.
    file = readout_choice.readout_file(
        "json_choice",
        held,
        dev_file=readout_choice.Path("dev.jsonl"),
        test_file=readout_choice.Path("test.jsonl"),
        gguf_sha256=SHA,
        ranking=[("json_choice", [])],
        created_at="now",
    )
    assert file["temperatures"]["noul"] == pytest.approx(held.by_kind["noul"], abs=1e-6)
    from decision_adapter.calibration import CalibrationFile

    assert CalibrationFile.model_validate(file).temperatures == file["temperatures"]


def test_a_kind_with_too_few_dev_cases_keeps_the_single_temperature():
    import numpy as np

    rng = np.random.default_rng(3)
    few = readout_choice.MIN_KIND_CASES - 1
    dev = kind_cases("d", rng, noul_hit_rate=0.6, score_hit_rate=0.6, n=few)
    test = kind_cases("t", rng, noul_hit_rate=0.6, score_hit_rate=0.6)
    held = readout_choice.fit_and_hold_out(dev, test)
    assert held.by_kind == {} and held.kind_fits == {}
