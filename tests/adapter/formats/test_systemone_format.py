"""The System One schema, its mapping onto generic questions, the answer encoders and error
shapes; no model needed."""

from __future__ import annotations

import numpy as np
import pytest
from decision_adapter.calibration import Calibration
from decision_adapter.contract import Answer, ModelIdentity, QuestionScores
from decision_adapter.formats import systemone
from pydantic import ValidationError


def request(**questions):
    return systemone.SystemOneRequest.model_validate(
        {"model": "jev-latest", "state": "s", "questions": questions}
    )


def test_noul_is_true_and_false_described_by_its_criteria():
    q = request(
        a={
            "type": "noul",
            "instructions": "Refund?",
            "criteria": {"true": "wants money", "false": ["other", "things"]},
        }
    ).questions["a"]
    question = q.as_question()
    assert question.question == "Refund?"
    assert question.option_ids == ["true", "false"]
    assert question.descriptions == ["wants money", '["other", "things"]']
    assert q.answer(np.array([0.7, 0.3])) == {"type": "noul", "noul": 0.7}


@pytest.mark.parametrize("criteria", [None, {"true": "yes"}, {"false": "no"}, {}])
def test_noul_criteria_may_be_absent_null_or_one_sided(criteria):
    body = {"type": "noul", "instructions": "Refund?"}
    if criteria != {}:
        body["criteria"] = criteria
    question = request(a=body).questions["a"].as_question()
    assert len(question.descriptions) == 2


def test_noul_without_instructions_gets_a_neutral_question():
    question = (
        request(a={"type": "noul", "criteria": {"true": "a threat"}}).questions["a"].as_question()
    )
    assert question.question and question.descriptions == ["a threat", None]


def test_structured_instructions_and_descriptions_render_as_json_in_sent_order():
    q = request(
        a={
            "type": "choice",
            "instructions": {"task": "route", "b": 1},
            "criteria": {"Billing": {"owns": ["invoices"]}, "Sales": None},
        }
    ).questions["a"]
    question = q.as_question()
    assert question.question == '{"task": "route", "b": 1}'
    assert question.descriptions == ['{"owns": ["invoices"]}', None]


def test_choice_answer_is_argmax_with_reference_confidence():
    q = request(a={"type": "choice", "criteria": {"x": None, "y": None, "z": None}}).questions["a"]
    answer = q.answer(np.array([0.2, 0.5, 0.3]))
    assert answer["choice"] == "y"
    assert answer["probabilities"] == {"x": 0.2, "y": 0.5, "z": 0.3}
    assert answer["confidence"] == pytest.approx((0.5 - 1 / 3) / (1 - 1 / 3))


def test_score_answer_is_expectation_with_legend_and_reference_confidence():
    levels = ["Calm", {"label": "Frustrated"}, "Very angry"]
    q = request(a={"type": "score", "criteria": levels}).questions["a"]
    assert q.as_question().option_ids == ["0", "1", "2"]
    answer = q.answer(np.array([0.1, 0.6, 0.3]))
    assert answer["score"] == pytest.approx(0.6 + 2 * 0.3)
    assert answer["legend"] == {"0": "Calm", "1": {"label": "Frustrated"}, "2": "Very angry"}
    assert answer["probabilities"] == {"0": 0.1, "1": 0.6, "2": 0.3}
    spread = 0.1 * 1 + 0.3 * 1
    uniform_spread = (1 + 0 + 1) / 3
    assert answer["confidence"] == pytest.approx(1 - spread / uniform_spread)


def test_confidence_stays_in_the_unit_interval():
    assert systemone.choice_confidence(np.array([0.5, 0.5])) == 0.0
    assert systemone.choice_confidence(np.array([1.0, 0.0])) == 1.0
    # A bimodal score is spread wider than uniform: the formula goes negative, clipped to 0.
    assert systemone.score_confidence(np.array([0.5, 0.0, 0.0, 0.0, 0.5])) == 0.0
    assert systemone.score_confidence(np.array([0.0, 0.0, 1.0])) == 1.0


def test_encoded_answer_carries_extensions_with_x_prefix():
    q = request(a={"type": "noul"}).questions["a"]
    scores = QuestionScores(
        readout="single-token",
        option_log_probs=np.log([0.6, 0.2]),
        option_logits=np.array([2.0, 1.0]),
        full_vocab_argmax_id=0,
    )
    scored = Answer(
        scores=scores,
        labels=["A", "B"],
        prompt_sha256="f" * 64,
        input_tokens=4,
        full_vocab_argmax_token="A",
    )
    model = ModelIdentity(
        "m", "d", "2026-01-01", "v", Calibration(2.0, "DECISION_CALIBRATION_TEMPERATURE")
    )
    answer = systemone.encode_answer(q, scored, model=model)
    assert answer["noul"] == pytest.approx(1 / (1 + np.exp(-0.5)))  # softmax of logits / 2
    assert answer["x_logits"] == {"true": 2.0, "false": 1.0}
    assert answer["x_temperature"] == 2.0 and answer["x_prompt_sha256"] == "f" * 64
    assert answer["x_readout"] == "letters" and answer["x_readout_mode"] == "single-token"
    assert all(k in ("type", "noul") or k.startswith("x_") for k in answer)


def test_unknown_top_level_fields_are_ignored_but_not_inside_questions():
    body = {
        "model": "m",
        "state": ["a", 1],
        "questions": {"q": {"type": "noul"}},
        "seed": 7,
        "x_trace": 1,
    }
    assert systemone.SystemOneRequest.model_validate(body).state == ["a", 1]
    with pytest.raises(ValidationError):
        request(q={"type": "noul", "criterias": {"true": "typo"}})


@pytest.mark.parametrize(
    "questions,loc",
    [
        ({}, ["body", "questions"]),
        ({"": {"type": "noul"}}, ["body", "questions", ""]),
        ({"q": {"instructions": "no type"}}, ["body", "questions", "q"]),
        ({"q": {"type": "boolean"}}, ["body", "questions", "q"]),
        (
            {"q": {"type": "choice", "criteria": {"only": None}}},
            ["body", "questions", "q", "choice", "criteria"],
        ),
        (
            {"q": {"type": "choice", "criteria": {f"o{i}": None for i in range(256)}}},
            ["body", "questions", "q", "choice", "criteria"],
        ),
        (
            {"q": {"type": "score", "criteria": ["one"]}},
            ["body", "questions", "q", "score", "criteria"],
        ),
        (
            {"q": {"type": "score", "criteria": [str(i) for i in range(11)]}},
            ["body", "questions", "q", "score", "criteria"],
        ),
        (
            {"q": {"type": "score", "criteria": {"0": "a", "1": "b"}}},
            ["body", "questions", "q", "score", "criteria"],
        ),
        (
            {"q": {"type": "score", "criteria": ["a", None]}},
            ["body", "questions", "q", "score", "criteria", 1],
        ),
        (
            {"q": {"type": "noul", "criteria": {"maybe": "x"}}},
            ["body", "questions", "q", "noul", "criteria", "maybe"],
        ),
    ],
)
def test_invalid_questions_give_fastapi_shaped_validation_errors(questions, loc):
    with pytest.raises(ValidationError) as error:
        systemone.SystemOneRequest.model_validate(
            {"model": "m", "state": "s", "questions": questions}
        )
    detail = systemone.validation_error_body(error.value)["detail"]
    assert detail[0]["loc"][: len(loc)] == loc
    assert all(isinstance(d["msg"], str) and isinstance(d["type"], str) for d in detail)


@pytest.mark.parametrize(
    "body",
    [
        {"state": "s", "questions": {"q": {"type": "noul"}}},
        {"model": "m", "questions": {"q": {"type": "noul"}}},
        {"model": "m", "state": None, "questions": {"q": {"type": "noul"}}},
        {"model": 3, "state": "s", "questions": {"q": {"type": "noul"}}},
    ],
)
def test_model_state_and_questions_are_required_and_typed(body):
    with pytest.raises(ValidationError):
        systemone.SystemOneRequest.model_validate(body)


def test_error_bodies_have_the_validation_or_the_detail_shape():
    assert systemone.error_body(400, "invalid_json", "bad", "body") == (
        422,
        {"detail": [{"loc": ["body"], "msg": "bad", "type": "invalid_json"}]},
    )
    assert systemone.error_body(422, "invalid_request", "too many", "questions")[1]["detail"][0][
        "loc"
    ] == ["body", "questions"]
    assert systemone.error_body(401, "authentication_error", "no key", "Authorization") == (
        401,
        {"detail": {"error_type": "authentication_error", "message": "no key"}},
    )


def test_models_lists_the_served_model_and_the_alias():
    listed = systemone.encode_models(
        name="gemma", description="d", release_date="2026-01-02", extensions={"gguf_sha256": "ab"}
    )["models"]
    assert [m["name"] for m in listed] == ["gemma", "jev-latest"]
    assert all(m["release_date"] == "2026-01-02" and m["x_gguf_sha256"] == "ab" for m in listed)
