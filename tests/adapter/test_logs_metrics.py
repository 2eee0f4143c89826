"""The adapter's EMF metrics, read from the stdout log lines of a real adapter on the real
model: each record checked against the embedded metric format's structure, and the counts
against what was sent."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from launcher import running_adapter
from tests.support.adapter_process import model_held

ENDPOINT = "decisions-test"
# The contract with the endpoint's alarms (stacks/): names, units, dimensions.
CONTRACT = {
    "Overloaded": ("Count", ["Endpoint"]),
    "Admitted": ("Count", ["Endpoint"]),
    "QueueWaitMs": ("Milliseconds", ["Endpoint"]),
    "DecisionLatencyMs": ("Milliseconds", ["Endpoint", "Kind"]),
}
# The units CloudWatch accepts (PutMetricData's StandardUnit).
UNITS = {
    "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes",
    "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count",
    "Bytes/Second", "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second",
    "Terabytes/Second", "Bits/Second", "Kilobits/Second", "Megabits/Second", "Gigabits/Second",
    "Terabits/Second", "Count/Second", "None",
}  # fmt: skip
OPTIONS = [{"id": "billing"}, {"id": "shipping"}]
DECISION = {"decision": {"id": "d", "state": "Refund?", "question": "Queue?", "options": OPTIONS}}
DECISIONS = {"decisions": [DECISION["decision"], {**DECISION["decision"], "id": "e"}]}
SYSTEM_ONE = {
    "model": "jev-latest",
    "state": "Refund?",
    "questions": {"q": {"type": "noul", "instructions": "Money back?"}},
}
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def validate_emf(record: dict) -> list[dict]:
    """The EMF specification's structure: `_aws.Timestamp` (ms), `CloudWatchMetrics[]` of
    Namespace, Dimensions (arrays of member names) and Metrics (Name, Unit); each dimension a
    top-level string member and each metric a top-level number. Returns the directives."""
    metadata = record["_aws"]
    assert isinstance(metadata["Timestamp"], int) and metadata["Timestamp"] > 1_600_000_000_000
    directives = metadata["CloudWatchMetrics"]
    assert isinstance(directives, list) and directives
    for directive in directives:
        assert set(directive) == {"Namespace", "Dimensions", "Metrics"}
        assert isinstance(directive["Namespace"], str) and directive["Namespace"]
        for dimension_set in directive["Dimensions"]:
            assert isinstance(dimension_set, list) and 1 <= len(dimension_set) <= 30
            for name in dimension_set:
                assert isinstance(record[name], str) and record[name]
        assert 1 <= len(directive["Metrics"]) <= 100
        for metric in directive["Metrics"]:
            assert set(metric) <= {"Name", "Unit", "StorageResolution"}
            assert metric["Unit"] in UNITS
            value = record[metric["Name"]]
            assert isinstance(value, (int, float)) and not isinstance(value, bool)
    return directives


def check_contract(record: dict) -> dict[str, float]:
    """The metrics a record defines, each with the contract's namespace, unit and dimensions."""
    values = {}
    for directive in validate_emf(record):
        assert directive["Namespace"] == "DecisionAdapter"
        for metric in directive["Metrics"]:
            unit, dimensions = CONTRACT[metric["Name"]]
            assert metric["Unit"] == unit and directive["Dimensions"] == [dimensions]
            values[metric["Name"]] = record[metric["Name"]]
    assert record["Endpoint"] == ENDPOINT
    return values


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    with running_adapter(
        tmp_path_factory.mktemp("metrics"), DECISION_METRICS_ENDPOINT=ENDPOINT
    ) as running:
        yield running


def emf_records(adapter, request_ids: set[str]) -> list[dict]:
    lines = [json.loads(line) for line in adapter.log().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("request_id") in request_ids and "_aws" in line]


def test_one_emf_record_per_request_counts_admitted_and_overloaded(adapter):
    sent: dict[str, str] = {}  # request id -> what it was
    with httpx.Client(base_url=adapter.url, timeout=120) as client:

        def post(what: str, path: str, body: dict) -> httpx.Response:
            response = client.post(path, json=body)
            sent[response.headers["x-request-id"]] = what
            return response

        with model_held(adapter):  # DECISION_MAX_QUEUE=0: every request now is a 503
            for _ in range(3):
                assert post("overloaded", "/invocations", DECISION).status_code == 503
            assert post("overloaded", "/v1/chat/completions", CHAT).status_code == 503
        for what, path, body in (
            ("decision", "/invocations", DECISION),
            ("decision", "/invocations", DECISION),
            ("decisions", "/invocations", DECISIONS),
            ("systemone", "/v1/systemone", SYSTEM_ONE),
            ("chat", "/v1/chat/completions", CHAT),
            ("chat", "/v1/chat/completions", {**CHAT, "stream": True}),
        ):
            assert post(what, path, body).status_code == 200
        # Requests that never reach the model define no metrics.
        assert post("invalid", "/invocations", {"decision": {}}).status_code == 422
        assert client.get("/ping").status_code == 200

    records = {r["request_id"]: r for r in emf_records(adapter, set(sent))}
    assert set(records) == {rid for rid, what in sent.items() if what != "invalid"}
    for request_id, record in records.items():
        values = check_contract(record)
        what = sent[request_id]
        if what == "overloaded":
            assert values == {"Overloaded": 1, "Admitted": 0}
        else:
            assert values["Overloaded"] == 0 and values["Admitted"] == 1
            assert values["QueueWaitMs"] >= 0 and values["DecisionLatencyMs"] > 0
            assert record["Kind"] == what
    totals = {
        name: sum(check_contract(r).get(name, 0) for r in records.values()) for name in CONTRACT
    }
    assert totals["Overloaded"] == 4 and totals["Admitted"] == 6
    # The chat that held the model was admitted too, and logged its own record.
    held = [r for r in emf_records_all(adapter) if r.get("Kind") == "chat"]
    assert len(held) == 3


def emf_records_all(adapter) -> list[dict]:
    lines = [json.loads(line) for line in adapter.log().splitlines() if line.startswith("{")]
    return [line for line in lines if "_aws" in line]


def test_queue_wait_is_measured_for_a_request_that_waited(tmp_path):
    with running_adapter(
        tmp_path,
        DECISION_METRICS_ENDPOINT=ENDPOINT,
        DECISION_MAX_QUEUE="1",
        DECISION_ADMISSION_WAIT_S="30",
    ) as queued:
        answers = []
        with model_held(queued):
            waiter = threading.Thread(
                target=lambda: answers.append(
                    httpx.post(queued.url + "/invocations", json=DECISION, timeout=120)
                )
            )
            waiter.start()
            queued.wait_until_in_flight(1, waiting=1)
        waiter.join(120)
        (response,) = answers
        assert response.status_code == 200
        (record,) = emf_records(queued, {response.headers["x-request-id"]})
        values = check_contract(record)
        assert values["Admitted"] == 1 and values["QueueWaitMs"] > 0
        assert values["DecisionLatencyMs"] >= values["QueueWaitMs"]


def test_a_long_field_a_client_filled_is_cut_in_the_log_line_and_says_so():
    import logging

    from decision_adapter.logs import MAX_FIELD_CHARS, JsonFormatter

    record = logging.LogRecord("decision_adapter", logging.INFO, __file__, 1, "request", (), None)
    record.fields = {"safety_identifier": "u" * 900_000, "status": 200, "kind": "decisions"}
    entry = json.loads(JsonFormatter().format(record))
    assert entry["safety_identifier"] == "u" * MAX_FIELD_CHARS + "... (900000 characters)"
    assert (entry["status"], entry["kind"]) == (200, "decisions")
