"""Schema-driven fuzzing: schemathesis over our own OpenAPI document against the live adapter.

Every route, and /invocations with each body shape. Requirement: no 5xx, no hang, responses as
documented, and every rejection a 4xx that names the field.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from launcher import running_adapter

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
FUZZ_ENV = {
    # Small limits so that valid generated requests stay cheap on the real model.
    "DECISION_N_CTX": "2048",
    "DECISION_MAX_CHAT_TOKENS": "16",
    "DECISION_MAX_DECISIONS": "4",
    "DECISION_MAX_QUEUE": "8",
    "DECISION_MAX_BODY_BYTES": "65536",
}


@pytest.fixture(scope="module")
def fuzz_adapter(tmp_path_factory):
    with running_adapter(tmp_path_factory.mktemp("fuzz"), **FUZZ_ENV) as adapter:
        yield adapter


def test_the_document_describes_every_route(fuzz_adapter):
    document = httpx.get(fuzz_adapter.url + "/openapi.json").json()
    assert document["openapi"].startswith("3.")
    assert set(document["paths"]) == {
        "/ping",
        "/invocations",
        "/execution-parameters",
        "/v1/systemone",
        "/v1/decisions",
        "/v1/chat/completions",
        "/v1/models",
        "/stats",
        "/openapi.json",
    }
    invocation = document["paths"]["/invocations"]["post"]["requestBody"]["content"][
        "application/json"
    ]
    assert set(invocation["examples"]) == {
        "decision",
        "decisions",
        "systemone",
        "decisions-openai",
        "chat",
    }
    for example in invocation["examples"].values():  # the documented examples are answered
        assert (
            httpx.post(
                fuzz_adapter.url + "/invocations", json=example["value"], timeout=60
            ).status_code
            == 200
        )


def _names_the_field(response) -> bool:
    body = response.json()
    error = body.get("error")
    if isinstance(error, dict):  # OpenAI's shape (/v1/decisions): `param` is the path at fault
        param = error.get("param") or ""
        return bool(param) and param.split(".")[0].split("[")[0] in error.get("message", "")
    if "field" in body:
        return (
            bool(body["field"])
            and body["field"].split(".")[0].split("[")[0] in body["error"]
            or body["field"] == "body"
        )
    detail = body.get("detail")
    if isinstance(detail, list):
        return all(item.get("loc") for item in detail)
    return isinstance(detail, dict) and bool(detail.get("message"))


def _check(case) -> None:
    response = case.call(timeout=60)
    assert response.status_code < 500 or response.status_code == 503, response.text
    if response.status_code == 503:
        assert "retry-after" in response.headers
    elif 400 <= response.status_code < 500:
        assert _names_the_field(response), response.text
    case.validate_response(
        response,
        checks=[
            schemathesis.checks.status_code_conformance,
            schemathesis.checks.content_type_conformance,
        ],
    )


# schemathesis's own pytest plugin does not run on pytest 9 yet; drive its strategies directly.
@pytest.mark.parametrize("generation", ["positive", "negative"])
def test_fuzzed_requests_never_get_a_server_error(fuzz_adapter, generation):
    api = schemathesis.openapi.from_url(fuzz_adapter.url + "/openapi.json")
    mode = schemathesis.GenerationMode(generation)
    operations = [result.ok() for result in api.get_all_operations()]
    assert {o.label for o in operations} >= {
        "GET /ping",
        "POST /invocations",
        "POST /v1/systemone",
        "POST /v1/decisions",
        "POST /v1/chat/completions",
        "GET /v1/models",
        "GET /stats",
    }
    for operation in operations:
        if generation == "negative" and operation.method.upper() == "GET":
            continue  # no parameters or body: nothing invalid to generate
        run = settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )(given(case=operation.as_strategy(generation_mode=mode))(_check))
        run()


def test_max_chat_tokens_is_the_default_and_the_cap(fuzz_adapter):
    cap = int(FUZZ_ENV["DECISION_MAX_CHAT_TOKENS"])
    chat = {
        "messages": [{"role": "user", "content": "Count from 1 to 1000: 1, 2, 3,"}],
        "temperature": 0,
        "stop": ["@@@"],
    }
    unset = httpx.post(fuzz_adapter.url + "/v1/chat/completions", json=chat, timeout=60).json()
    assert unset["usage"]["completion_tokens"] == cap
    assert unset["choices"][0]["finish_reason"] == "length"
    for field in ("max_tokens", "max_completion_tokens"):
        over = httpx.post(
            fuzz_adapter.url + "/v1/chat/completions", json={**chat, field: cap + 1}, timeout=60
        )
        assert over.status_code == 422 and over.json()["field"] == field, over.text
        assert "DECISION_MAX_CHAT_TOKENS" in over.json()["error"]
    at_cap = httpx.post(
        fuzz_adapter.url + "/v1/chat/completions", json={**chat, "max_tokens": cap}, timeout=60
    )
    assert at_cap.status_code == 200


def test_the_document_describes_json_lines_streams_and_refused_fields(fuzz_adapter):
    document = httpx.get(fuzz_adapter.url + "/openapi.json").json()
    invocations = document["paths"]["/invocations"]["post"]
    assert "application/jsonlines" in invocations["requestBody"]["content"]
    answered = invocations["responses"]["200"]["content"]
    assert "application/jsonlines" in answered
    # The stream's events are chunks the document describes, not an untyped string.
    chunk = answered["text/event-stream"]["schema"]["contentSchema"]["$ref"].rsplit("/", 1)[1]
    assert document["components"]["schemas"][chunk]["properties"]["object"] == {
        "const": "chat.completion.chunk"
    }
    chat = document["components"]["schemas"]["ChatRequest"]["properties"]
    assert chat["tools"]["type"] == "null" and chat["stream"]["type"] == "boolean"
    message = document["components"]["schemas"]["ChatMessage"]["properties"]
    assert message["tool_calls"]["type"] == "null" and message["name"]["type"] == "null"
    # What it describes is served: a JSON Lines body of the documented example.
    example = invocations["requestBody"]["content"]["application/json"]["examples"]["decision"]
    line = json.dumps(example["value"]).encode() + b"\n"
    response = httpx.post(
        fuzz_adapter.url + "/invocations",
        content=line * 2,
        headers={"Content-Type": "application/jsonlines"},
        timeout=60,
    )
    assert response.headers["content-type"] == "application/jsonlines"
    assert [json.loads(answer)["result"]["id"] for answer in response.content.splitlines()] == [
        "support-route"
    ] * 2
