"""python -m evaluation: labelled-file parsing, and the whole command against the live adapter."""

import json
import math

import pytest

from evaluation import cli, labelled
from tests.support.labelled_files import write_jsonl

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
    code = cli.main(
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
    # The bundled Gemma has no chat template and no profile here: letters, raw.
    assert (report["served_readout"], report["served_temperature"]) == ("letters", 1.0)
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
    assert cli.main([str(tmp_path / "missing.jsonl"), "--url", "http://127.0.0.1:9"]) == 2
    assert "evaluation: error" in capsys.readouterr().err


def test_a_url_that_is_not_http_is_a_usage_error_before_any_request(tmp_path, capsys):
    data = write_jsonl(tmp_path / "one.jsonl", [ONE_ITEM])
    assert cli.main([str(data), "--url", "notaurl", "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        "evaluation: error: --url expects an http(s) URL such as http://127.0.0.1:8080, "
        "got 'notaurl'\n"
    )


def test_an_endpoint_without_credentials_fails_in_one_line(tmp_path, monkeypatch, capsys):
    from tests.support.aws_stubs import without_aws_credentials

    without_aws_credentials(monkeypatch, tmp_path)
    data = write_jsonl(tmp_path / "one.jsonl", [ONE_ITEM])
    argv = [str(data), "--endpoint", "decisions", "--region", "us-east-1", "--no-progress"]
    assert cli.main(argv) == 1
    assert capsys.readouterr().err == ("evaluation: error: AWS: Unable to locate credentials\n")


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
        cli.main(
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


def test_evaluate_waits_the_retry_after_in_a_model_errors_body(monkeypatch):
    """Through SageMaker the adapter's Retry-After arrives only in the 503's body."""
    from tests.support.aws_stubs import stubbed_client
    from tests.support.fake_service import overload_bodies

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
        monkeypatch.setattr(cli.Target, "sleep", staticmethod(sleeps.append))
        target = cli.Target.endpoint("decisions", "us-east-1", max_attempts=3)
        reply, _, retries = target.send("systemone", {"questions": {}})
    assert reply["result"]["id"] == "r1" and retries == 1 and sleeps == [2.0]


def streaming_body(data: bytes):
    import io

    from botocore.response import StreamingBody

    return StreamingBody(io.BytesIO(data), len(data))
