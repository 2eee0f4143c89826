"""Reading a request body as JSON: content type, size limit and strict parsing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import ClientDisconnect, Request

from .errors import RequestError

JSON_TYPES = {"application/json", "application/jsonlines", "text/json"}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_json(raw: bytes) -> Any:
    """Strict JSON: no NaN/Infinity, no duplicate keys (either would silently lose data)."""
    try:
        return json.loads(raw, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as error:
        raise RequestError(400, f"body: malformed JSON at line {error.lineno} column {error.colno}: "
                           f"{error.msg}", field="body", error_type="invalid_json") from None
    except (ValueError, RecursionError) as error:
        raise RequestError(400, f"body: {error}", field="body", error_type="invalid_json") from None


async def read_json(request: Request, max_bytes: int, timeout_s: float) -> Any:
    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if content_type not in JSON_TYPES:
        raise RequestError(415, f"Content-Type: expected application/json, got {content_type!r}",
                           field="Content-Type", error_type="unsupported_media_type")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise RequestError(413, f"body: {declared} bytes, the limit is {max_bytes} "
                           "(DECISION_MAX_BODY_BYTES)", field="body", error_type="body_too_large")
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_bytes:
                    raise RequestError(413, f"body: more than {max_bytes} bytes (DECISION_MAX_BODY_BYTES)",
                                       field="body", error_type="body_too_large")
    except TimeoutError:
        raise RequestError(408, f"body: not received within {timeout_s:g} s (DECISION_BODY_TIMEOUT_S)",
                           field="body", error_type="body_timeout") from None
    except ClientDisconnect:
        raise RequestError(400, "body: the client disconnected before sending it all",
                           field="body", error_type="client_disconnected") from None
    if not body.strip():
        raise RequestError(400, "body: empty; send a JSON object", field="body", error_type="invalid_json")
    return parse_json(bytes(body))
