"""The HTTP layer in process, over a fake service: routing, auth, error bodies per format,
limits, /ping and OpenAPI. The model's own behaviour is tested over the real GGUF elsewhere."""

from __future__ import annotations

import json
import logging
import re
import threading

import pytest
from decision_adapter.errors import (
    Busy,
    ModelFileError,
    TooManyQuestions,
    over_token_budget,
    too_many_tokens_requested,
)
from decision_adapter.http.app import ROUTES, create_app
from starlette.testclient import TestClient

from tests.adapter.conftest import API_KEY as KEY
from tests.support.bodies import decision
from tests.support.fake_service import (
    IDENTITY,
    REPLY,
    FakeService,
    app_client,
    settings,
    wait_for_ping,
)

ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"
DECISION = decision()
SYSTEM_ONE = {
    "model": "jev-latest",
    "state": "s",
    "questions": {
        "ok": {"type": "noul"},
        "team": {"type": "choice", "criteria": {"x": "one", "y": "two"}},
    },
}
CHAT = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 4}


@pytest.fixture(scope="module")
def client(in_process):
    return in_process


@pytest.fixture(scope="module")
def secured(secured_in_process):
    return secured_in_process


# --- routing ---------------------------------------------------------------------------
def test_invocations_picks_the_format_by_the_body_shape(client):
    decided = client.post("/invocations", json=DECISION).json()
    assert decided["result"]["id"] == "d" and decided["result"]["option_ids"] == ["a", "b"]
    answered = client.post("/invocations", json=SYSTEM_ONE).json()
    assert set(answered["answers"]) == {"ok", "team"} and answered["model"] == IDENTITY.name
    chatted = client.post("/invocations", json=CHAT).json()
    assert chatted["object"] == "chat.completion"
    assert chatted["choices"][0]["message"]["content"] == "".join(REPLY)


@pytest.mark.parametrize(
    "method,path,allow",
    [
        ("GET", "/invocations", {"POST"}),
        ("PUT", "/ping", {"GET", "HEAD"}),  # Starlette answers HEAD wherever GET is routed
        ("GET", "/v1/chat/completions", {"POST"}),
    ],
)
def test_a_wrong_method_is_a_json_405_naming_the_allowed_ones(client, method, path, allow):
    response = client.request(method, path)
    assert response.status_code == 405
    allowed = response.headers["allow"]
    assert set(allowed.split(", ")) == allow
    body = response.json()
    assert body["field"] == "method" and body["error_type"] == "method_not_allowed"
    assert body["error"] == f"method: {method} is not allowed on {path}; use {allowed}"


@pytest.mark.parametrize(
    "sent,kept",
    [("trace-42/a:b=c+d_e.f", True), ("has space", False), ("a;b", False), ("x" * 129, False)],
)
def test_a_callers_request_id_is_kept_when_it_is_a_short_token(client, caplog, sent, kept):
    with caplog.at_level(logging.INFO, logger="decision_adapter"):
        response = client.post("/invocations", json=DECISION, headers={"X-Request-Id": sent})
    returned = response.headers["x-request-id"]
    assert returned == sent if kept else re.fullmatch("[0-9a-f]{32}", returned)
    (logged,) = [r.fields for r in caplog.records if r.getMessage() == "request"]
    assert logged["request_id"] == returned


def test_without_a_callers_request_id_each_request_gets_a_new_one(client):
    ids = {client.get("/ping").headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3 and all(re.fullmatch("[0-9a-f]{32}", i) for i in ids)


def test_an_unknown_path_is_a_json_404_listing_the_routes(client):
    response = client.get("/invocation")
    assert response.status_code == 404
    body = response.json()
    assert body["field"] == "path" and body["error_type"] == "not_found"
    assert body["error"].startswith("path: no route /invocation; the routes are ")
    assert all(route.path in body["error"] for route in ROUTES)
    long = "/" + "a" * 5000  # quoted in part: an error body stays small
    error = client.get(long).json()["error"]
    assert error.startswith(f"path: no route {long[:200]}... (5001 characters); the routes ")


def test_a_wrong_method_on_system_one_is_in_its_shape(client):
    response = client.get("/v1/systemone")
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert response.json() == {
        "detail": {
            "error_type": "method_not_allowed",
            "message": "method: GET is not allowed on /v1/systemone; use POST",
        }
    }


def test_a_body_of_no_known_shape_is_a_422_naming_the_shapes(client):
    for body in ({"something": "else"}, [1, 2, 3]):
        response = client.post("/invocations", json=body)
        assert response.status_code == 422 and response.json()["field"] == "body"
    assert "`messages` (chat)" in response.json()["error"]


def test_custom_attributes_force_the_format_and_are_echoed(client):
    forced = client.post("/invocations", json=SYSTEM_ONE, headers={ATTRIBUTES: "format=decision"})
    assert forced.status_code == 422 and forced.json()["field"] == "model"  # decision's shape
    assert forced.headers[ATTRIBUTES] == "format=decision"
    malformed = client.post(
        "/invocations",
        content=b"{",
        headers={ATTRIBUTES: "format=systemone", "Content-Type": "application/json"},
    )
    assert malformed.status_code == 422 and malformed.json()["detail"][0]["loc"] == ["body"]
    unknown = client.post("/invocations", json=DECISION, headers={ATTRIBUTES: "format=xml"})
    assert unknown.status_code == 400
    assert unknown.json()["error_type"] == "invalid_custom_attributes"


def test_the_service_gets_the_questions_in_request_order():
    service = FakeService()
    with app_client(lambda _: service) as client:
        client.post("/v1/systemone", json=SYSTEM_ONE)
    (questions,) = service.scored
    assert [q.question.option_ids for q in questions] == [["true", "false"], ["x", "y"]]
    assert {q.state for q in questions} == {"s"} and service.closed


def test_a_streamed_chat_is_server_sent_events_ending_with_the_result(client):
    with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    texts = [c["choices"][0]["delta"].get("content") for c in chunks]
    assert texts == ["", *REPLY, None]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}


# --- auth ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "method,path,body",
    [
        ("POST", "/v1/systemone", SYSTEM_ONE),
        ("GET", "/v1/models", None),
        ("POST", "/v1/chat/completions", CHAT),
        ("GET", "/stats", None),
    ],
)
def test_with_a_key_the_public_routes_need_it(secured, method, path, body):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        refused = secured.request(method, path, json=body, headers=headers)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    shape = refused.json()
    if path in ("/v1/systemone", "/v1/models"):
        assert shape["detail"]["error_type"] == "authentication_error"
    else:
        assert shape["field"] == "Authorization"
    allowed = secured.request(method, path, json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert allowed.status_code == 200


def test_with_a_key_the_sagemaker_routes_stay_open(secured):
    assert secured.get("/ping").status_code == 200
    assert secured.post("/invocations", json=DECISION).status_code == 200


def test_without_a_key_an_authorization_header_is_ignored(client):
    response = client.post(
        "/v1/systemone", json=SYSTEM_ONE, headers={"Authorization": "Bearer anything"}
    )
    assert response.status_code == 200


# --- errors in each format's shape -----------------------------------------------------
@pytest.mark.parametrize(
    "error,path,body,status,field",
    [
        (TooManyQuestions(40, 32), "/invocations", DECISION, 422, "decision"),
        (over_token_budget("questions", 9000, 8192), "/invocations", DECISION, 413, "decision"),
        (over_token_budget("prompt", None, 8192), "/v1/chat/completions", CHAT, 413, "messages"),
        (too_many_tokens_requested(4, 2), "/v1/chat/completions", CHAT, 422, "max_tokens"),
        (
            too_many_tokens_requested(4, 2),
            "/v1/chat/completions",
            {**CHAT, "max_completion_tokens": 4},
            422,
            "max_completion_tokens",
        ),
    ],
)
def test_limits_name_the_field_of_the_format(error, path, body, status, field):
    with app_client(lambda _: FakeService(fails_with=error)) as client:
        response = client.post(path, json=body)
    assert response.status_code == status
    payload = response.json()
    assert payload["field"] == field and payload["error"].startswith(f"{field}: ")


def test_limits_in_system_one_are_its_shapes():
    with app_client(lambda _: FakeService(fails_with=TooManyQuestions(40, 32))) as client:
        too_many = client.post("/v1/systemone", json=SYSTEM_ONE)
    assert too_many.status_code == 422
    assert too_many.json()["detail"][0]["loc"] == ["body", "questions"]
    assert "40 questions, at most 32" in too_many.json()["detail"][0]["msg"]
    over = over_token_budget("questions", 9000, 8192)
    with app_client(lambda _: FakeService(fails_with=over)) as client:
        over_budget = client.post("/v1/systemone", json=SYSTEM_ONE)
    assert over_budget.status_code == 413
    assert over_budget.json()["detail"]["error_type"] == "token_limit_exceeded"


def test_a_busy_model_is_a_503_with_retry_after_in_each_format():
    with app_client(lambda _: FakeService(fails_with=Busy(retry_after_s=3))) as client:
        adapter = client.post("/invocations", json=DECISION)
        system_one = client.post("/v1/systemone", json=SYSTEM_ONE)
        chat = client.post("/v1/chat/completions", json=CHAT)
    for response in (adapter, system_one, chat):
        assert response.status_code == 503 and response.headers["retry-after"] == "3"
    assert adapter.json()["retryable"] is True and chat.json()["error_type"] == "overloaded"
    assert system_one.json()["detail"]["error_type"] == "overloaded"
    # The header's value in each body too: SageMaker's InvokeEndpoint passes bodies, not headers.
    assert adapter.json()["retry_after_s"] == chat.json()["retry_after_s"] == 3
    assert system_one.json()["detail"]["retry_after_s"] == 3


def test_an_unknown_model_is_a_404_naming_the_served_ones(client):
    response = client.post("/v1/systemone", json={**SYSTEM_ONE, "model": "gpt-9"})
    assert response.status_code == 404
    assert IDENTITY.name in response.json()["detail"]["message"]


@pytest.mark.parametrize(
    "path,body,field",
    [
        ("/v1/chat/completions", {"messages": []}, "messages"),
        ("/v1/chat/completions", {**CHAT, "temperature": 9}, "temperature"),
        (
            "/invocations",
            {"decision": {**DECISION["decision"], "question": 42}},
            "decision.question",
        ),
    ],
)
def test_validation_errors_name_the_field(client, path, body, field):
    response = client.post(path, json=body)
    assert response.status_code == 422 and response.json()["field"] == field
    assert response.json()["error_type"] == "validation_error"


def test_system_one_validation_errors_are_a_detail_list(client):
    response = client.post("/v1/systemone", json={**SYSTEM_ONE, "questions": {}})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "questions"]


# --- limits on the body ----------------------------------------------------------------
def test_a_body_over_the_limit_is_a_413_declared_or_chunked():
    with app_client(max_body_bytes=1024) as client:
        declared = client.post("/invocations", content=b"{" + b" " * 2000 + b"}")
        chunked = client.post("/invocations", content=iter([b"{", b" " * 2000, b"}"]))
    for response in (declared, chunked):
        assert response.status_code == 413 and response.json()["field"] == "body"
        assert response.json()["error_type"] == "body_too_large"


def test_a_body_of_another_media_type_is_a_415(client):
    response = client.post(
        "/invocations", content=b"decision=1", headers={"Content-Type": "text/plain"}
    )
    assert response.status_code == 415 and response.json()["field"] == "Content-Type"


# --- /ping and loading -----------------------------------------------------------------
def test_ping_is_503_loading_until_the_service_is_built_then_names_the_model():
    loaded = threading.Event()

    def slow_factory(_settings):
        loaded.wait(10)
        return FakeService()

    with app_client(slow_factory, ready=False) as client:
        loading = client.get("/ping")
        busy = client.get("/v1/models")
        early = client.post("/invocations", json=DECISION)
        loaded.set()
        wait_for_ping(client)
        ready = client.get("/ping")
    assert loading.status_code == 503 and loading.json() == {"status": "loading"}
    assert busy.status_code == 503
    assert early.status_code == 503 and early.headers["retry-after"] == "5"
    assert early.json()["error"] == "the model is still loading; retry shortly"
    assert early.json()["retryable"] is True and early.json()["error_type"] == "loading"
    assert ready.json() == {"status": "ok", "model": IDENTITY.name}


def test_a_service_that_cannot_load_reports_one_line():
    reasons: list[str] = []

    def broken(_settings):
        raise ModelFileError("model directory /x is\nnot a directory")

    app = create_app(settings(), service_factory=broken, on_startup_failure=reasons.append)
    with TestClient(app) as client:
        assert client.get("/ping").status_code == 503
    assert reasons == ["model directory /x is not a directory"]


def test_models_lists_the_model_and_its_alias(client):
    listed = client.get("/v1/models").json()
    names = [m["name"] for m in listed["models"]]
    assert names == [IDENTITY.name, "jev-latest"]
    # OpenAI's shape beside it, naming the same models (llama-server serves both too).
    assert listed["object"] == "list"
    assert [m["id"] for m in listed["data"]] == names
    assert {m["object"] for m in listed["data"]} == {"model"}


# --- OpenAPI ---------------------------------------------------------------------------
def test_the_openapi_document_describes_every_route(client):
    document = client.get("/openapi.json").json()
    assert set(document["paths"]) == {route.path for route in ROUTES}
    for path, method in (("/invocations", "post"), ("/v1/systemone", "post")):
        assert "requestBody" in document["paths"][path][method]
    assert {"DecisionRequest", "SystemOneRequest", "ChatRequest"} <= set(
        document["components"]["schemas"]
    )


def test_the_openapi_document_states_which_names_must_be_unique(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    unique = {
        ("Decision", "options"),
        ("ChoiceQuestion", "criteria"),
        ("ChoiceQuestionParam", "choices"),
        ("ScoreQuestionParam", "levels"),
    }
    for schema, field in unique:
        assert "unique" in schemas[schema]["properties"][field]["description"], (schema, field)
    assert "Unique" in schemas["Predicate"]["properties"]["name"]["description"]
