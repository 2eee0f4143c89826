"""A calibration file's temperature per question kind, served: each answer is the softmax of its
own logits at its kind's temperature, in System One, the decision format and OpenAI Decisions,
on the real bundled model."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from launcher import running_adapter
from tests.adapter.formats.test_systemone_http import ANGER, REFUND, TEAM, TICKET

TEMPERATURES = {"noul": 0.5, "score": 4.0}  # choice keeps the file's one temperature
ONE = 2.0


@pytest.fixture(scope="module")
def kind_adapter(tmp_path_factory, gemma_gguf):
    model = tmp_path_factory.mktemp("kinds")
    (model / gemma_gguf.name).symlink_to(gemma_gguf)
    (model / "calibration.json").write_text(
        json.dumps({"temperature": ONE, "readout": "letters", "temperatures": TEMPERATURES})
    )
    with running_adapter(model, DECISION_MODEL_DIR=str(model)) as running:
        yield running


def post(adapter, path, payload):
    response = httpx.post(adapter.url + path, json=payload, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def softmax(logits, temperature):
    scaled = np.asarray(logits, dtype=float) / temperature
    weights = np.exp(scaled - scaled.max())
    return weights / weights.sum()


def test_system_one_answers_each_kind_at_its_temperature(kind_adapter):
    questions = {"refund": REFUND, "team": TEAM, "anger": ANGER}
    answered = post(
        kind_adapter,
        "/v1/systemone",
        {"model": "jev-latest", "state": TICKET, "questions": questions},
    )
    assert answered["x_calibration"]["temperatures"] == TEMPERATURES
    expected_temperature = {"refund": 0.5, "team": ONE, "anger": 4.0}
    for question_id, temperature in expected_temperature.items():
        answer = answered["answers"][question_id]
        assert answer["x_temperature"] == temperature
        expected = softmax(list(answer["x_logits"].values()), temperature)
        got = (
            [answer["noul"]] if answer["type"] == "noul" else list(answer["probabilities"].values())
        )
        assert got == pytest.approx(expected[: len(got)], abs=1e-9)


def test_the_decision_format_reads_the_kind_from_the_options(kind_adapter):
    def decision(option_ids):
        return {
            "decision": {
                "id": "d",
                "state": TICKET,
                "question": "Does the customer want a refund?",
                "options": [{"id": option_id} for option_id in option_ids],
            }
        }

    for option_ids, temperature in ((["true", "false"], 0.5), (["yes", "no"], ONE)):
        result = post(kind_adapter, "/invocations", decision(option_ids))["result"]
        assert result["temperature"] == temperature
        expected = softmax(result["option_logits"], temperature)
        assert result["probabilities"] == pytest.approx(expected, abs=1e-9)


def test_openai_decisions_answer_a_predicate_at_the_noul_temperature(kind_adapter):
    both = post(
        kind_adapter,
        "/v1/decisions",
        {
            "model": "jev-latest",
            "input": TICKET,
            "questions": [{"type": "predicate", "name": "refund", "instructions": "A refund?"}],
        },
    )
    system_one = post(
        kind_adapter,
        "/v1/systemone",
        {
            "model": "jev-latest",
            "state": TICKET,
            "questions": {"refund": {"type": "noul", "instructions": "A refund?"}},
        },
    )
    # The same question read the same way: the same probability, at the noul temperature.
    probability = both["answers"][0]["probability"]
    assert probability == system_one["answers"]["refund"]["noul"]
    assert system_one["answers"]["refund"]["x_temperature"] == 0.5
