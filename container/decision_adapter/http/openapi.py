"""The OpenAPI 3 document, generated from the pydantic models that validate the requests."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic.json_schema import models_json_schema

from .. import __version__
from ..formats.decision import DecisionRequest
from ..formats.openai_chat import ChatRequest
from ..formats.openai_decisions import DecisionsRequest
from ..formats.systemone import SystemOneRequest

DECISION_EXAMPLE = {
    "decision": {
        "id": "support-route",
        "state": "The customer cannot receive a password reset email.",
        "question": "Which queue should handle this request?",
        "options": [
            {"id": "account_access", "description": "Account access support."},
            {"id": "billing", "description": "Billing support."},
        ],
    }
}
DECISIONS_EXAMPLE = {
    "decisions": [
        {
            "id": "route",
            "state": "Refund not received after 10 days.",
            "question": "Which queue?",
            "options": [{"id": "billing"}, {"id": "shipping"}],
        },
        {
            "id": "urgency",
            "state": "Refund not received after 10 days.",
            "question": "How urgent?",
            "options": [{"id": "low"}, {"id": "medium"}, {"id": "high"}],
        },
    ]
}
SYSTEM_ONE_EXAMPLE = {
    "model": "jev-latest",
    "state": "Refund not received after 10 days.",
    "questions": {
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
        "queue": {
            "type": "choice",
            "criteria": {"billing": "Payments.", "shipping": "Deliveries."},
        },
        "urgency": {"type": "score", "criteria": ["not urgent", "urgent", "critical"]},
    },
}
OPENAI_DECISIONS_EXAMPLE = {
    "model": "gemma",
    "input": [{"role": "user", "content": "Refund not received after 10 days."}],
    "questions": [
        {
            "type": "predicate",
            "name": "refund",
            "instructions": "Does the customer ask for a refund?",
        },
        {
            "type": "choice",
            "name": "queue",
            "instructions": "Which queue?",
            "choices": [{"value": "billing"}, {"value": "shipping"}],
        },
        {
            "type": "score",
            "name": "urgency",
            "instructions": "How urgent?",
            "levels": [{"label": "low"}, {"label": "high"}],
        },
    ],
}
CHAT_EXAMPLE = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 16}

ANY_OBJECT = {"type": "object"}
JSON_LINES = "application/jsonlines"
JSON_LINES_BODY = {
    "type": "string",
    "contentMediaType": JSON_LINES,
    "description": "JSON Lines (batch transform): one DecisionRequest or SystemOneRequest body "
    "per line, UTF-8, \\n or \\r\\n between lines; a chat line is refused (415)",
}
JSON_LINES_ANSWERS = {
    "type": "string",
    "contentMediaType": JSON_LINES,
    "description": "one line per input line, in order: that body's answer, or its error body "
    "plus `line` and `status`",
}
# A chunk of a streamed chat completion, as each event's `data:` carries it.
CHUNK = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "chat.completion.chunk"},
        "created": {"type": "integer"},
        "model": {"type": "string"},
        "system_fingerprint": {
            "type": "string",
            "description": "the GGUF's hash and how chat streams meet the model: `alone`, "
            "`turns` (the same bits as alone) or `shared` (a token's last bits follow the "
            "streams beside it)",
        },
        "choices": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "index": {"type": "integer"},
                    "delta": {
                        "type": "object",
                        "properties": {
                            "role": {"const": "assistant"},
                            "content": {"type": "string"},
                        },
                    },
                    "finish_reason": {"enum": ["stop", "length", None]},
                    "logprobs": {"type": ["object", "null"]},
                },
            },
        },
        "usage": {
            "type": "object",
            "properties": {
                "prompt_tokens": {"type": "integer"},
                "completion_tokens": {"type": "integer"},
                "total_tokens": {"type": "integer"},
            },
        },
    },
}
EVENT_STREAM = {
    "type": "string",
    "contentMediaType": "text/event-stream",
    "contentSchema": {"$ref": "#/components/schemas/ChatCompletionChunk"},
    "description": "server-sent events: each `data:` a ChatCompletionChunk, then `data: [DONE]`; "
    'a shutdown mid-stream sends `data: {"error": {message, type, retryable, retry_after_s}}` '
    "before it",
}
ERROR = {
    "type": "object",
    "description": "`{error, error_type, field, retryable}`; on /v1/systemone "
    "`{detail: [...]}` (422) or `{detail: {error_type, message}}`; on /v1/decisions "
    "OpenAI's `{error: {message, type, param, code}}`",
}


def _json(schema: dict[str, Any], examples: dict[str, Any] | None = None) -> dict[str, Any]:
    content: dict[str, Any] = {"schema": schema}
    if examples:
        content["examples"] = {name: {"value": value} for name, value in examples.items()}
    return {"content": {"application/json": content}}


def _responses(
    ok: str, *codes: int, streams: bool = False, json_lines: bool = False
) -> dict[str, Any]:
    reasons = {
        400: "malformed JSON body",
        401: "missing or invalid API key",
        404: "System One: a model that is not served here",
        408: "body too slow",
        413: "body or prompt over a limit",
        415: "not application/json, or a compressed body (Content-Encoding)",
        422: "a field failed validation",
        503: "model busy or loading; retry after Retry-After",
    }
    responses: dict[str, dict[str, Any]] = {"200": {"description": ok, **_json(ANY_OBJECT)}}
    if streams:  # chat with `stream: true`
        responses["200"]["content"]["text/event-stream"] = {"schema": EVENT_STREAM}
    if json_lines:
        responses["200"]["content"][JSON_LINES] = {"schema": JSON_LINES_ANSWERS}
    for code in codes:
        responses[str(code)] = {"description": reasons[code], **_json(ERROR)}
    return responses


@cache
def openapi_document() -> dict[str, Any]:
    _, definitions = models_json_schema(
        [
            (DecisionRequest, "validation"),
            (SystemOneRequest, "validation"),
            (ChatRequest, "validation"),
            (DecisionsRequest, "validation"),
        ],
        ref_template="#/components/schemas/{model}",
    )
    ref = {
        name: {"$ref": f"#/components/schemas/{name}"}
        for name in ("DecisionRequest", "SystemOneRequest", "ChatRequest", "DecisionsRequest")
    }
    body_errors = (400, 404, 408, 413, 415, 422, 503)
    authenticated: dict[str, list[dict[str, list[str]]]] = {"security": [{}, {"bearer": []}]}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Decision adapter",
            "version": __version__,
            "description": "Decision scoring, the System One API and chat completions on one "
            "llama.cpp model, behind the SageMaker container contract.",
        },
        "paths": {
            "/ping": {
                "get": {
                    "summary": "SageMaker health check: 200 once the model is loaded",
                    "responses": {
                        "200": {"description": "ready", **_json(ANY_OBJECT)},
                        "503": {"description": "loading", **_json(ANY_OBJECT)},
                    },
                }
            },
            "/invocations": {
                "post": {
                    "summary": (
                        "SageMaker's route; the body's shape picks decision, OpenAI decisions, "
                        "System One or chat; an application/jsonlines body answers one line per "
                        "line"
                    ),
                    "parameters": [
                        {
                            "name": "X-Amzn-SageMaker-Custom-Attributes",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string"},
                            "description": "`format=decision|decisions-openai|systemone|chat` "
                            "forces the format",
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": _json(
                            {
                                "anyOf": [
                                    ref["DecisionRequest"],
                                    ref["SystemOneRequest"],
                                    ref["ChatRequest"],
                                    ref["DecisionsRequest"],
                                ]
                            },
                            {
                                "decision": DECISION_EXAMPLE,
                                "decisions": DECISIONS_EXAMPLE,
                                "systemone": SYSTEM_ONE_EXAMPLE,
                                "decisions-openai": OPENAI_DECISIONS_EXAMPLE,
                                "chat": CHAT_EXAMPLE,
                            },
                        )["content"]
                        | {JSON_LINES: {"schema": JSON_LINES_BODY}},
                    },
                    "responses": _responses(
                        "result(s), System One answers or a chat completion",
                        *body_errors,
                        streams=True,
                        json_lines=True,
                    ),
                }
            },
            "/execution-parameters": {
                "get": {
                    "summary": "batch transform: MaxConcurrentTransforms, BatchStrategy and "
                    "MaxPayloadInMB this container prefers (its JSON Lines limits)",
                    "responses": {"200": {"description": "parameters", **_json(ANY_OBJECT)}},
                }
            },
            "/v1/systemone": {
                "post": {
                    "summary": "System One: noul, choice and score questions about one state",
                    "requestBody": {
                        "required": True,
                        **_json(ref["SystemOneRequest"], {"systemone": SYSTEM_ONE_EXAMPLE}),
                    },
                    "responses": _responses("answers and usage", 401, *body_errors),
                    **authenticated,
                }
            },
            "/v1/decisions": {
                "post": {
                    "summary": (
                        "OpenAI's Decisions API: predicate, choice and score questions about one "
                        "input (a string, or messages and tool calls)"
                    ),
                    "requestBody": {
                        "required": True,
                        **_json(
                            ref["DecisionsRequest"], {"decisions-openai": OPENAI_DECISIONS_EXAMPLE}
                        ),
                    },
                    # OpenAI's convention: every malformed request, validation included, is a 400.
                    "responses": _responses(
                        "answers in question order, refusals among them, and usage",
                        400,
                        401,
                        408,
                        413,
                        415,
                        503,
                    ),
                    **authenticated,
                }
            },
            "/v1/chat/completions": {
                "post": {
                    "summary": (
                        "OpenAI-compatible chat completions (stream: true for server-sent events)"
                    ),
                    "requestBody": {
                        "required": True,
                        **_json(ref["ChatRequest"], {"chat": CHAT_EXAMPLE}),
                    },
                    "responses": _responses(
                        "a chat completion or an event stream", 401, *body_errors, streams=True
                    ),
                    **authenticated,
                }
            },
            "/v1/models": {
                "get": {
                    "summary": "the served model and its alias jev-latest (System One, OpenAI)",
                    "responses": _responses("models", 401, 503),
                    **authenticated,
                }
            },
            "/stats": {
                "get": {
                    "summary": "state cache, decode and admission counters",
                    "responses": _responses("counters", 401, 503),
                    **authenticated,
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "this document",
                    "responses": {"200": {"description": "OpenAPI 3", **_json(ANY_OBJECT)}},
                }
            },
        },
        "components": {
            "schemas": {**definitions["$defs"], "ChatCompletionChunk": CHUNK},
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "only when DECISION_API_KEY is set",
                }
            },
        },
    }
