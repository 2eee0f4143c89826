"""What a wire format is: a request schema, how a request becomes the service's questions or
chat, how the results are encoded, and the body its errors are written in. Each route is bound
to one format; adding a format is its module and a line in the app's route list."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from ..contract import ModelService, Scored, StateQuestion
from ..errors import LimitExceeded, RequestError, TooManyQuestions, validation_details


class Refused(Exception):
    """A body's validation error, already written as its format's answer (`parse_refusing`)."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status)
        self.status, self.body = status, body


@dataclass
class Call:
    """What a format may use of the HTTP request it answers."""

    log: dict[str, Any] = field(default_factory=dict)  # fields for the request's log line
    is_disconnected: Callable[[], Awaitable[bool]] | None = None


@dataclass(frozen=True)
class EventStream:
    """A streamed answer: server-sent events, already encoded."""

    events: AsyncIterator[str]
    media_type: str = "text/event-stream"


class WireFormat:
    """The adapter's own error body; formats with their own conventions override it.

    `shape_keys`: top-level keys that mark a body as written in this format on /invocations;
    `shape_text`: those keys as the "expected one of" message names them.
    """

    def __init__(
        self,
        name: str = "",
        schema: type[BaseModel] = BaseModel,
        *,
        shape_keys: tuple[str, ...] = (),
        shape_text: str = "",
    ) -> None:
        self.name, self.schema = name, schema
        self.shape_keys, self.shape_text = shape_keys, shape_text

    def matches(self, body: dict[str, Any]) -> bool:
        """Whether a body's shape says it is written in this format."""
        return any(key in body for key in self.shape_keys)

    def parse(self, body: Any) -> BaseModel:
        if not isinstance(body, dict):
            raise RequestError(422, "body: expected a JSON object", field="body")
        return self.schema.model_validate(body)

    def parse_refusing(self, body: Any) -> BaseModel:
        """`parse`, a validation error answered as Refused, its body written here: where the
        validation ran, off the event loop for a large body. pydantic builds one error dict per
        bad item (`errors()`), seconds for hundreds of thousands, which on the loop held /ping."""
        try:
            return self.parse(body)
        except ValidationError as error:
            raise Refused(*self.validation_error_body(error)) from None

    async def answer(
        self, request: Any, service: ModelService, call: Call
    ) -> dict[str, Any] | EventStream:
        raise NotImplementedError

    def error_body(
        self,
        status: int,
        message: str,
        *,
        error_type: str,
        field: str | None = None,
        retryable: bool = False,
        detail: list[dict[str, Any]] | None = None,
        location: tuple[Any, ...] | None = None,
        retry_after_s: int | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """`retry_after_s`, on a 503, repeats the Retry-After header in the body: SageMaker's
        InvokeEndpoint hands a client the body of a 503 but not its headers."""
        body: dict[str, Any] = {"error": message, "error_type": error_type, "retryable": retryable}
        if retry_after_s is not None:
            body["retry_after_s"] = retry_after_s
        if field is not None:
            body["field"] = field
        if detail is not None:
            body["detail"] = detail
        return status, body

    def validation_error_body(self, error: ValidationError) -> tuple[int, dict[str, Any]]:
        detail = validation_details(error)
        where = detail[0]["field"] or "body"
        status, body = self.error_body(
            422,
            f"{where}: {detail[0]['message']}",
            error_type="validation_error",
            field=where,
            detail=detail,
        )
        return status, {**body, "errors_total": error.error_count()}


ADAPTER_ERRORS = WireFormat()  # for routes that take no body (/stats) and unknown bodies


def response_body(schema: type[BaseModel], /, **fields: Any) -> dict[str, Any]:
    """`fields` as a response body in `schema`'s field order: the model is the body's schema
    (its descriptions are docs/api.md's table), the values are sent as they are, unconverted."""
    declared = schema.model_fields
    unknown = fields.keys() - declared.keys()
    missing = {name for name, field in declared.items() if field.is_required()} - fields.keys()
    if unknown or missing:
        raise TypeError(
            f"{schema.__name__}: undeclared {sorted(unknown)}, missing {sorted(missing)}"
        )
    return {name: fields[name] for name in declared if name in fields}


def format_of(body: Any, formats: Sequence[WireFormat]) -> WireFormat:
    """The one of `formats` that a body's shape says it is written in."""
    if isinstance(body, dict):
        for wire_format in formats:
            if wire_format.matches(body):
                return wire_format
    shapes = [wire_format.shape_text for wire_format in formats]
    raise RequestError(
        422, f"body: expected one of {', '.join(shapes[:-1])} or {shapes[-1]}", field="body"
    )


async def score(
    service: ModelService, questions: Sequence[StateQuestion], *, field: str, noun: str
) -> Scored:
    """The service's scoring, its limits named by the field that holds the questions."""
    try:
        return await service.score(questions)
    except TooManyQuestions as error:
        raise error.at(field, noun) from None
    except LimitExceeded as error:
        raise error.at(field) from None
