"""JSON Lines bodies on /invocations, as SageMaker batch transform sends them (SplitType=Line,
BatchStrategy=MultiRecord): one `decision`, `decisions` or System One body per line, answered
one line per input line, in order. A bad line answers its own error object (its format's error
body plus `line` and `status`) and the other lines are answered as if each came alone.

The body's limits (bytes, lines) are checked before anything is parsed, and every line is parsed
and validated before the model is admitted; then one admission holds the model for the whole
body and the lines are scored one by one, so a batch is never interrupted by a 503 midway.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from .admission import Busy
from .contract import ModelService
from .errors import RequestError
from .formats.base import ADAPTER_ERRORS, Call, WireFormat, format_of
from .http_body import parse_json

MEDIA_TYPE = "application/jsonlines"
# SageMaker's own spelling first; the other two are common elsewhere for the same thing.
MEDIA_TYPES = frozenset({MEDIA_TYPE, "application/x-jsonlines", "application/jsonl"})

# Describes an error raised while answering a line in a wire format: (status, body).
ErrorBody = Callable[[WireFormat, Exception], tuple[int, dict[str, Any]]]


@dataclass
class Line:
    number: int  # 1-based, as an editor counts
    wire_format: WireFormat  # the format it is answered in, its errors too
    request: BaseModel | None = None  # parsed and validated, when it is
    error: Exception | None = None  # RequestError or ValidationError, when it is not


def split(raw: bytes, max_lines: int) -> list[bytes]:
    """Lines without their terminators ("\\n" or "\\r\\n"); the last line may lack one."""
    # A byte-order mark starting the file marks its encoding, not its first line's content
    # (a single JSON body may carry one too); Windows tools write it.
    raw = raw.removeprefix(codecs.BOM_UTF8)
    count = raw.count(b"\n") + (0 if raw.endswith(b"\n") else 1)
    if count > max_lines:
        raise RequestError(
            413,
            f"body: {count} lines, the limit is {max_lines} (DECISION_MAX_JSONLINES_LINES)",
            field="body",
            error_type="too_many_lines",
        )
    lines = raw.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if not lines:
        raise RequestError(
            400,
            "body: empty; send one JSON object per line",
            field="body",
            error_type="invalid_json",
        )
    return [line.removesuffix(b"\r") for line in lines]


def _line_body(number: int, raw: bytes, max_line_bytes: int) -> Any:
    def refuse(status: int, problem: str, error_type: str = "invalid_json") -> RequestError:
        return RequestError(
            status, f"line {number}: {problem}", field="body", error_type=error_type
        )

    if len(raw) > max_line_bytes:
        raise refuse(
            413,
            f"{len(raw)} bytes, the limit is {max_line_bytes} (DECISION_MAX_BODY_BYTES)",
            "body_too_large",
        )
    if not raw.strip():
        raise refuse(400, "blank; send one JSON object per line")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise refuse(400, f"not UTF-8 at byte {error.start + 1} ({error.reason})") from None
    return parse_json(text)


def parse(
    raw: bytes,
    *,
    formats: Sequence[WireFormat],
    forced: WireFormat | None,
    max_lines: int,
    max_line_bytes: int,
) -> list[Line]:
    """Every line parsed and validated in the format its shape (or `forced`) names. CPU work:
    run it off the event loop."""
    lines = []
    for number, text in enumerate(split(raw, max_lines), start=1):
        wire_format = forced or ADAPTER_ERRORS
        try:
            body = _line_body(number, text, max_line_bytes)
            wire_format = forced or format_of(body, formats)
            lines.append(Line(number, wire_format, request=wire_format.parse(body)))
        except (RequestError, ValidationError) as error:
            lines.append(Line(number, wire_format, error=error))
    return lines


async def answer(
    lines: Sequence[Line], service: ModelService, log: dict[str, Any], error_body: ErrorBody
) -> list[dict[str, Any]]:
    """One answer per line, in order, under one admission when any line reaches the model.
    Busy (the server shutting down mid-body) ends the whole body: retry it, not some lines."""
    answers = []
    failed = 0

    async def answer_line(line: Line) -> dict[str, Any]:
        nonlocal failed
        error = line.error
        if error is None:
            try:
                return await line.wire_format.answer(line.request, service, Call(log={}))
            except Busy:
                raise
            except Exception as raised:  # noqa: BLE001 - error_body answers or re-raises it
                error = raised
        failed += 1
        status, body = error_body(line.wire_format, error)
        return {**body, "line": line.number, "status": status}

    if any(line.error is None for line in lines):
        async with service.reserved():
            answers = [await answer_line(line) for line in lines]
    else:
        answers = [await answer_line(line) for line in lines]
    log.update(kind="jsonlines", lines=len(lines), failed_lines=failed)
    return answers


def encode(answers: Sequence[dict[str, Any]]) -> bytes:
    """One JSON object per line, rendered as a single JSON answer is (so equal values are equal
    bytes). U+2028/U+2029 are escaped: some line splitters (Python's `splitlines`) end lines there.
    """
    text = "".join(
        json.dumps(item, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"
        for item in answers
    )
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode("utf-8")
