"""Abstention and margin: every answer carries the top option's lead over the second, and a
caller-set minimum confidence below which it abstains, the probabilities still answered."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from decision_adapter.contract import Verdict

QUEUES = [
    {"id": "account_access", "description": "Logins, passwords and locked accounts."},
    {"id": "billing", "description": "Charges, refunds and invoices."},
    {"id": "shipping", "description": "Deliveries and parcels."},
]
STATE = "I was charged twice for my March invoice and the refund never arrived."


def body(min_confidence=None, **fields):
    decision = {
        "id": "route",
        "state": STATE,
        "question": "Which queue should handle this request?",
        "options": QUEUES,
        **fields,
    }
    if min_confidence is not None:
        decision["min_confidence"] = min_confidence
    return {"decision": decision}


def systemone(min_confidence=None):
    request = {
        "model": "jev-latest",
        "state": STATE,
        "questions": {
            "queue": {"type": "choice", "criteria": {q["id"]: q["description"] for q in QUEUES}},
            "refund": {"type": "noul", "instructions": "Does the customer want a refund?"},
            "severity": {"type": "score", "criteria": ["minor", "major", "critical"]},
        },
    }
    if min_confidence is not None:
        request["x_min_confidence"] = min_confidence
    return request


def test_the_verdict_is_the_top_option_its_probability_and_its_lead():
    verdict = Verdict.of(np.array([0.2, 0.5, 0.3]))
    assert (verdict.top, verdict.top_probability, verdict.abstained) == (1, 0.5, False)
    assert verdict.margin == pytest.approx(0.2)
    assert Verdict.of(np.array([0.2, 0.5, 0.3]), 0.5).abstained is False  # reached, not missed
    below = Verdict.of(np.array([0.2, 0.5, 0.3]), 0.51)
    assert (below.top, below.abstained) == (None, True)
    assert below.margin == pytest.approx(0.2)  # still reported
    assert Verdict.of(np.array([1.0])).margin == 1.0


@pytest.mark.parametrize("value", [0, -0.1, 1.5, "high", True])
def test_a_minimum_confidence_outside_0_to_1_is_refused_naming_the_field(in_process, value):
    response = in_process.post("/invocations", json=body(min_confidence=value))
    assert response.status_code == 422, response.text
    assert "decision.min_confidence" in response.text
    reply = in_process.post("/v1/systemone", json=systemone(min_confidence=value))
    assert reply.status_code in (400, 422), reply.text
    assert "x_min_confidence" in reply.text


def test_a_decision_answers_its_top_option_or_abstains(adapter):
    plain = httpx.post(adapter.url + "/invocations", json=body(), timeout=120).json()["result"]
    probabilities = plain["probabilities"]
    top = int(np.argmax(probabilities))
    assert plain["answer"] == QUEUES[top]["id"] and plain["abstained"] is False
    assert plain["top_probability"] == max(probabilities)
    assert plain["margin"] == pytest.approx(max(probabilities) - sorted(probabilities)[-2])
    assert plain["min_confidence"] is None

    above = max(probabilities) + (1 - max(probabilities)) / 2
    unsure = httpx.post(adapter.url + "/invocations", json=body(above), timeout=120).json()
    result = unsure["result"]
    assert (result["answer"], result["abstained"], result["min_confidence"]) == (None, True, above)
    assert result["probabilities"] == probabilities  # abstaining changes no number
    reached = body(max(probabilities) - 1e-9)
    sure = httpx.post(adapter.url + "/invocations", json=reached, timeout=120).json()["result"]
    assert sure["answer"] == plain["answer"] and sure["abstained"] is False


def test_system_one_answers_carry_the_margin_and_abstain_below_the_minimum(adapter):
    url = adapter.url + "/v1/systemone"
    plain = httpx.post(url, json=systemone(), timeout=120).json()["answers"]
    for name, answer in plain.items():
        assert answer["x_abstained"] is False, name
        values = sorted(answer.get("probabilities", {}).values()) or sorted(
            [answer["noul"], 1 - answer["noul"]]
        )
        assert answer["x_margin"] == pytest.approx(values[-1] - values[-2], abs=1e-12), name
    strict = httpx.post(url, json=systemone(0.999999), timeout=120).json()["answers"]
    assert all(answer["x_abstained"] for answer in strict.values())
    assert strict["queue"]["probabilities"] == plain["queue"]["probabilities"]


@pytest.mark.large_model
def test_the_instruct_model_answers_a_plain_question_and_abstains_on_a_coin_toss(
    tmp_path,
):
    """On Qwen2.5-Coder-1.5B-Instruct (make test-large): a question the state answers clears a
    high bar; one it cannot answer does not. Read with the content-free prior removed
    (`calibrated`): the built-in `json_choice` puts 0.78 on `heads` for the coin and 0.55 on
    `billing`, a prior for the word, not knowledge (research/instruct_readouts/README.md)."""
    from launcher import running_adapter
    from launcher.models import local_model

    gguf = local_model("qwen2.5-coder-1.5b")
    with running_adapter(tmp_path, DECISION_MODEL_PATH=str(gguf)) as adapter:
        url = adapter.url + "/invocations"
        clear = httpx.post(url, json=body(0.6, readout="calibrated"), timeout=300).json()
        clear = clear["result"]
        assert clear["answer"] == "billing" and clear["abstained"] is False, clear
        toss = body(
            0.9,
            state="A coin was tossed; nobody has looked at it yet.",
            question="Which side is up?",
            options=[{"id": "heads"}, {"id": "tails"}],
            readout="calibrated",
        )
        unsure = httpx.post(url, json=toss, timeout=300).json()["result"]
        assert unsure["abstained"] is True and unsure["answer"] is None, unsure
        assert unsure["margin"] < 0.8


def openai_decisions(min_confidence=None):
    request = {
        "model": "jev-latest",
        "input": STATE,
        "questions": [
            {
                "type": "choice",
                "name": "queue",
                "instructions": "Which queue should handle this request?",
                "choices": [{"value": q["id"], "description": q["description"]} for q in QUEUES],
            },
            {"type": "predicate", "name": "refund", "instructions": "A refund is wanted."},
        ],
    }
    if min_confidence is not None:
        request["x_min_confidence"] = min_confidence
    return request


def test_openai_decisions_carry_the_margin_and_abstain_as_a_refusal_keeping_the_answer(adapter):
    url = adapter.url + "/v1/decisions"
    plain = httpx.post(url, json=openai_decisions(), timeout=120).json()["answers"]
    queue, refund = plain
    ranked = sorted((p["probability"] for p in queue["probabilities"]), reverse=True)
    assert queue["x_margin"] == pytest.approx(ranked[0] - ranked[1], abs=1e-12)
    assert refund["x_margin"] == pytest.approx(abs(2 * refund["probability"] - 1), abs=1e-12)
    # Between the two tops: the less sure question abstains, the surer one answers.
    tops = {"queue": ranked[0], "refund": max(refund["probability"], 1 - refund["probability"])}
    bar = sum(tops.values()) / 2
    assert tops["queue"] != tops["refund"]
    answered = httpx.post(url, json=openai_decisions(bar), timeout=120).json()["answers"]
    for answer, before in zip(answered, plain, strict=True):
        if tops[before["name"]] < bar:
            assert answer == {
                "type": "refusal",
                "name": before["name"],
                "x_abstained": True,
                "x_answer": before,
            }
        else:
            assert answer == before


def test_the_openai_sdk_reads_an_abstention_as_a_refusal_with_the_answer_kept(adapter):
    from openai import OpenAI

    client = OpenAI(base_url=adapter.url + "/v1", api_key="unused")
    decision = client.decisions.create(
        model="jev-latest",
        input=STATE,
        questions=openai_decisions()["questions"],
        extra_body={"x_min_confidence": 1.0},
    )
    assert [answer.type for answer in decision.answers] == ["refusal", "refusal"]
    kept = decision.answers[0].model_extra["x_answer"]
    assert kept["type"] == "choice" and kept["choice"] in {q["id"] for q in QUEUES}


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, "0.5", True])
def test_openai_decisions_refuse_a_minimum_confidence_outside_0_1_naming_it(in_process, bad):
    response = in_process.post("/v1/decisions", json=openai_decisions(bad))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "x_min_confidence"
