"""Where a validation error points: the fields the client wrote, never the name pydantic gives
the union member it tried (`decision.state.str`, `stop.str`), and a client's own keys kept."""

from __future__ import annotations

import pytest
from decision_adapter.errors import without_union_labels

from tests.support.fake_service import app_client

OPTIONS = [{"id": "a"}, {"id": "b"}]


@pytest.mark.parametrize(
    "body, fields",
    [
        (
            {"decision": {"id": "d", "state": 5, "question": "q", "options": OPTIONS}},
            {"decision.state"},
        ),
        (
            {"messages": [{"role": "user", "content": 5}], "stop": 5},
            {"messages[0].content", "stop"},
        ),
    ],
)
def test_invocations_errors_name_the_fields_sent(body, fields):
    with app_client() as client:
        reply = client.post("/invocations", json=body)
    assert reply.status_code == 422, reply.text
    assert {detail["field"] for detail in reply.json()["detail"]} == fields


def test_system_one_locations_end_at_the_field_and_keep_a_question_id_spelled_like_a_type():
    body = {"model": "m", "state": "s", "questions": {"str": {"type": "noul", "instructions": 5}}}
    with app_client() as client:
        reply = client.post("/v1/systemone", json=body)
    assert reply.status_code == 422, reply.text
    locations = {tuple(detail["loc"]) for detail in reply.json()["detail"]}
    assert locations == {("body", "questions", "str", "noul", "instructions")}


def test_union_labels_go_and_fields_and_indexes_stay():
    location = ("messages", 0, "content", "list[union[TextPart,ImagePart]]", 1, "TextPart", "text")
    assert without_union_labels(location) == ("messages", 0, "content", 1, "text")
    assert without_union_labels(("criteria", "Billing", "str")) == ("criteria", "Billing")
