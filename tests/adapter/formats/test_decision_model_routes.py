"""A trained decision model through every route the adapter speaks: the same question gives the
same probabilities on /v1/systemone, /invocations (one decision, several on one state, JSON
Lines) and /v1/decisions, since each question's prompt is decoded alone
(scoring/trained_head.py); the answer says the head read it."""

from __future__ import annotations

import json

import httpx
import pytest

from launcher import running_adapter
from tests.support.decision_models import build

STATE = "The customer cannot log in after the password reset."
QUESTION = "Which queue should handle this?"
OPTIONS = [("account_access", "Account access."), ("billing", None), ("shipping", "Parcels.")]


# A label type, and the two read through hidden states (an embeddings context).
@pytest.fixture(scope="module", params=["openjev", "kev", "laya"])
def kind(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, kind):
    directory = tmp_path_factory.mktemp(kind)
    gguf = build(kind, directory)
    with running_adapter(directory, DECISION_MODEL_PATH=str(gguf), DECISION_N_THREADS="2") as a:
        yield a


def decision(identifier: str) -> dict:
    options = [{"id": key, "description": text} for key, text in OPTIONS]
    return {"id": identifier, "state": STATE, "question": QUESTION, "options": options}


@pytest.fixture(scope="module")
def reference(adapter) -> list[float]:
    body = {
        "model": "jev-latest",
        "state": STATE,
        "questions": {
            "route": {"type": "choice", "instructions": QUESTION, "criteria": dict(OPTIONS)}
        },
    }
    reply = httpx.post(f"{adapter.url}/v1/systemone", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    return list(reply.json()["answers"]["route"]["probabilities"].values())


def test_one_decision_on_invocations(adapter, reference, kind):
    reply = httpx.post(f"{adapter.url}/invocations", json={"decision": decision("a")}, timeout=60)
    assert reply.status_code == 200, reply.text
    result = reply.json()["result"]
    assert result["probabilities"] == reference
    assert result["readout_mode"] == "decision-head"
    assert result["model"]["decision_type"] == kind


def test_several_decisions_on_one_state_and_json_lines(adapter, reference):
    body = {"decisions": [decision("a"), decision("b")]}
    reply = httpx.post(f"{adapter.url}/invocations", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    assert [r["probabilities"] for r in reply.json()["results"]] == [reference, reference]
    lines = "\n".join(json.dumps({"decision": decision(n)}) for n in "xy") + "\n"
    reply = httpx.post(
        f"{adapter.url}/invocations",
        content=lines,
        headers={"Content-Type": "application/jsonlines"},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    answered = [json.loads(line)["result"] for line in reply.text.splitlines()]
    assert [r["probabilities"] for r in answered] == [reference, reference]


def test_openai_decisions(adapter, reference):
    choices = [{"value": key, **({"description": text} if text else {})} for key, text in OPTIONS]
    body = {
        "model": "jev-latest",
        "input": STATE,
        "questions": [
            {"name": "route", "type": "choice", "instructions": QUESTION, "choices": choices}
        ],
    }
    reply = httpx.post(f"{adapter.url}/v1/decisions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    (answer,) = reply.json()["answers"]
    assert [p["probability"] for p in answer["probabilities"]] == reference


def test_abstention_reads_the_heads_top_probability(adapter, reference):
    """min_confidence (and System One's x_min_confidence) abstain on the head's own answer."""
    top = max(reference)
    for threshold, abstains in ((top - 0.01, False), (min(top + 0.01, 1.0), True)):
        body = {"decision": {**decision("a"), "min_confidence": threshold}}
        reply = httpx.post(f"{adapter.url}/invocations", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        result = reply.json()["result"]
        assert result["abstained"] is abstains
        assert (result["answer"] is None) is abstains
        assert result["probabilities"] == reference
        body = {
            "model": "jev-latest",
            "state": STATE,
            "x_min_confidence": threshold,
            "questions": {
                "route": {"type": "choice", "instructions": QUESTION, "criteria": dict(OPTIONS)}
            },
        }
        reply = httpx.post(f"{adapter.url}/v1/systemone", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        assert reply.json()["answers"]["route"]["x_abstained"] is abstains
