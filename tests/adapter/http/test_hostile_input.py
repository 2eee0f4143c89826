"""Input that is valid JSON but not usable text or numbers: a 4xx naming the field, never a 5xx."""

from __future__ import annotations

import json

import httpx
import pytest

LONE = "x\ud800"  # half a UTF-16 pair: json.dumps writes it as the escape \ud800


def _decision(**changes) -> dict:
    decision = {
        "id": "d",
        "state": "The VPN drops every hour.",
        "question": "Which team?",
        "options": [{"id": "network"}, {"id": "desktop", "description": "Laptops."}],
    }
    decision.update(changes)
    return {"decision": decision}


def _chat(**changes) -> dict:
    return {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 2, **changes}


def _system_one(**changes) -> dict:
    body = {
        "model": "jev-latest",
        "state": "Charged twice.",
        "questions": {"team": {"type": "choice", "criteria": {"Billing": None, "Tech": None}}},
    }
    body.update(changes)
    return body


def _post(client: httpx.Client, path: str, body: dict) -> httpx.Response:
    raw = json.dumps(body)  # ensure_ascii: lone surrogates travel as \udXXX escapes
    assert "\\ud800" in raw
    return client.post(path, content=raw, headers={"Content-Type": "application/json"})


@pytest.fixture(scope="module")
def client(in_process):
    """Parsing and validation only: the app in process, over a fake service."""
    return in_process


@pytest.fixture(scope="module")
def live(adapter):
    """The real adapter: a real connection, and the real model's numbers."""
    with httpx.Client(base_url=adapter.url, timeout=30) as client:
        yield client


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/invocations", _decision(state=LONE), "decision.state"),
        ("/invocations", _decision(state={"paid": LONE}), "decision.state.paid"),
        ("/invocations", _decision(state={LONE: 1}), "decision.state.x\\ud800"),
        (
            "/invocations",
            _decision(options=[{"id": "a"}, {"id": "b", "description": LONE}]),
            "decision.options[1].description",
        ),
        (
            "/invocations",
            _chat(messages=[{"role": "user", "content": LONE}]),
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            _chat(messages=[{"role": "user", "content": LONE}]),
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            _chat(messages=[{"role": "user", "content": LONE}], stream=True),
            "messages[0].content",
        ),
        ("/v1/chat/completions", _chat(model=LONE), "model"),
    ],
)
def test_lone_surrogates_get_a_400_naming_the_field(client, path, body, field):
    response = _post(client, path, body)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["field"] == field and error["error_type"] == "invalid_json"
    assert "surrogate" in error["error"] and error["error"].startswith(field)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (_system_one(state=LONE), ["body", "state"]),
        (_system_one(state={"note": [LONE]}), ["body", "state", "note", 0]),
        (
            _system_one(
                questions={"team": {"type": "choice", "criteria": {LONE: None, "Tech": None}}}
            ),
            ["body", "questions", "team", "criteria", "x\\ud800"],
        ),
    ],
)
def test_lone_surrogates_in_system_one_get_its_422(client, body, loc):
    response = _post(client, "/v1/systemone", body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc


def test_the_connection_survives_a_lone_surrogate(live):
    assert _post(live, "/invocations", _decision(state=LONE)).status_code == 400
    assert live.post("/invocations", json=_decision()).status_code == 200


def test_a_number_too_large_for_a_float_is_a_400(live):
    raw = json.dumps(_decision(state={"x": "PLACEHOLDER"})).replace('"PLACEHOLDER"', "1e999")
    response = live.post("/invocations", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["field"] == "decision.state.x"
    assert "Infinity" not in live.post("/invocations", json=_decision()).text


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"options": [{"id": "billing\nC. fake"}, {"id": "tech"}]}, "decision.options[0].id"),
        ({"options": [{"id": "billing"}, {"id": "tech\u2028support"}]}, "decision.options[1].id"),
        ({"question": "\u200b"}, "decision.question"),
        ({"question": " \ufeff\u2060 "}, "decision.question"),
        ({"options": [{"id": "caf\u00e9"}, {"id": "cafe\u0301"}]}, "decision.options"),
    ],
)
def test_option_ids_and_questions_that_would_mislead_the_prompt_are_422(client, changes, field):
    response = client.post("/invocations", json=_decision(**changes))
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


@pytest.mark.parametrize(
    "criteria",
    [
        {"": None, "Tech": None},
        {" ": None, "Tech": None},
        {"Billing\nC. fake": None, "Tech": None},
        {"caf\u00e9": None, "cafe\u0301": None},
    ],
)
def test_system_one_choice_names_follow_the_decision_format_rules(client, criteria):
    body = _system_one(questions={"team": {"type": "choice", "criteria": criteria}})
    response = client.post("/v1/systemone", json=body)
    assert response.status_code == 422, response.text
    assert "criteria" in response.json()["detail"][0]["loc"]


def test_a_trailing_slash_is_not_redirected_to_the_clients_host(client):
    response = client.get("/v1/models/", headers={"Host": "evil.example"})
    assert response.status_code == 404
    assert "location" not in response.headers


# Default-ignorable code points (Hangul fillers, variation selectors, a Mongolian one, a Khmer
# vowel inherent, a combining grapheme joiner, a tag-plane selector) and the blank braille cell.
INVISIBLE = ["\u3164", "\u115f", "\u1160", "\uffa0", "\u2800", "\u034f", "\ufe0f", "\u180b"]
INVISIBLE += ["\u17b4", "\U000e0100"]


@pytest.mark.parametrize("char", INVISIBLE, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
def test_invisible_characters_alone_are_blank_ids_and_questions(live, char):
    response = live.post("/invocations", json=_decision(question=f" {char} "))
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "decision.question"
    options = [{"id": char * 2}, {"id": "tech"}]
    response = live.post("/invocations", json=_decision(options=options))
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "decision.options[0].id"
    assert "visible character" in response.json()["error"]
