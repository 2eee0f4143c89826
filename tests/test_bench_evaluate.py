"""bench.evaluate: labelled-file parsing, and the whole command against the live adapter."""

import json
import math

import pytest

from bench import evaluate, labelled

OPTIONS = [
    {"id": "billing", "description": "Invoices and refunds."},
    {"id": "shipping", "description": "Deliveries."},
]


ONE_ITEM = {
    "id": "a",
    "state": "Refund please.",
    "question": "Queue?",
    "options": OPTIONS,
    "expected": "billing",
}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_flat_and_nested_decision_lines(tmp_path):
    path = write_jsonl(
        tmp_path / "set.jsonl",
        [
            {
                "id": "a",
                "state": "Refund please.",
                "question": "Queue?",
                "options": OPTIONS,
                "expected": "billing",
                "category": "routing",
            },
            {
                "decision": {
                    "id": "b",
                    "state": "Where is my parcel?",
                    "question": "Queue?",
                    "options": OPTIONS,
                },
                "expected": "shipping",
            },
        ],
    )
    first, second = labelled.load(path)
    assert first.body() == {
        "decision": {"id": "a", "state": "Refund please.", "question": "Queue?", "options": OPTIONS}
    }
    assert first.body(reverse=True)["decision"]["options"] == OPTIONS[::-1]
    assert (first.category, second.category, second.expected) == ("routing", "all", "shipping")


def test_a_label_outside_the_options_names_the_line(tmp_path):
    path = write_jsonl(
        tmp_path / "bad.jsonl",
        [{"id": "a", "state": "s", "question": "q", "options": OPTIONS, "expected": "sales"}],
    )
    with pytest.raises(labelled.LabelError, match=r"bad.jsonl:1: expected 'sales'"):
        labelled.load(path)


def test_systemone_lines_become_one_case_per_expected_question():
    item = labelled.parse_line(
        {
            "id": "t1",
            "systemone": {
                "state": "Refund not received.",
                "questions": {
                    "angry": {"type": "noul"},
                    "queue": {
                        "type": "choice",
                        "criteria": {"billing": "Money", "shipping": "Parcels"},
                    },
                    "urgency": {"type": "score", "criteria": ["low", "medium", "high"]},
                },
            },
            "expected": {"angry": False, "queue": "billing", "urgency": 1},
        },
        1,
    )
    assert item.expected == {"angry": "false", "queue": "billing", "urgency": "1"}
    reversed_body = item.body(reverse=True)
    assert list(reversed_body["questions"]["queue"]["criteria"]) == ["shipping", "billing"]
    assert reversed_body["questions"]["urgency"] == item.request["questions"]["urgency"]
    answer = {
        "answers": {
            "angry": {"type": "noul", "noul": 0.25, "x_logits": {"true": 0.0, "false": 1.1}},
            "queue": {
                "type": "choice",
                "probabilities": {"billing": 0.9, "shipping": 0.1},
                "x_logits": {"billing": 2.0, "shipping": -0.2},
            },
            "urgency": {
                "type": "score",
                "probabilities": {"0": 0.2, "1": 0.5, "2": 0.3},
                "x_logits": {"0": 0.1, "1": 1.0, "2": 0.5},
            },
        }
    }
    cases = item.cases(answer, 0.1, 0)
    assert [(c.item_id, c.option_ids, c.probabilities, c.expected) for c in cases] == [
        ("t1/angry", ["true", "false"], [0.25, 0.75], "false"),
        ("t1/queue", ["billing", "shipping"], [0.9, 0.1], "billing"),
        ("t1/urgency", ["0", "1", "2"], [0.2, 0.5, 0.3], "1"),
    ]
    assert [item.reorderable(c.item_id) for c in cases] == [False, True, False]


def test_evaluate_end_to_end_against_the_adapter(adapter, tmp_path, capsys):
    rows = [
        {
            "id": "r1",
            "state": "I was charged twice for my subscription.",
            "question": "Which queue?",
            "options": OPTIONS,
            "expected": "billing",
            "category": "routing",
        },
        {
            "id": "r2",
            "state": "My parcel never arrived.",
            "question": "Which queue?",
            "options": OPTIONS,
            "expected": "shipping",
            "category": "routing",
        },
        {
            "id": "p1",
            "state": "Checkout is down for everyone.",
            "question": "How urgent?",
            "options": [{"id": "low"}, {"id": "high"}],
            "expected": "high",
            "category": "priority",
        },
    ]
    rows.append(
        {
            "id": "s1",
            "category": "systemone",
            "systemone": {
                "state": "Refund not received after 10 days.",
                "questions": {
                    "queue": {
                        "type": "choice",
                        "criteria": {"billing": "Money.", "shipping": "Parcels."},
                    },
                    "urgent": {"type": "noul"},
                },
            },
            "expected": {"queue": "billing", "urgent": True},
        }
    )
    data = write_jsonl(tmp_path / "mini.jsonl", rows)
    out = tmp_path / "out"
    code = evaluate.main(
        [
            str(data),
            "--url",
            adapter.url,
            "--out",
            str(out),
            "--fit-temperature",
            "--order-check",
            "--no-progress",
        ]
    )
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["metrics"]["n"] == 5  # three decisions, two System One questions
    assert 0 <= report["metrics"]["accuracy"] <= 1
    assert 0 <= report["metrics"]["ece"] <= 1 and report["metrics"]["nll"] > 0
    assert set(report["by_category"]) == {"routing", "priority", "systemone"}
    assert 0 <= report["by_category"]["routing"]["auc"] <= 1  # billing and shipping both answers
    assert (
        report["latency"]["n"] == 5 and report["latency"]["p95_ms"] >= report["latency"]["p50_ms"]
    )
    assert report["order_check"]["items"] == 4  # the noul question has no order to reverse
    assert {item["id"] for item in report["items"]} >= {"s1/queue", "s1/urgent"}
    assert 0 <= report["order_check"]["max_abs_diff"] <= 1
    assert (out / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    calibration = json.loads((out / "calibration.json").read_text())
    assert calibration["n"] == 5 and calibration["fitted_on"] == "mini.jsonl"
    assert calibration["nll_after"] <= calibration["nll_before"]
    assert 0.05 <= calibration["temperature"] <= 20
    assert len(calibration["gguf_sha256"]) == 64
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "ECE(10)" in printed and "options reversed" in printed
    assert "AUC" in printed


def test_unreadable_file_is_a_usage_error(tmp_path, capsys):
    assert evaluate.main([str(tmp_path / "missing.jsonl"), "--url", "http://127.0.0.1:9"]) == 2
    assert "bench.evaluate: error" in capsys.readouterr().err


def test_a_url_that_is_not_http_is_a_usage_error_before_any_request(tmp_path, capsys):
    data = write_jsonl(tmp_path / "one.jsonl", [ONE_ITEM])
    assert evaluate.main([str(data), "--url", "notaurl", "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        "bench.evaluate: error: --url expects an http(s) URL such as http://127.0.0.1:8080, "
        "got 'notaurl'\n"
    )


def test_an_endpoint_without_credentials_fails_in_one_line(tmp_path, monkeypatch, capsys):
    from tests.aws_stubs import without_aws_credentials

    without_aws_credentials(monkeypatch, tmp_path)
    data = write_jsonl(tmp_path / "one.jsonl", [ONE_ITEM])
    argv = [str(data), "--endpoint", "decisions", "--region", "us-east-1", "--no-progress"]
    assert evaluate.main(argv) == 1
    assert capsys.readouterr().err == ("bench.evaluate: error: AWS: Unable to locate credentials\n")


def test_evaluate_an_endpoint_through_sagemaker_runtime(tmp_path, monkeypatch, capsys):
    """--endpoint goes through ops' SageMakerTransport; a 503 from the container is retried."""
    import io

    import boto3
    from botocore.response import StreamingBody
    from botocore.stub import Stubber

    client = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    stubber = Stubber(client)
    answer = json.dumps(
        {
            "result": {
                "id": "r1",
                "option_ids": ["billing", "shipping"],
                "probabilities": [0.75, 0.25],
                "option_logits": [1.0986123, 0.0],
                "temperature": 1.0,
                "model": {"name": "gemma", "gguf_sha256": "ab" * 32},
            }
        }
    ).encode()
    body = {
        "decision": {
            "id": "r1",
            "state": "Refund please.",
            "question": "Queue?",
            "options": OPTIONS,
        }
    }
    expected_params = {
        "EndpointName": "decisions",
        "Body": json.dumps(body, separators=(",", ":")).encode(),
        "ContentType": "application/json",
        "Accept": "application/json",
    }
    stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        http_status_code=424,
        expected_params=expected_params,
        response_meta={"HTTPHeaders": {"retry-after": "0"}},
        modeled_fields={"OriginalStatusCode": 503},
    )
    stubber.add_response(
        "invoke_endpoint",
        {"Body": StreamingBody(io.BytesIO(answer), len(answer)), "ContentType": "application/json"},
        expected_params,
    )
    stubber.activate()
    monkeypatch.setattr("ops.clients.boto3_clients", lambda region: lambda service: client)
    data = write_jsonl(tmp_path / "one.jsonl", [{**body["decision"], "expected": "billing"}])
    out = tmp_path / "out"
    assert (
        evaluate.main(
            [
                str(data),
                "--endpoint",
                "decisions",
                "--out",
                str(out),
                "--fit-temperature",
                "--temperature",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    stubber.assert_no_pending_responses()
    report = json.loads((out / "report.json").read_text())
    assert report["target"] == "endpoint decisions"
    assert report["retries"] == 1
    assert report["metrics"]["accuracy"] == 1.0
    assert report["metrics"]["nll"] == pytest.approx(-math.log(0.75))
    # softmax([ln 3, 0] / 2) = [sqrt 3, 1] / (sqrt 3 + 1)
    assert report["at_temperature"]["nll"] == pytest.approx(-math.log(3**0.5 / (3**0.5 + 1)))
    calibration = json.loads((out / "calibration.json").read_text())
    assert calibration["gguf_sha256"] == "ab" * 32


# --- readout choice (issue 15): the parts that need no model ------------------------------
from bench import metrics, readout_choice  # noqa: E402

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
                "probabilities": dict(zip(names, probabilities)),
                "x_logits": dict(zip(names, logits)),
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
    choice = evaluate.choose_readout(
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
    assert "below their majority" not in evaluate.render_choice(choice)  # all right held out
    alone = evaluate.choose_readout(
        dev,
        test,
        {"letters": strategy(by_position)},
        dev_file=tmp_path / "dev.jsonl",
        test_file=tmp_path / "test.jsonl",
    )
    assert evaluate.render_choice(alone).splitlines()[-1] == (
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
    assert evaluate.main([str(data), "--url", "http://127.0.0.1:9", "--choose-readout", "a"]) == 2
    assert "--choose-readout needs --test" in capsys.readouterr().err


def test_the_committed_readout_splits_are_what_make_data_makes():
    from bench import make_data

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


def test_readout_study_reads_the_splits_as_the_adapter_would():
    from research.readout_study import study as readout_study

    items = readout_study.load_items(readout_study.DATA / "readout_dev.jsonl")
    kept = readout_study.take_per_source(items, 2)
    assert len(kept) == 10  # five generators
    guard = kept[0].questions
    assert [q.kind for q in guard] == ["choice", "noul", "score"]
    assert guard[1].option_ids == ["true", "false"] and guard[2].option_ids == ["0", "1", "2", "3"]
    assert readout_study.option_text(guard[1], 0, "id_desc") == "yes"
    assert (
        readout_study.option_text(guard[0], 0, "id_desc") == "benign: An ordinary request for help."
    )
    flipped = guard[0].reordered([3, 2, 1, 0])
    assert flipped.option_ids[flipped.expected] == guard[0].option_ids[guard[0].expected]
    assert readout_study.cost_key("cloze.answer.id.mean") == "cloze.answer.id"
    assert readout_study.cost_key("cloze.answer.id.mean.cal") == "cloze.answer.id.mean.cal"


def test_pride_divides_out_the_position_prior_measured_on_rotations():
    import numpy as np

    from research.readout_study import study as readout_study

    prior = np.log([0.7, 0.2, 0.1])
    rotated = [{"n_options": 3, "original": {"_position_log_prior": (prior + 1.5).tolist()}}]
    # the model prefers position 0 by the prior alone, but option 1 by content
    row = {
        "n_options": 3,
        "original": {"letters": (prior + np.log([1, 3, 1])).tolist()},
        "reversed": {"letters": (prior[::-1] + np.log([1, 3, 1])).tolist()},
        "cost": {"letters": [1, 0.1]},
    }
    priors = readout_study.add_pride(rotated, [row])
    assert np.allclose(np.exp(priors["3"]), [0.7, 0.2, 0.1])
    for name in ("original", "reversed"):
        debiased = readout_study.renormalised(np.array(row[name]["letters.pride"]))
        assert np.allclose(np.exp(debiased), [0.2, 0.6, 0.2])


def test_evaluate_waits_the_retry_after_in_a_model_errors_body(monkeypatch):
    """Through SageMaker the adapter's Retry-After arrives only in the 503's body."""
    from tests.aws_stubs import stubbed_client
    from tests.fake_service import overload_bodies

    answer = json.dumps({"result": {"id": "r1", "probabilities": [1.0]}}).encode()
    with stubbed_client("sagemaker-runtime") as (client, stubber):
        stubber.add_client_error(
            "invoke_endpoint",
            service_error_code="ModelError",
            http_status_code=424,
            modeled_fields={
                "OriginalStatusCode": 503,
                "OriginalMessage": overload_bodies(retry_after_s=2)["systemone"],
            },
        )
        stubber.add_response("invoke_endpoint", {"Body": streaming_body(answer)})
        monkeypatch.setattr("ops.clients.boto3_clients", lambda region: lambda service: client)
        sleeps = []
        monkeypatch.setattr(evaluate.Target, "sleep", staticmethod(sleeps.append))
        target = evaluate.Target.endpoint("decisions", "us-east-1", max_attempts=3)
        reply, _, retries = target.send("systemone", {"questions": {}})
    assert reply["result"]["id"] == "r1" and retries == 1 and sleeps == [2.0]


def streaming_body(data: bytes):
    import io

    from botocore.response import StreamingBody

    return StreamingBody(io.BytesIO(data), len(data))
