"""The OpenAI decisions wire format without the model: how `input` becomes a state, how choices
are written, the routing of its bodies on /invocations and its error shape (the HTTP layer over
the fake service)."""

from __future__ import annotations

import pytest
from decision_adapter.formats import openai_decisions
from decision_adapter.scoring.prompts import state_text

PREDICATE = {"type": "predicate", "instructions": "Is it late?"}
BODY = {"model": "m", "input": "The parcel is late.", "questions": [PREDICATE]}


def parsed(**changes):
    return openai_decisions.FORMAT.parse({**BODY, **changes})


@pytest.mark.parametrize(
    "content",
    ["The parcel is late.", [{"type": "input_text", "text": "The parcel is late."}]],
)
def test_one_user_message_of_text_is_the_string_state(content):
    message = parsed(input=[{"role": "user", "content": content}])
    assert openai_decisions.input_state(message.input) == "The parcel is late."


def test_items_render_as_system_ones_structured_state_without_bookkeeping():
    request = parsed(
        input=[
            {"role": "user", "content": "Where is order 7?", "type": "message"},
            {
                "type": "function_call",
                "id": "fc_1",
                "status": "completed",
                "call_id": "c1",
                "name": "track",
                "arguments": '{"order": 7}',
            },
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_text", "text": "in transit"}],
            },
            {
                "role": "assistant",
                "phase": "final_answer",
                "content": [{"type": "output_text", "text": "It is on its way."}],
            },
        ]
    )
    state = openai_decisions.input_state(request.input)
    assert state == [
        {"role": "user", "content": "Where is order 7?"},
        {"type": "function_call", "call_id": "c1", "name": "track", "arguments": '{"order": 7}'},
        {"type": "function_call_output", "call_id": "c1", "output": "in transit"},
        {"role": "assistant", "content": "It is on its way."},
    ]
    assert state_text(state).startswith('[\n  {\n    "role": "user"')  # System One's renderer


def test_json_parts_stay_structured_beside_text():
    request = parsed(
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Order:"},
                    {"type": "input_json", "data": {"id": 7, "paid": True}},
                ],
            },
            {"role": "system", "content": "Be brief."},
        ]
    )
    assert openai_decisions.input_state(request.input)[0]["content"] == [
        "Order:",
        {"id": 7, "paid": True},
    ]


def test_choices_are_typed_and_written_as_json_only_where_they_would_read_alike():
    def names(*values):
        question = {
            "type": "choice",
            "instructions": "?",
            "choices": [{"value": v} for v in values],
        }
        return openai_decisions.choice_names(parsed(questions=[question]).questions[0].choices)

    assert names("yes", "no") == ["yes", "no"]
    assert names(True, False) == ["true", "false"]
    assert names("true", True) == ['"true"', "true"]


@pytest.mark.parametrize(
    ("location", "param"),
    [
        (("questions", 3, "choice", "choices", 1, "value", "str"), "questions[3].choices[1].value"),
        (("input", "list[tagged-union[...]]", 2, "function_call", "call_id"), "input[2].call_id"),
        (
            ("input", 0, "assistant", "content", "list[...]", 0, "refusal", "refusal"),
            "input[0].content[0].refusal",
        ),
    ],
)
def test_param_paths_drop_union_tags_and_labels(location, param):
    assert openai_decisions.param_path(location) == param


# --- HTTP, over the fake service ----------------------------------------------------------------
def test_invocations_routes_the_shape_and_the_forced_format(in_process):
    by_shape = in_process.post("/invocations", json=BODY)
    assert by_shape.status_code == 200
    assert by_shape.json()["answers"][0]["type"] == "predicate"
    forced = in_process.post(
        "/invocations",
        json={"model": "m", "questions": []},
        headers={"X-Amzn-SageMaker-Custom-Attributes": "format=decisions-openai"},
    )
    assert forced.status_code == 400
    assert forced.json()["error"]["param"] in {"input", "questions"}
    # A System One body (questions as an object) is still System One's.
    system_one = {"model": "jev-latest", "state": "s", "questions": {"q": {"type": "noul"}}}
    assert "answers" in in_process.post("/invocations", json=system_one).json()


def test_errors_are_openais_shape_and_a_400(in_process):
    reply = in_process.post("/v1/decisions", json={**BODY, "questions": []})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == "questions" and error["type"] == "invalid_request_error"
    malformed = in_process.post(
        "/v1/decisions", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert malformed.status_code == 400 and malformed.json()["error"]["param"] == "body"
    wrong_method = in_process.get("/v1/decisions")
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["param"] == "method"


def test_an_image_in_the_input_asks_the_service_nothing(in_process):
    image = [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]
    reply = in_process.post("/v1/decisions", json={**BODY, "input": image}).json()
    assert reply["answers"] == [{"type": "refusal", "name": None}]
    assert reply["usage"]["input_tokens"] == 0


def test_with_a_key_a_missing_one_is_a_401_in_openais_shape(secured_in_process):
    from tests.adapter.conftest import API_KEY

    refused = secured_in_process.post("/v1/decisions", json=BODY)
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert refused.json()["error"]["code"] == "authentication_error"
    keyed = secured_in_process.post(
        "/v1/decisions", json=BODY, headers={"Authorization": f"Bearer {API_KEY}"}
    )
    assert keyed.status_code == 200


def test_a_busy_model_is_a_retryable_503_saying_when_in_the_body_too():
    from decision_adapter.errors import Busy

    from tests.support.fake_service import FakeService, app_client

    with app_client(lambda _: FakeService(fails_with=Busy(retry_after_s=4))) as client:
        busy = client.post("/invocations", json=BODY)
    assert busy.status_code == 503 and busy.headers["retry-after"] == "4"
    error = busy.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "overloaded"
    assert error["retry_after_s"] == 4


def test_a_json_lines_body_may_hold_openai_decisions_lines(in_process):
    import json

    lines = [BODY, {**BODY, "questions": []}]
    reply = in_process.post(
        "/invocations",
        content="\n".join(json.dumps(line) for line in lines).encode(),
        headers={"Content-Type": "application/jsonlines"},
    )
    answered, refused = (json.loads(line) for line in reply.text.splitlines())
    assert answered["answers"][0]["type"] == "predicate"
    assert refused["status"] == 400 and refused["error"]["param"] == "questions"
    assert refused["line"] == 2


@pytest.mark.parametrize("instructions", ["", "   ", "\u200b", []])
def test_blank_or_empty_instructions_are_refused_naming_the_field(in_process, instructions):
    """Not answered as System One's default question: a 400 naming the question's field."""
    question = {**BODY["questions"][0], "instructions": instructions}
    reply = in_process.post("/v1/decisions", json={**BODY, "questions": [question]})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "questions[0].instructions"


@pytest.mark.parametrize(
    "changes, param",
    [
        ({"name": None}, "questions[1].name"),  # the SDK's type is a string
        ({"name": "late"}, "questions[1].name"),  # repeats the first question's name
        ({"name": "lat\u0065\u0301"}, None),  # another name: NFC "laté" is not "late"
    ],
)
def test_question_names_are_strings_and_unique(in_process, changes, param):
    questions = [{**PREDICATE, "name": "late"}, {**PREDICATE, **changes}]
    reply = in_process.post("/v1/decisions", json={**BODY, "questions": questions})
    if param is None:
        assert reply.status_code == 200, reply.text
        return
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


def test_a_safety_identifier_past_the_apis_64_characters_is_refused(in_process):
    fits = in_process.post("/v1/decisions", json={**BODY, "safety_identifier": "u" * 64})
    assert fits.status_code == 200, fits.text
    reply = in_process.post("/v1/decisions", json={**BODY, "safety_identifier": "u" * 65})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "safety_identifier"
