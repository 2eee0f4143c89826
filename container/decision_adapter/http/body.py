"""Reading a request body as JSON: content type, size limit and strict parsing."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect, Request

from ..errors import RequestError, field_path

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


# JSON's \ud800 escapes (and raw surrogate bytes, which json.loads lets through) can leave
# half a UTF-16 pair in a string: not text, and no UTF-8 encoder accepts it.
_SURROGATE = re.compile("[\ud800-\udfff]")
NOT_TEXT = "contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text"


def _not_text(value: str) -> bool:
    return not value.isascii() and _SURROGATE.search(value) is not None


def _problem(value: Any) -> str | None:
    if isinstance(value, str) and _not_text(value):
        return NOT_TEXT
    if isinstance(value, float) and not math.isfinite(value):  # 1e999 parses as inf
        return "a number too large for a 64-bit float (it would be read as Infinity)"
    return None


# Containers a body may nest: the OpenAI SDK's 32 levels for a JSON value (a state), plus the
# levels each format wraps it in. Rendering a state of depth d as the prompt shows it (indented
# JSON) costs about 2d² bytes per leaf, so depth is bounded before anything is rendered.
MAX_JSON_DEPTH = 40

# The JSON values a body holds (objects, arrays and the values in them), counted before any is
# validated. pydantic validates a body in one call that holds the interpreter, and each bad
# value costs an error: a body of many short lists, each under its own cap, held /ping for
# seconds. This bounds that call for every body; a state's own 10,000 fit six times over.
MAX_BODY_VALUES = 65_536


def _check_values(body: Any, where: str = "body") -> None:
    """Reject what json.loads accepts but no route can use, naming where it is (keys too),
    and a body of more than MAX_BODY_VALUES values (`where`: the body, or its JSON Lines line)."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), body)]
    values = 0
    while stack:
        location, value = stack.pop()
        values += 1
        if values > MAX_BODY_VALUES:
            raise RequestError(
                413,
                f"{where}: more than {MAX_BODY_VALUES:,} JSON values (objects, arrays and the "
                "values in them); send fewer items in one request",
                field="body",
                error_type="body_too_large",
            )
        if isinstance(value, dict | list) and len(location) >= MAX_JSON_DEPTH:
            _reject(location, f"nested deeper than {MAX_JSON_DEPTH} levels of objects and arrays")
        if isinstance(value, dict):
            children = list(value.items())
            bad_key = next((k for k, _ in children if _not_text(k)), None)
            if bad_key is not None:
                _reject((*location, bad_key), f"the key {NOT_TEXT}")
        elif isinstance(value, list):
            children = list(enumerate(value))
        else:
            if (problem := _problem(value)) is not None:
                _reject(location, problem)
            continue
        stack.extend(((*location, key), child) for key, child in reversed(children))


def _reject(location: tuple[Any, ...], problem: str) -> None:
    # A key that is not text cannot be echoed as it is: show its escapes.
    location = tuple(
        p.encode("utf-8", "backslashreplace").decode() if isinstance(p, str) else p
        for p in location
    )
    field = field_path(location) or "body"
    raise RequestError(
        400, f"{field}: {problem}", field=field, location=location, error_type="invalid_json"
    )


def json_text(raw: bytes, where: str = "body", *, bom_allowed: bool = True) -> str:
    """A body's bytes as text. JSON between systems is UTF-8 (RFC 8259), a byte-order mark
    starting it allowed; UTF-16 and UTF-32, which json.loads would guess from zero bytes, are
    refused, alone as in JSON Lines (where a newline byte cannot split them). Encoded surrogates
    pass, as json.loads lets them, to be refused naming their field (_check_values)."""
    encoding = json.detect_encoding(raw)
    if encoding == "utf-8-sig" and not bom_allowed:
        encoding = "utf-8"  # the mark stays, and json.loads refuses it
    if encoding not in ("utf-8", "utf-8-sig"):
        raise RequestError(
            400,
            f"{where}: {encoding.upper()} is not accepted; send UTF-8",
            field="body",
            error_type="invalid_json",
        )
    try:
        return raw.decode(encoding, "surrogatepass")
    except UnicodeDecodeError as error:
        raise RequestError(
            400,
            f"{where}: not UTF-8 at byte {error.start + 1} ({error.reason})",
            field="body",
            error_type="invalid_json",
        ) from None


def parse_json(raw: bytes, line: int | None = None) -> Any:
    """Strict JSON: no NaN/Infinity, no duplicate keys (either would silently lose data), and
    only real text in strings. `line`: the body is that line of a JSON Lines body, which its
    errors name."""
    where = "body" if line is None else f"line {line}"
    text = json_text(raw, where, bom_allowed=line is None)
    try:
        body = json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys
        )
    except json.JSONDecodeError as error:
        at = (
            f"column {error.colno}"
            if line is not None
            else f"line {error.lineno} column {error.colno}"
        )
        raise RequestError(
            400,
            f"{where}: malformed JSON at {at}: {error.msg}",
            field="body",
            error_type="invalid_json",
        ) from None
    except (ValueError, RecursionError) as error:
        raise RequestError(
            400, f"{where}: {error}", field="body", error_type="invalid_json"
        ) from None
    _check_values(body, where)
    return body


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "application/json").split(";")[0].strip().lower()


# Parsing and validating a body are CPU work: a megabyte of `{}` takes a second, its 422 more.
# They run here, two at a time, never on the event loop, which keeps answering /ping meanwhile;
# a small body is parsed in place (a thread hop would cost more than its parse).
T = TypeVar("T")
PARSING = ThreadPoolExecutor(max_workers=2, thread_name_prefix="body-parse")
INLINE_PARSE_BYTES = 16 << 10


async def off_loop(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` on a parsing thread; its exception, raised here."""
    return await asyncio.get_running_loop().run_in_executor(PARSING, function, *args)


def parsed_in_place(request: Request) -> bool:
    """Whether the body is small enough to parse and validate on the event loop: declared at
    most INLINE_PARSE_BYTES (a chunked body declares nothing)."""
    declared = request.headers.get("content-length", "")
    return declared.isdigit() and int(declared) <= INLINE_PARSE_BYTES


async def read_json(request: Request, max_bytes: int, timeout_s: float) -> Any:
    content_type = media_type(request)
    if content_type not in JSON_TYPES:
        raise RequestError(
            415,
            f"Content-Type: expected application/json, got {content_type!r}",
            field="Content-Type",
            error_type="unsupported_media_type",
        )
    body = await read_bytes(request, max_bytes, timeout_s)
    if not body.strip():
        raise RequestError(
            400, "body: empty; send a JSON object", field="body", error_type="invalid_json"
        )
    if len(body) <= INLINE_PARSE_BYTES:
        return parse_json(body)
    return await off_loop(parse_json, body)


async def read_bytes(
    request: Request, max_bytes: int, timeout_s: float, limit: str = "DECISION_MAX_BODY_BYTES"
) -> bytes:
    """The whole body, refused past `max_bytes` (the setting `limit`) or `timeout_s`."""
    coding = request.headers.get("content-encoding", "identity").strip().lower()
    if coding not in ("", "identity"):  # compressed bytes would only fail as broken JSON
        raise RequestError(
            415,
            f"Content-Encoding: {coding!r} is not supported; send the body uncompressed",
            field="Content-Encoding",
            error_type="unsupported_media_type",
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise RequestError(
            413,
            f"body: {declared} bytes, the limit is {max_bytes} ({limit})",
            field="body",
            error_type="body_too_large",
        )
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_bytes:
                    raise RequestError(
                        413,
                        f"body: more than {max_bytes} bytes ({limit})",
                        field="body",
                        error_type="body_too_large",
                    )
    except TimeoutError:
        raise RequestError(
            408,
            f"body: not received within {timeout_s:g} s (DECISION_BODY_TIMEOUT_S)",
            field="body",
            error_type="body_timeout",
            headers={"Connection": "close"},  # the rest may still trickle in: not read
        ) from None
    except ClientDisconnect:
        raise RequestError(
            400,
            "body: the client disconnected before sending it all",
            field="body",
            error_type="client_disconnected",
        ) from None
    return bytes(body)
