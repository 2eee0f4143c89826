"""JSON Lines bodies (batch transform's MultiRecord requests) and /execution-parameters against
the live adapter on the real bundled model."""

from __future__ import annotations

import json

import httpx
import pytest

from launcher import running_adapter
from tests.adapter_process import model_held

JSONL = {"Content-Type": "application/jsonlines"}
STATE = "Refund not received after 10 days."


def decision(id, question="Which queue?", options=("billing", "shipping"), state=STATE):
    return {"id": id, "state": state, "question": question, "options": [{"id": o} for o in options]}


SYSTEM_ONE = {
    "model": "jev-latest",
    "state": STATE,
    "questions": {
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
        "team": {"type": "choice", "criteria": {"Billing": "Refunds", "Shipping": None}},
    },
}
GOOD = {
    1: {"decision": decision("route")},
    3: {"decisions": [decision("a"), decision("b", "How urgent?", ("low", "high"))]},
    4: SYSTEM_ONE,
    7: {"decision": decision("other", state="The parcel arrived damaged.")},
}
BAD = {
    2: b'{"decision": {"id": "broken"',  # malformed JSON
    5: json.dumps({**SYSTEM_ONE, "questions": {"x": {"type": "choice"}}}).encode(),
    6: json.dumps({"decision": decision("one", options=("only",))}).encode(),
}


def body_of(lines: dict[int, object]) -> bytes:
    return b"".join(
        (item if isinstance(item, bytes) else json.dumps(item).encode()) + b"\n"
        for _, item in sorted(lines.items())
    )


def answers(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/jsonlines"
    return [json.loads(line) for line in response.content.splitlines()]


def without_timing(answer: dict) -> dict:
    """Everything but the clock: what must be bit-identical."""
    answer = {key: value for key, value in answer.items() if key not in ("timing", "x_timing")}
    for key in ("result",):
        if key in answer:
            answer[key] = without_timing(answer[key])
    if "results" in answer:
        answer["results"] = [without_timing(result) for result in answer["results"]]
    return answer


def test_mixed_lines_are_answered_in_order_good_ones_as_if_sent_alone(adapter):
    admitted = adapter.stats()["admission"]["admitted"]
    response = httpx.post(
        adapter.url + "/invocations",
        content=body_of({**GOOD, **BAD}),
        headers=JSONL,
        timeout=300,
    )
    got = answers(response)
    assert len(got) == 7
    # One admission held the model for the whole body.
    assert adapter.stats()["admission"]["admitted"] == admitted + 1
    for number, body in GOOD.items():
        alone = httpx.post(adapter.url + "/invocations", json=body, timeout=120)
        assert alone.status_code == 200
        assert without_timing(got[number - 1]) == without_timing(alone.json()), number
    assert sum(got[0]["result"]["probabilities"]) == pytest.approx(1.0)
    # Each bad line: the body the same request alone gets, its status, and its line number.
    for number, raw in BAD.items():
        alone = httpx.post(
            adapter.url + "/invocations",
            content=raw,
            headers={"Content-Type": "application/json"},
            timeout=60,
        )
        assert 400 <= alone.status_code < 500
        assert got[number - 1] == {**alone.json(), "line": number, "status": alone.status_code}
    assert got[1]["error_type"] == "invalid_json" and got[5]["field"] == "decision.options"
    assert got[4]["detail"][0]["loc"][:3] == ["body", "questions", "x"]


def test_a_body_meets_a_busy_model_once_with_one_retryable_503(adapter):
    body = body_of(GOOD)
    with model_held(adapter):
        response = httpx.post(adapter.url + "/invocations", content=body, headers=JSONL)
    assert response.status_code == 503 and response.json()["retryable"] is True
    assert "retry-after" in response.headers


def test_execution_parameters_default(adapter):
    response = httpx.get(adapter.url + "/execution-parameters")
    assert response.json() == {
        "MaxConcurrentTransforms": 1,
        "BatchStrategy": "MULTI_RECORD",
        "MaxPayloadInMB": 1,
    }


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    with running_adapter(
        tmp_path_factory.mktemp("jsonlines"),
        DECISION_MAX_JSONLINES_LINES="3",
        DECISION_MAX_JSONLINES_BYTES=str(2 << 20),
    ) as running:
        yield running


def test_limits_on_lines_and_bytes_are_413s_before_any_model_work(limited):
    assert httpx.get(limited.url + "/execution-parameters").json()["MaxPayloadInMB"] == 2
    line = json.dumps({"decision": decision("d")}).encode() + b"\n"
    response = httpx.post(limited.url + "/invocations", content=line * 4, headers=JSONL)
    assert response.status_code == 413
    assert response.json()["error"] == (
        "body: 4 lines, the limit is 3 (DECISION_MAX_JSONLINES_LINES)"
    )
    big = json.dumps({"decision": decision("d", state="x" * (2 << 20))}).encode()
    response = httpx.post(limited.url + "/invocations", content=big, headers=JSONL)
    assert response.status_code == 413
    assert response.json()["error"] == (
        f"body: {len(big)} bytes, the limit is {2 << 20} (DECISION_MAX_JSONLINES_BYTES)"
    )
    assert limited.stats()["admission"]["admitted"] == 0
    # Three lines are within the limit.
    assert (
        len(
            answers(
                httpx.post(
                    limited.url + "/invocations", content=line * 3, headers=JSONL, timeout=120
                )
            )
        )
        == 3
    )
