"""OpenAI's Decisions API through the official `openai` SDK (`client.decisions.create`) against
the live adapter on the real bundled model, every answer parsed by the SDK's own models; the same
bodies through boto3's InvokeEndpoint to /invocations."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai.types.decision import (
    AnswerAnswerResourceChoice,
    AnswerAnswerResourcePredicate,
    AnswerAnswerResourceRefusal,
    AnswerAnswerResourceScore,
    Decision,
)

from tests.support.sagemaker_runtime import invoke_endpoint

SERVED = "gemma-3-270m-q4_k_m"
TICKET = "Order 1182: the parcel arrived crushed and the customer wants her money back."
PREDICATE = {
    "type": "predicate",
    "name": "refund",
    "instructions": "Does the customer ask for a refund?",
}
CHOICE = {
    "type": "choice",
    "name": "queue",
    "instructions": "Which queue should handle this ticket?",
    "choices": [
        {"value": "billing", "description": "Payments and refunds."},
        {"value": "shipping", "description": "Deliveries and damaged parcels."},
    ],
}
BOOLEAN_CHOICE = {
    "type": "choice",
    "name": "damaged",
    "instructions": "Was the parcel damaged?",
    "choices": [{"value": True}, {"value": False}],
}
SCORE = {
    "type": "score",
    "name": "urgency",
    "instructions": "How urgent is this ticket?",
    "levels": [
        {"label": "low", "description": "can wait a week"},
        {"label": "medium"},
        {"label": "high", "description": "answer today"},
    ],
}
IMAGE_QUESTION = {
    "type": "predicate",
    "name": "photo",
    "instructions": [
        {"type": "input_text", "text": "Does the photo show a crushed parcel?"},
        {"type": "input_image", "image_url": "https://example.com/parcel.png"},
    ],
}
# Its own tokens alone are over the request budget (DECISION_MAX_REQUEST_TOKENS, 8192).
TOO_LONG = {"type": "predicate", "name": "long", "instructions": "ab " * 9000 + "?"}
TOOL_INPUT = [
    {"role": "developer", "content": "Route support tickets."},
    {"role": "user", "content": [{"type": "input_text", "text": TICKET}]},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "lookup_order",
        "arguments": '{"order": 1182}',
    },
    {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [{"type": "input_text", "text": '{"status": "delivered", "paid": 54.90}'}],
    },
    {"role": "assistant", "content": [{"type": "output_text", "text": "Looking into it."}]},
]


@pytest.fixture(scope="module")
def client(adapter):
    return openai.OpenAI(base_url=adapter.url + "/v1", api_key="unused", max_retries=0)


def create(client, questions, input=TICKET, **extra) -> Decision:
    return client.decisions.create(model="gpt-6-luna", input=input, questions=questions, **extra)


def alone(client, question, input=TICKET):
    return create(client, [question], input=input).answers[0]


@pytest.fixture(scope="module")
def together(client) -> Decision:
    return create(client, [PREDICATE, CHOICE, BOOLEAN_CHOICE, SCORE])


# --- answers, one per question type ---------------------------------------------------------
def test_a_predicate_is_a_probability(together):
    answer = together.answers[0]
    assert isinstance(answer, AnswerAnswerResourcePredicate)
    assert answer.name == "refund" and 0 < answer.probability < 1


def test_a_two_choice_answers_its_distribution_and_argmax(together):
    answer = together.answers[1]
    assert isinstance(answer, AnswerAnswerResourceChoice) and answer.name == "queue"
    assert [p.value for p in answer.probabilities] == ["billing", "shipping"]
    probabilities = [p.probability for p in answer.probabilities]
    assert sum(probabilities) == pytest.approx(1)
    best = max(answer.probabilities, key=lambda p: p.probability)
    assert answer.choice == best.value
    assert answer.confidence == pytest.approx((best.probability - 0.5) / 0.5)


def test_a_boolean_choice_answers_booleans(together):
    answer = together.answers[2]
    assert isinstance(answer, AnswerAnswerResourceChoice)
    assert [p.value for p in answer.probabilities] == [True, False]
    assert isinstance(answer.choice, bool)


def test_a_score_is_the_expected_level(together):
    answer = together.answers[3]
    assert isinstance(answer, AnswerAnswerResourceScore) and answer.name == "urgency"
    assert [(p.label, p.value) for p in answer.probabilities] == [
        ("low", 0),
        ("medium", 1),
        ("high", 2),
    ]
    expected = sum(p.value * p.probability for p in answer.probabilities)
    assert answer.score == pytest.approx(expected) and 0 <= answer.confidence <= 1


def test_a_255_choice_question(client):
    question = {
        "type": "choice",
        "instructions": "Which product code fits this ticket?",
        "choices": [{"value": f"code_{n}"} for n in range(255)],
    }
    answer = alone(client, question)
    assert isinstance(answer, AnswerAnswerResourceChoice) and answer.name is None
    assert [p.value for p in answer.probabilities] == [f"code_{n}" for n in range(255)]
    assert sum(p.probability for p in answer.probabilities) == pytest.approx(1)


def test_usage_counts_input_tokens_and_what_the_state_cache_served(client):
    fresh = f"{TICKET} (ticket opened {id(client)})"  # a state no other test sent
    first = create(client, [PREDICATE], input=fresh).usage
    again = create(client, [PREDICATE], input=fresh).usage
    assert first.input_tokens == again.input_tokens > 0
    assert first.output_tokens == 0 and first.total_tokens == first.input_tokens
    assert first.input_tokens_details.cached_tokens == 0
    written = first.input_tokens_details.cache_write_tokens
    assert 0 < written < first.input_tokens  # the input prefix, not the question
    assert again.input_tokens_details.cached_tokens == written
    assert again.input_tokens_details.cache_write_tokens == 0


# --- exactness: a shared prefill, each answer as if asked alone ------------------------------
def test_each_answer_is_bit_identical_to_the_question_asked_alone(client, together):
    for question, answer in zip(
        [PREDICATE, CHOICE, BOOLEAN_CHOICE, SCORE], together.answers, strict=False
    ):
        assert alone(client, question) == answer


def test_a_predicate_is_system_ones_noul_bit_for_bit(adapter, together):
    body = {
        "model": "jev-latest",
        "state": TICKET,
        "questions": {"q": {"type": "noul", "instructions": PREDICATE["instructions"]}},
    }
    system_one = httpx.post(adapter.url + "/v1/systemone", json=body, timeout=120).json()
    assert system_one["answers"]["q"]["noul"] == together.answers[0].probability


def test_a_string_input_equals_the_same_text_as_one_user_message(client, together):
    for content in (TICKET, [{"type": "input_text", "text": TICKET}]):
        as_message = create(
            client, [PREDICATE, CHOICE], input=[{"role": "user", "content": content}]
        )
        assert as_message.answers == together.answers[:2]


def test_messages_with_a_tool_call_and_its_output(client):
    decision = create(client, [PREDICATE, CHOICE], input=TOOL_INPUT)
    predicate, choice = decision.answers
    assert isinstance(predicate, AnswerAnswerResourcePredicate)
    assert isinstance(choice, AnswerAnswerResourceChoice)
    # The tool call and its output are read: another output is another state and answer.
    other = json.loads(json.dumps(TOOL_INPUT))
    other[3]["output"][0]["text"] = '{"status": "lost in transit", "paid": 0}'
    changed = create(client, [PREDICATE], input=other).answers[0]
    assert changed.probability != predicate.probability
    assert decision.usage.input_tokens > create(client, [PREDICATE, CHOICE]).usage.input_tokens


# --- refusals --------------------------------------------------------------------------------
def test_refusals_sit_among_answers_that_are_unchanged(client, together):
    decision = create(client, [PREDICATE, IMAGE_QUESTION, CHOICE, TOO_LONG])
    first, image, choice, too_long = decision.answers
    assert isinstance(image, AnswerAnswerResourceRefusal) and image.name == "photo"
    assert isinstance(too_long, AnswerAnswerResourceRefusal) and too_long.name == "long"
    assert (first, choice) == (together.answers[0], together.answers[1])
    # The refused read nothing: the usage is that of the two answered.
    assert decision.usage.input_tokens == create(client, [PREDICATE, CHOICE]).usage.input_tokens


def test_an_image_in_the_input_refuses_every_question(client):
    image_input = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": TICKET},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            ],
        }
    ]
    decision = create(client, [PREDICATE, SCORE], input=image_input)
    assert [answer.type for answer in decision.answers] == ["refusal", "refusal"]
    assert [answer.name for answer in decision.answers] == ["refund", "urgency"]
    assert decision.usage.input_tokens == 0


# --- errors: OpenAI's shape, a 400 naming the param -------------------------------------------
def test_a_repeated_choice_is_a_400_naming_its_path(client):
    repeated = {**CHOICE, "choices": [*CHOICE["choices"], {"value": "billing"}]}
    with pytest.raises(openai.BadRequestError) as raised:
        create(client, [PREDICATE, SCORE, BOOLEAN_CHOICE, repeated])
    error = raised.value
    assert error.status_code == 400 and error.param == "questions[3].choices[2].value"
    assert (
        error.type == "invalid_request_error" and "questions[3].choices[2].value" in error.message
    )


def test_a_wrongly_typed_choice_value_is_a_400_naming_its_path(client):
    wrong = {**CHOICE, "choices": [{"value": "billing"}, {"value": 3}]}
    with pytest.raises(openai.BadRequestError) as raised:
        create(client, [wrong])
    assert raised.value.param == "questions[0].choices[1].value"
    assert raised.value.code == "validation_error"


def test_unknown_fields_are_refused_at_any_depth(client):
    with pytest.raises(openai.BadRequestError) as raised:
        create(client, [PREDICATE], extra_body={"temperature": 0})
    assert raised.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as raised:
        create(client, [{**PREDICATE, "criteria": {"true": "yes"}}])
    assert raised.value.param == "questions[0].criteria"


def test_a_tool_output_without_its_call_is_a_400(client):
    orphan = [TOOL_INPUT[1], TOOL_INPUT[3]]
    with pytest.raises(openai.BadRequestError) as raised:
        create(client, [PREDICATE], input=orphan)
    assert raised.value.param == "input[1].call_id"


def test_an_input_that_leaves_no_room_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as raised:
        create(client, [PREDICATE], input="ab " * 9000)
    assert raised.value.param == "input" and raised.value.code == "context_length_exceeded"


def test_questions_that_fit_alone_but_not_together_are_a_400_naming_them(client):
    """Each fits beside the input (so none is refused), but the request's budget, 8192 tokens,
    holds the input once and every question: split them over requests."""
    long_question = {**PREDICATE, "instructions": "Is it " + "very " * 2500 + "urgent?"}
    with pytest.raises(openai.BadRequestError) as raised:
        create(client, [{**long_question, "name": f"q{n}"} for n in range(4)])
    assert raised.value.param == "questions" and raised.value.code == "context_length_exceeded"
    assert "limit is 8192" in raised.value.message


def test_more_questions_than_decision_max_decisions_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as raised:
        create(client, [{**PREDICATE, "name": f"q{n}"} for n in range(33)])
    assert raised.value.param == "questions"
    assert "DECISION_MAX_DECISIONS" in raised.value.message


def test_cache_key_and_safety_identifier_are_accepted_and_the_identifier_logged(client, adapter):
    decision = create(
        client,
        [PREDICATE],
        prompt_cache_key="tenant-7",
        prompt_cache_options={"mode": "implicit", "ttl": "30m"},
        safety_identifier="user-4411",
    )
    assert decision.model == SERVED
    assert decision.answers[0] == alone(client, PREDICATE)
    assert '"safety_identifier": "user-4411"' in adapter.log()


# --- the same bodies through SageMaker's InvokeEndpoint -----------------------------------------
SDK_BODIES = {
    "predicate": [PREDICATE],
    "two-choice": [CHOICE],
    "boolean-choice": [BOOLEAN_CHOICE],
    "score": [SCORE],
    "refusal": [PREDICATE, IMAGE_QUESTION],
}


@pytest.mark.parametrize("attributes", [None, "format=decisions-openai"])
@pytest.mark.parametrize("name", list(SDK_BODIES))
def test_invoke_endpoint_answers_the_sdk_body_identically(client, adapter, name, attributes):
    questions = SDK_BODIES[name]
    body = {"model": "gpt-6-luna", "input": TICKET, "questions": questions}
    status, reply, headers = invoke_endpoint(adapter.url, body, custom_attributes=attributes)
    assert status == 200
    assert Decision.model_validate(reply).answers == create(client, questions).answers
    if attributes is not None:
        assert headers["CustomAttributes"] == attributes


def test_invoke_endpoint_answers_a_tool_input_and_an_error_in_openai_shape(client, adapter):
    body = {"model": "gpt-6-luna", "input": TOOL_INPUT, "questions": [PREDICATE]}
    status, reply, _ = invoke_endpoint(adapter.url, body)
    assert status == 200
    assert Decision.model_validate(reply).answers == create(client, [PREDICATE], TOOL_INPUT).answers
    bad = {**body, "questions": [{**CHOICE, "choices": [{"value": "only one"}]}]}
    status, reply, _ = invoke_endpoint(
        adapter.url, bad, custom_attributes="format=decisions-openai"
    )
    assert status == 400 and reply["error"]["param"] == "questions[0].choices"
    assert set(reply["error"]) >= {"message", "type", "param", "code"}
