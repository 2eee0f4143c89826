"""System One over HTTP against live adapters on the real bundled model: answers, routes,
independence of questions, errors in the format's shapes, auth and calibration."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from tests.adapter.conftest import API_KEY, CALIBRATION_TEMPERATURE, RETRY_AFTER_S
from tests.support.adapter_process import model_held

TICKET = (
    "I was charged twice for my March invoice and the refund I was promised last week "
    "still hasn't arrived. Fix this today or I will dispute the charge."
)
REFUND = {
    "type": "noul",
    "instructions": "Is the customer asking for money back?",
    "criteria": {"true": "They want a refund or chargeback", "false": "Anything else"},
}
TEAM = {
    "type": "choice",
    "instructions": "Which team should handle this ticket?",
    "criteria": {
        "Billing": "Payments, invoices, refunds",
        "Technical": None,
        "Sales": {"owns": ["pricing", "upgrades"]},
    },
}
ANGER = {
    "type": "score",
    "instructions": ["How frustrated is the customer?", "Rate it."],
    "criteria": ["Calm", "Frustrated", {"label": "Very angry", "signals": ["threats"]}],
}
QUESTIONS = {"refund": REFUND, "team": TEAM, "anger": ANGER}


def body(questions=None, **extra):
    return {"model": "jev-latest", "state": TICKET, "questions": questions or QUESTIONS, **extra}


def ask(adapter, payload, path="/v1/systemone", **kwargs):
    """POST to a live adapter, or through an in-process client."""
    if hasattr(adapter, "post"):  # a client, not a live adapter's address
        return adapter.post(path, json=payload, **kwargs)
    return httpx.post(adapter.url + path, json=payload, timeout=120, **kwargs)


def answers(adapter, questions, **extra):
    response = ask(adapter, body(questions, **extra))
    assert response.status_code == 200, response.text
    return response.json()["answers"]


@pytest.fixture(scope="module")
def baseline(adapter):
    response = ask(adapter, body())
    assert response.status_code == 200, response.text
    return response.json()


# --- answers -------------------------------------------------------------------------------
def test_every_answer_type_in_one_request(baseline):
    assert baseline["model"] == "gemma-3-270m-q4_k_m"
    refund, team, anger = (baseline["answers"][q] for q in ("refund", "team", "anger"))
    assert refund["type"] == "noul" and 0 <= refund["noul"] <= 1
    assert set(refund["x_logits"]) == {"true", "false"}

    assert team["type"] == "choice" and list(team["probabilities"]) == [
        "Billing",
        "Technical",
        "Sales",
    ]
    probabilities = np.array(list(team["probabilities"].values()))
    assert probabilities.sum() == pytest.approx(1.0)
    assert team["choice"] == max(team["probabilities"], key=team["probabilities"].get)
    assert team["confidence"] == pytest.approx((probabilities.max() - 1 / 3) / (1 - 1 / 3))

    assert anger["type"] == "score" and anger["legend"] == dict(
        zip("012", ANGER["criteria"], strict=False)
    )
    levels = np.array([anger["probabilities"][k] for k in "012"])
    assert anger["score"] == pytest.approx(levels @ np.arange(3))
    mode = int(levels.argmax())
    spread = levels @ np.abs(np.arange(3) - mode)
    assert anger["confidence"] == pytest.approx(max(0.0, 1 - spread / (2 / 3)))


def test_usage_counts_input_tokens_and_no_output(baseline):
    usage = baseline["usage"]
    assert usage["output_tokens"] == 0
    # The shared state is read once: the count is the request's tokens, not three full prompts.
    assert usage["input_tokens"] == baseline["x_timing"]["request_tokens"]
    assert (
        isinstance(usage["input_tokens"], int)
        and usage["input_tokens"] > baseline["x_timing"]["prefix_tokens"]
    )


def test_extensions_are_x_prefixed(baseline):
    assert all(key in ("model", "answers", "usage") or key.startswith("x_") for key in baseline)
    assert baseline["x_calibration"] == {"temperature": 1.0, "source": "none", "readout": "letters"}
    for answer in baseline["answers"].values():
        assert len(answer["x_prompt_sha256"]) == 64 and answer["x_temperature"] == 1.0
        assert answer["x_readout"] == "letters"
        assert answer["x_readout_mode"] == "letter-spellings"
        assert 0 < answer["x_allowed_token_mass"] <= 1
        assert answer["x_low_allowed_mass"] == (answer["x_allowed_token_mass"] < 0.5)


@pytest.mark.parametrize(
    "state",
    [
        {"subject": "Charged twice", "customer": {"plan": "pro"}},
        ["Charged twice.", "Refund promised, not received."],
    ],
)
def test_state_may_be_an_object_or_an_array(adapter, state):
    response = ask(adapter, {**body({"refund": REFUND}), "state": state})
    assert response.status_code == 200, response.text


def test_served_model_name_is_accepted_like_the_alias(adapter, baseline):
    response = ask(adapter, body({"refund": REFUND}, model="gemma-3-270m-q4_k_m"))
    assert response.status_code == 200, response.text
    assert response.json()["answers"]["refund"] == baseline["answers"]["refund"]


def test_models_lists_the_served_model_and_jev_latest(adapter):
    response = httpx.get(adapter.url + "/v1/models")
    assert response.status_code == 200
    models = response.json()["models"]
    assert [m["name"] for m in models] == ["gemma-3-270m-q4_k_m", "jev-latest"]
    for model in models:
        assert model["description"] and len(model["release_date"]) == 10


# --- independence: an answer depends on its own question only (bit-exact) -----------------
def test_each_answer_is_the_same_asked_alone(adapter, baseline):
    for question_id, question in QUESTIONS.items():
        assert (
            answers(adapter, {question_id: question})[question_id]
            == baseline["answers"][question_id]
        )


def test_answers_do_not_depend_on_question_order(adapter, baseline):
    reversed_order = answers(adapter, dict(reversed(QUESTIONS.items())))
    assert list(reversed_order) == ["anger", "team", "refund"]
    assert reversed_order == baseline["answers"]


def test_answers_do_not_depend_on_question_ids(adapter, baseline):
    renamed = {"zz-renamed.1": "refund", "Q 🙂": "team", "x_y_z": "anger"}
    got = answers(adapter, {new: QUESTIONS[old] for new, old in renamed.items()})
    assert {renamed[new]: answer for new, answer in got.items()} == baseline["answers"]


def test_answers_do_not_depend_on_other_questions(adapter, baseline):
    others = {
        "urgent": {"type": "noul", "instructions": "Does the customer need an answer today?"},
        "lang": {
            "type": "choice",
            "instructions": "Language?",
            "criteria": {"English": None, "Other": None},
        },
        "polite": {
            "type": "score",
            "instructions": "How polite?",
            "criteria": ["Rude", "Neutral", "Polite"],
        },
    }
    got = answers(adapter, {"urgent": others["urgent"], **QUESTIONS, **others})
    assert {q: got[q] for q in QUESTIONS} == baseline["answers"]


# --- SageMaker /invocations ---------------------------------------------------------------
def test_invocations_answers_a_system_one_body_identically(adapter, baseline):
    response = ask(adapter, body(), path="/invocations")
    assert response.status_code == 200, response.text
    via_invocations = response.json()
    for key in ("model", "answers", "usage", "x_calibration", "x_prompt_version"):
        assert via_invocations[key] == baseline[key]


def test_custom_attributes_force_the_format_and_are_echoed(in_process):
    adapter = in_process
    attributes = "format=systemone;trace=t-1"
    malformed = adapter.post(
        "/invocations",
        content=b'{"questions": {',
        headers={
            "content-type": "application/json",
            "X-Amzn-SageMaker-Custom-Attributes": attributes,
        },
    )
    assert malformed.status_code == 422 and malformed.json()["detail"][0]["type"] == "invalid_json"
    assert malformed.headers["x-amzn-sagemaker-custom-attributes"] == attributes

    as_decision = ask(
        adapter,
        body({"refund": REFUND}),
        path="/invocations",
        headers={"X-Amzn-SageMaker-Custom-Attributes": "format=decision"},
    )
    assert as_decision.status_code == 422 and as_decision.json()["error_type"] == "validation_error"

    unknown = ask(
        adapter,
        body({"refund": REFUND}),
        path="/invocations",
        headers={"X-Amzn-SageMaker-Custom-Attributes": "format=xml"},
    )
    assert (
        unknown.status_code == 400 and unknown.json()["error_type"] == "invalid_custom_attributes"
    )


def test_invocations_validation_errors_of_a_system_one_body_use_its_shape(in_process):
    response = ask(
        in_process,
        body({"q": {"type": "score", "criteria": {"0": "a", "1": "b"}}}),
        path="/invocations",
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "questions", "q", "score", "criteria"]


# --- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "jev-latest", "questions": {',
        b"[1, 2]",
        b"",
        b'{"model": "jev-latest", "state": "s", "questions": {}}',
        b'{"model": "jev-latest", "state": NaN, "questions": {"q": {"type": "noul"}}}',
    ],
)
def test_bad_bodies_get_422_with_detail_list(in_process, raw):
    response = in_process.post(
        "/v1/systemone", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail and all(d["loc"][0] == "body" and d["msg"] and d["type"] for d in detail)


def test_unknown_model_is_a_404_naming_the_served_ones(in_process):
    response = ask(in_process, body({"refund": REFUND}, model="no-such-model"))
    assert response.status_code == 404
    detail = response.json()["detail"]
    assert detail["error_type"] == "model_not_found" and "jev-latest" in detail["message"]


def test_too_many_questions_is_a_validation_error(adapter):
    many = {f"q{i}": REFUND for i in range(33)}
    response = ask(adapter, body(many))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "questions"]


def test_over_budget_and_wrong_media_type_carry_error_type_and_message(adapter):
    huge = ask(adapter, {**body({"refund": REFUND}), "state": "refund " * 9000})
    assert huge.status_code == 413 and huge.json()["detail"]["error_type"] == "token_limit_exceeded"
    form = httpx.post(
        adapter.url + "/v1/systemone",
        content=b"state=x",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert (
        form.status_code == 415 and form.json()["detail"]["error_type"] == "unsupported_media_type"
    )


def test_busy_model_answers_503_in_system_one_shape_after_retry_after_s(secured_adapter):
    key = {"Authorization": f"Bearer {API_KEY}"}
    with model_held(secured_adapter, **key):
        busy = ask(secured_adapter, body({"refund": REFUND}), headers=key)
    # The secured adapter sets DECISION_RETRY_AFTER_S to a value other than the default.
    assert busy.status_code == 503 and busy.headers["retry-after"] == str(RETRY_AFTER_S)
    assert busy.json()["detail"]["error_type"] == "overloaded"
    assert busy.json()["detail"]["retry_after_s"] == RETRY_AFTER_S


# --- auth ---------------------------------------------------------------------------------
def test_without_a_key_configured_an_authorization_header_is_ignored(in_process):
    response = ask(
        in_process, body({"refund": REFUND}), headers={"Authorization": "Bearer anything"}
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": API_KEY},
        {"Authorization": "Basic " + API_KEY},
    ],
)
def test_with_a_key_missing_or_wrong_keys_get_401(secured_in_process, headers):
    for method, path in (("POST", "/v1/systemone"), ("GET", "/v1/models")):
        response = secured_in_process.request(
            method,
            path,
            headers=headers,
            json=body({"refund": REFUND}) if method == "POST" else None,
        )
        assert response.status_code == 401, response.text
        assert response.json()["detail"]["error_type"] == "authentication_error"
        assert response.headers["www-authenticate"] == "Bearer"


def test_with_a_key_stats_need_it(secured_in_process):
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = secured_in_process.get("/stats", headers=headers)
        assert response.status_code == 401, response.text
        assert response.json()["error_type"] == "authentication_error"
    keyed = secured_in_process.get("/stats", headers={"Authorization": f"Bearer {API_KEY}"})
    assert keyed.status_code == 200 and "admission" in keyed.json()


def test_with_a_key_chat_is_guarded_and_sagemaker_routes_stay_open(secured_in_process):
    secured_adapter = secured_in_process
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    guarded = secured_adapter.post("/v1/chat/completions", json=chat)
    assert guarded.status_code == 401 and guarded.json()["error_type"] == "authentication_error"
    # SageMaker authenticates callers itself and strips their Authorization header.
    assert secured_adapter.get("/ping").status_code == 200
    assert ask(secured_adapter, body({"refund": REFUND}), path="/invocations").status_code == 200


# --- calibration --------------------------------------------------------------------------
def test_calibration_temperature_divides_logits_before_the_softmax(adapter, secured_adapter):
    plain = ask(adapter, body()).json()
    calibrated = ask(secured_adapter, body(), headers={"Authorization": f"Bearer {API_KEY}"}).json()
    assert calibrated["x_calibration"] == {
        "temperature": CALIBRATION_TEMPERATURE,
        "source": "DECISION_CALIBRATION_TEMPERATURE",
        "readout": "letters",
    }
    for question_id in QUESTIONS:
        answer = calibrated["answers"][question_id]
        assert answer["x_temperature"] == CALIBRATION_TEMPERATURE
        assert answer["x_logits"] == plain["answers"][question_id]["x_logits"]  # same model
        logits = np.array(list(answer["x_logits"].values())) / CALIBRATION_TEMPERATURE
        expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        got = (
            [answer["noul"]] if answer["type"] == "noul" else list(answer["probabilities"].values())
        )
        assert got == pytest.approx(expected[: len(got)], abs=1e-9)


def test_calibration_also_applies_to_the_decision_format(secured_adapter):
    decision = {
        "id": "d",
        "state": TICKET,
        "question": "Which team?",
        "options": [{"id": "billing"}, {"id": "technical"}],
    }
    result = ask(secured_adapter, {"decision": decision}, path="/invocations").json()["result"]
    assert result["temperature"] == CALIBRATION_TEMPERATURE
    logits = np.array(result["option_logits"]) / CALIBRATION_TEMPERATURE
    assert result["probabilities"] == pytest.approx(
        list(np.exp(logits) / np.exp(logits).sum()), abs=1e-9
    )


# --- the official client --------------------------------------------------------------------
def test_official_sdk_parses_every_answer_type(adapter):
    from typesafe_sdk import Choice, Noul, Score, TypeSafeClient

    questions = {
        "refund": Noul(instructions=REFUND["instructions"], criteria=REFUND["criteria"]),
        "bare": Noul(instructions="Is this about money?"),
        "team": Choice(instructions=TEAM["instructions"], criteria=TEAM["criteria"]),
        "anger": Score(instructions=ANGER["instructions"], criteria=ANGER["criteria"]),
    }
    with TypeSafeClient(
        api_key="ignored-when-auth-is-off", base_url=adapter.url, timeout=120
    ) as client:
        response = client.system_one(state=TICKET, questions=questions)
        listed = client.models.list()
    assert set(response.nouls) == {"refund", "bare"} and 0 <= response.nouls["refund"].noul <= 1
    team = response.choices["team"]
    assert team.choice in TEAM["criteria"] and set(team.probabilities) == set(TEAM["criteria"])
    anger = response.scores["anger"]
    assert anger.legend == {0: "Calm", 1: "Frustrated", 2: ANGER["criteria"][2]}
    assert set(anger.probabilities) == {0, 1, 2} and 0 <= anger.confidence <= 1
    assert response.model == "gemma-3-270m-q4_k_m" and response.usage.output_tokens == 0
    assert "jev-latest" in json.dumps([m.name for m in listed.models])


def test_official_sdk_sends_the_key_when_auth_is_on(secured_adapter):
    from typesafe_sdk import Noul, TypeSafeAuthenticationError, TypeSafeClient

    with TypeSafeClient(api_key=API_KEY, base_url=secured_adapter.url, timeout=120) as client:
        response = client.system_one(
            state=TICKET, questions={"refund": Noul(instructions="Refund?")}
        )
    assert 0 <= response.nouls["refund"].noul <= 1
    with (
        TypeSafeClient(api_key="wrong", base_url=secured_adapter.url, timeout=120) as client,
        pytest.raises(TypeSafeAuthenticationError),
    ):
        client.system_one(state=TICKET, questions={"refund": Noul(instructions="Refund?")})
