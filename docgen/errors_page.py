"""docs/api.md's error tables: every `error_type` the adapter answers with (its status, whether
a retry may succeed, and when), and what an error body looks like in each wire format, written
by the formats' own `error_body`."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from decision_adapter.formats import decision, openai_decisions, systemone
from decision_adapter.formats.base import WireFormat
from decision_adapter.http.body import MAX_BODY_VALUES

from .tables import table

SOURCE = "container/decision_adapter/formats/ (error_body) and docgen/errors_page.py"


class ErrorKind(NamedTuple):
    error_type: str
    status: str
    retryable: bool
    when: str


# The adapter's error types, in the order a request meets them. tests/docs/test_generated_docs.py
# holds this list to the error types the adapter's source names, both ways.
ERRORS = (
    ErrorKind(
        "connection_limit",
        "503",
        True,
        "the connection cap is reached (`DECISION_MAX_CONNECTIONS`); the connection is closed",
    ),
    ErrorKind(
        "header_timeout",
        "408",
        False,
        "a request head did not arrive within `DECISION_HEADER_TIMEOUT_S`",
    ),
    ErrorKind(
        "invalid_request",
        "400, 422",
        False,
        "a request head over 16 KiB (400); a request over a configured count, such as "
        "`DECISION_MAX_DECISIONS` or `max_tokens` over `DECISION_MAX_CHAT_TOKENS` (422)",
    ),
    ErrorKind("not_found", "404", False, "no such route; names `path` and lists the routes"),
    ErrorKind(
        "method_not_allowed",
        "405",
        False,
        "the route takes another method; names `method`, with `Allow`",
    ),
    ErrorKind(
        "authentication_error",
        "401",
        False,
        "a public `/v1` route without the bearer key `DECISION_API_KEY` names",
    ),
    ErrorKind(
        "invalid_custom_attributes",
        "400",
        False,
        "`X-Amzn-SageMaker-Custom-Attributes` names an unknown format, or two",
    ),
    ErrorKind(
        "unsupported_media_type",
        "415",
        False,
        "a Content-Type other than JSON (or JSON Lines on `/invocations`), a compressed body, or "
        "chat as JSON Lines",
    ),
    ErrorKind(
        "body_too_large",
        "413",
        False,
        "a body over `DECISION_MAX_BODY_BYTES` (a JSON Lines body: "
        f"`DECISION_MAX_JSONLINES_BYTES`), or one of more than {MAX_BODY_VALUES:,} JSON values "
        "(a JSON Lines line: its own answer)",
    ),
    ErrorKind(
        "too_many_lines",
        "413",
        False,
        "a JSON Lines body over `DECISION_MAX_JSONLINES_LINES`, or one whose line count proves it "
        "over `DECISION_JSONLINES_TIMEOUT_S`",
    ),
    ErrorKind(
        "body_timeout", "408", False, "a body did not arrive within `DECISION_BODY_TIMEOUT_S`"
    ),
    ErrorKind("client_disconnected", "400", False, "the client left before sending the whole body"),
    ErrorKind(
        "invalid_json",
        "400",
        False,
        "malformed JSON, NaN or Infinity, a duplicate key, a lone surrogate, a body that is not "
        "UTF-8 or nests too deep; names where",
    ),
    ErrorKind(
        "validation_error",
        "422",
        False,
        "the body breaks its format's schema (also a conversation the chat template refuses); "
        "names the field",
    ),
    ErrorKind(
        "model_not_found", "404", False, "System One's `model` names a model not served here"
    ),
    ErrorKind(
        "token_limit_exceeded",
        "413",
        False,
        "the prompt or the request needs more tokens than `DECISION_MAX_REQUEST_TOKENS` (and the "
        "context) allow",
    ),
    ErrorKind("loading", "503", True, "the model is not loaded yet"),
    ErrorKind(
        "overloaded",
        "503",
        True,
        "the model and its queue are full (`DECISION_MAX_QUEUE`, `DECISION_ADMISSION_WAIT_S`), or "
        "a decision's model work ran past `DECISION_SCORING_DEADLINE_S`, or was stopped at a "
        "running chat stream's deadline (`DECISION_CHAT_DEADLINE_S`, with "
        "`DECISION_MAX_CHAT_STREAMS` above 1)",
    ),
    ErrorKind(
        "jsonlines_timeout",
        "503",
        True,
        "a JSON Lines body reached `DECISION_JSONLINES_TIMEOUT_S` midway; the whole body fails",
    ),
    ErrorKind("shutting_down", "503", True, "the server is draining after SIGTERM"),
    ErrorKind("engine_error", "500", False, "llama.cpp refused an operation"),
)
# The formats whose error body differs, each with the route that answers in it.
FORMATS = (
    ("the adapter's own: `decision`, `decisions`, chat, `/stats`", decision.FORMAT),
    ("System One (`/v1/systemone`)", systemone.FORMAT),
    ("OpenAI Decisions (`/v1/decisions`)", openai_decisions.FORMAT),
)


def _body(wire_format: WireFormat, **error: Any) -> str:
    status, body = wire_format.error_body(**error)
    return f"{status} `{json.dumps(body, ensure_ascii=False)}`"


def render() -> str:
    kinds = table(
        ("`error_type`", "Status", "Retryable", "When"),
        ((f"`{e.error_type}`", e.status, "yes" if e.retryable else "no", e.when) for e in ERRORS),
    )
    invalid = dict(
        status=422,
        message="state: must not be blank",
        error_type="validation_error",
        field="state",
    )
    busy = dict(
        status=503,
        message="the model is busy with other requests; retry shortly",
        error_type="overloaded",
        retryable=True,
        retry_after_s=1,
    )
    bodies = table(
        ("Format", "A field at fault", "Retryable"),
        ((name, _body(fmt, **invalid), _body(fmt, **busy)) for name, fmt in FORMATS),
    )
    return f"{kinds}\n\nThe same two errors in each format's body:\n\n{bodies}"
