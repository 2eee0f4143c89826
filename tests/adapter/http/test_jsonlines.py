"""JSON Lines bodies (batch transform's MultiRecord requests) and /execution-parameters against
the live adapter on the real bundled model."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from launcher import running_adapter, wait_until
from tests.support.adapter_process import model_held

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
        expected = {**alone.json(), "line": number, "status": alone.status_code}
        if number == 2:  # malformed JSON: where it is in the body, where in the line
            assert expected.pop("error").startswith("body: malformed JSON at line 1 column 29")
            assert got[1].pop("error").startswith("line 2: malformed JSON at column 29")
        assert got[number - 1] == expected
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


def many_lines(count: int) -> bytes:
    """`count` decision lines about distinct states: none is scored from the state cache."""
    return body_of(
        {n: {"decision": decision(f"d{n}", state=f"Ticket {n}: {STATE}")} for n in range(count)}
    )


@pytest.fixture(scope="module")
def patient(tmp_path_factory):
    """A body may hold the model for an hour, as in a batch transform job."""
    with running_adapter(
        tmp_path_factory.mktemp("patient"), DECISION_JSONLINES_TIMEOUT_S="3600"
    ) as running:
        yield running


def test_a_client_that_leaves_mid_body_frees_the_model_at_the_next_line(patient):
    adapter = patient
    body = many_lines(400)  # a minute or more of scoring here
    parts = urlsplit(adapter.url)
    with socket.create_connection((parts.hostname, parts.port)) as connection:
        connection.sendall(
            b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/jsonlines\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        adapter.wait_until_in_flight(1)
    left = time.monotonic()
    adapter.wait_until_in_flight(0)
    freed_after = time.monotonic() - left
    assert freed_after < 10, f"the model was held {freed_after:.1f} s after the client left"
    response = httpx.post(adapter.url + "/invocations", json={"decision": decision("next")})
    assert response.status_code == 200
    wait_until(lambda: "abandoned_at_line" in adapter.log(), what="the abandoned body's log line")
    (logged,) = [
        json.loads(line) for line in adapter.log().splitlines() if "abandoned_at_line" in line
    ]
    assert logged["status"] == 400 and 1 < logged["abandoned_at_line"] < 400


BOUND_S = 5


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    with running_adapter(
        tmp_path_factory.mktemp("bounded"), DECISION_JSONLINES_TIMEOUT_S=str(BOUND_S)
    ) as running:
        yield running


def test_a_body_over_its_time_bound_fails_whole_then_is_refused_up_front(bounded):
    body = many_lines(1000)
    started = time.monotonic()
    response = httpx.post(bounded.url + "/invocations", content=body, headers=JSONL, timeout=60)
    took = time.monotonic() - started
    # One retryable error for the whole body, no line's answer, at the bound (plus the line
    # being scored then), not after all 1000 lines.
    assert response.status_code == 503, response.text
    error = response.json()
    assert error["error_type"] == "jsonlines_timeout" and error["retryable"] is True
    assert "DECISION_JSONLINES_TIMEOUT_S" in error["error"]
    assert response.headers["retry-after"] == "1"
    assert took < BOUND_S + 10, f"answered after {took:.1f} s"
    bounded.wait_until_in_flight(0)
    # Its lines scored so far set a pace at which 1000 lines cannot fit: refused before
    # the model is admitted.
    admitted = bounded.stats()["admission"]["admitted"]
    response = httpx.post(bounded.url + "/invocations", content=body, headers=JSONL, timeout=60)
    assert response.status_code == 413, response.text
    error = response.json()
    assert error["error_type"] == "too_many_lines" and error["field"] == "body"
    assert error["error"].startswith("body: 1000 lines to score take at least ")
    assert "(DECISION_JSONLINES_TIMEOUT_S)" in error["error"]
    assert bounded.stats()["admission"]["admitted"] == admitted
    # A body that fits is answered.
    assert (
        len(answers(httpx.post(bounded.url + "/invocations", content=many_lines(2), headers=JSONL)))
        == 2
    )


def test_lines_get_the_errors_their_bodies_get_alone(adapter):
    def alone(raw: bytes) -> httpx.Response:
        return httpx.post(
            adapter.url + "/invocations",
            content=raw,
            headers={"Content-Type": "application/json"},
            timeout=60,
        )

    # Raw surrogate bytes (CESU-8) in a state: named where they are, alone as in a line.
    surrogate = json.dumps({"decision": decision("s", state="@")}).encode()
    surrogate = surrogate.replace(b"@", "\ud800".encode("utf-8", "surrogatepass"))
    chat = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    body = b"\n".join([surrogate, chat, b'{"decision": 1,}']) + b"\n"
    got = answers(httpx.post(adapter.url + "/invocations", content=body, headers=JSONL))
    assert got[0]["field"] == alone(surrogate).json()["field"] == "decision.state"
    assert got[0]["status"] == 400
    # Chat is refused as docs/api.md says, 415, as forcing format=chat on the body is.
    assert (got[1]["status"], got[1]["error_type"]) == (415, "unsupported_media_type")
    assert got[2]["error"].startswith("line 3: malformed JSON at column 16")
    # One rule for encodings: UTF-8 (RFC 8259), alone as in lines.
    utf16 = json.dumps({"decision": decision("u")}).encode("utf-16-le")
    refused = alone(utf16)
    assert refused.status_code == 400
    assert refused.json()["error"] == "body: UTF-16-LE is not accepted; send UTF-8"


def test_the_time_bound_stops_the_line_being_scored_and_frees_the_model(bounded):
    """The body's bound ends the model work, between batches, not only the wait for it: a line
    whose state takes far longer than the bound to prefill stops there."""
    from tests.support.bodies import decision

    state_tokens = 7000  # "ab " is one token: about 30 s of prefill here, the bound is 5 s
    line = json.dumps(decision("ab " * state_tokens, "Is it?", ("yes", "no"), readout="letters"))
    before = bounded.stats()["engine"]["tokens_decoded"]
    response = httpx.post(
        bounded.url + "/invocations", content=line + "\n", headers=JSONL, timeout=60
    )
    assert response.status_code == 503, response.text
    assert response.json()["error_type"] == "jsonlines_timeout"
    # Once no model job runs (the batch in progress when the bound came ends first), what the
    # long line decoded shows whether it was stopped; then the model answers again.
    bounded.wait_until_in_flight(0)
    decoded = bounded.stats()["engine"]["tokens_decoded"] - before
    assert decoded < state_tokens, f"{decoded} tokens decoded: the line ran to its end"
    short = httpx.post(bounded.url + "/invocations", json=decision(readout="letters"), timeout=60)
    assert short.status_code == 200, short.text
