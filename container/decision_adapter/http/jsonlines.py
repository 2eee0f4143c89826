"""JSON Lines bodies on /invocations, as SageMaker batch transform sends them (SplitType=Line,
BatchStrategy=MultiRecord): one `decision`, `decisions` or System One body per line, answered
one line per input line, in order. A bad line answers its own error object (its format's error
body plus `line` and `status`) and the other lines are answered as if each came alone.

The body's limits (bytes, lines) are checked before anything is parsed, and every line is parsed
and validated before the model is admitted; then one admission holds the model for the whole
body and the lines are scored one by one, so a batch never meets another request's 503 midway.
Others wait meanwhile, so a body may hold the model for DECISION_JSONLINES_TIMEOUT_S at most
(SageMaker's 60 s invocation timeout on an endpoint; a batch transform job raises it), and a
client that left stops it at the next line.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..contract import WORK_DEADLINE, ModelService
from ..deadline import Deadline
from ..errors import Busy, RequestError
from ..formats.base import ADAPTER_ERRORS, Call, EventStream, Refused, WireFormat, format_of
from ..settings import Settings
from .body import parse_json

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
    error: Exception | None = None  # RequestError or Refused, when it is not


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
    return parse_json(raw, line=number)


def parse(
    raw: bytes,
    *,
    formats: Sequence[WireFormat],
    forced: WireFormat | None,
    max_lines: int,
    max_line_bytes: int,
    shapes: Sequence[WireFormat] = (),
) -> list[Line]:
    """Every line parsed and validated in the format its shape (or `forced`) names, `shapes`
    tried in their order (/invocations' own, so a line's error names them as a body's does);
    a line shaped as one of them not among `formats` is a 415, as forcing that format on the
    body is. CPU work: run it off the event loop."""
    shapes = shapes or formats
    refused = [shape for shape in shapes if shape not in formats]
    lines = []
    for number, text in enumerate(split(raw, max_lines), start=1):
        wire_format = forced or ADAPTER_ERRORS
        try:
            body = _line_body(number, text, max_line_bytes)
            shape = forced or format_of(body, shapes)
            if shape in refused:
                raise RequestError(
                    415,
                    f"line {number}: a {shape.name} body cannot be a JSON Lines line; lines "
                    f"hold {' or '.join(f.name for f in formats)} bodies",
                    field="body",
                    error_type="unsupported_media_type",
                )
            wire_format = shape
            lines.append(Line(number, wire_format, request=wire_format.parse_refusing(body)))
        except (RequestError, Refused) as error:
            lines.append(Line(number, wire_format, error=error))
    return lines


class BodyOverTime(Busy):
    """The body held the model for its whole time bound before its last line was scored."""

    error_type = "jsonlines_timeout"

    def __init__(self, timeout_s: float, retry_after_s: int) -> None:
        Exception.__init__(
            self,
            f"body: its lines held the model for {timeout_s:g} s (DECISION_JSONLINES_TIMEOUT_S) "
            "before the last was scored; no line was answered. Retry it, send fewer lines, or "
            "raise the setting where one body may hold the model longer (batch transform)",
        )
        self.retry_after_s = retry_after_s


class LinePace:
    """The fastest line this server has scored: a body of more lines than the time bound
    leaves room for at that pace is over it before any is scored."""

    def __init__(self) -> None:
        self.fastest_s: float | None = None

    def record(self, seconds: float) -> None:
        if self.fastest_s is None or seconds < self.fastest_s:
            self.fastest_s = seconds

    def check(self, lines: int, timeout_s: float) -> None:
        if self.fastest_s is None or lines * self.fastest_s <= timeout_s:
            return
        raise RequestError(
            413,
            f"body: {lines} lines to score take at least {lines * self.fastest_s:.1f} s at this "
            f"server's fastest line ({self.fastest_s * 1000:.1f} ms), over the {timeout_s:g} s "
            "one body may hold the model (DECISION_JSONLINES_TIMEOUT_S); send fewer lines",
            field="body",
            error_type="too_many_lines",
        )


async def answer(
    lines: Sequence[Line],
    service: ModelService,
    log: dict[str, Any],
    error_body: ErrorBody,
    *,
    settings: Settings,
    pace: LinePace,
    is_disconnected: Callable[[], Awaitable[bool]] | None = None,
) -> list[dict[str, Any]]:
    """One answer per line, in order, under one admission when any line reaches the model.
    Busy (the server shutting down mid-body, or the body over its time bound) ends the whole
    body: retry it, not some lines; a line past its own scoring deadline is that line's error.
    A client that left stops the scoring at the next line."""
    answers: list[dict[str, Any]] = []
    failed = 0

    async def answer_line(line: Line) -> dict[str, Any]:
        nonlocal failed
        error = line.error
        if error is None:
            started = time.perf_counter()
            try:
                answered = await line.wire_format.answer(line.request, service, Call(log={}))
            except Exception as raised:  # noqa: BLE001 - error_body answers or re-raises it
                error = raised
            else:
                pace.record(time.perf_counter() - started)
                assert not isinstance(answered, EventStream)  # LINE_FORMATS answer one body
                return answered
        failed += 1
        status, body = error_body(line.wire_format, error)
        return {**body, "line": line.number, "status": status}

    async def answer_all() -> None:
        for line in lines:
            if is_disconnected is not None and await is_disconnected():
                log.update(abandoned_at_line=line.number)
                raise RequestError(
                    400,
                    f"body: the client disconnected before line {line.number} was answered",
                    field="body",
                    error_type="client_disconnected",
                )
            answers.append(await answer_line(line))
            if (until := WORK_DEADLINE.get()) is not None and until.passed():
                raise TimeoutError  # the line ended by the body's bound, not by its own

    to_score = sum(line.error is None for line in lines)
    if to_score:
        timeout_s = settings.jsonlines_timeout_s
        pace.check(to_score, timeout_s)
        async with service.reserved():
            # The bound stops the model work too: the line being scored ends between batches.
            bound = WORK_DEADLINE.set(Deadline.after(timeout_s))
            try:
                async with asyncio.timeout(timeout_s):
                    await answer_all()
            except TimeoutError:
                raise BodyOverTime(timeout_s, settings.retry_after_s) from None
            finally:
                WORK_DEADLINE.reset(bound)
    else:
        await answer_all()
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
