"""The errors a request or the start-up can meet. The layers below raise them; the HTTP layer
answers each in the format of the route that met it (http/app.error_parts), so it needs no
import past the service.

- RequestError: a 4xx naming the field at fault.
- Busy and its kinds: the service cannot take the work now; a retryable 503 with Retry-After.
- ChatTemplateError: the model's chat template refused a conversation; a 422.
- EngineError: llama.cpp refused an operation; a 500, or a start-up that cannot serve.
- ModelFileError: the GGUF cannot be served; the start-up ends.
- LimitExceeded and its kinds: a request over a configured limit. The service says what was
  exceeded; the wire format that received the request names the field at fault (`at`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError


class RequestError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str | None = None,
        error_type: str = "invalid_request",
        headers: dict[str, str] | None = None,
        location: tuple[Any, ...] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.field, self.error_type = status, message, field, error_type
        self.headers = headers
        # The field as a path of keys and indexes, where `field` alone would be ambiguous.
        self.location = location


# pydantic names the union member an error is under in its location (`str`, `list[...]`,
# `function-after[...]`, a model's class name): not a field the client wrote, so left out. The
# keys of a client's own mappings (System One question ids, choice criteria) are kept whatever
# they spell.
_UNION_LABEL = re.compile(r"(str|int|float|bool|none|constrained-\w+|[A-Z][A-Za-z]*|.*\[.*)")
_CLIENT_KEYED = {"questions", "criteria"}


def without_union_labels(location: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(
        part
        for position, part in enumerate(location)
        if not (
            isinstance(part, str)
            and _UNION_LABEL.fullmatch(part)
            and not (position and location[position - 1] in _CLIENT_KEYED)
        )
    )


def field_path(location: tuple[Any, ...]) -> str:
    """pydantic's ('decisions', 0, 'options') -> 'decisions[0].options'."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


# An error body names the first few problems and how many there were: a body of a million
# bad items must not get a million-entry answer.
MAX_ERROR_DETAILS = 20


def validation_details(error: ValidationError) -> list[dict[str, Any]]:
    return [
        {
            "field": field_path(without_union_labels(e["loc"])),
            "message": e["msg"],
            "type": e["type"],
        }
        for e in error.errors(include_url=False, include_input=False)[:MAX_ERROR_DETAILS]
    ]


class Busy(Exception):
    """No model slot free within the admission wait; retryable."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__("the model is busy with other requests; retry shortly")
        self.retry_after_s = retry_after_s


class Loading(Busy):
    """The model is not loaded yet (SageMaker sends no traffic before /ping is 200; others may)."""

    def __init__(self, retry_after_s: int) -> None:
        Exception.__init__(self, "the model is still loading; retry shortly")
        self.retry_after_s = retry_after_s


class ShuttingDown(Busy):
    """The server stopped model work at its shutdown deadline; retryable elsewhere, not here:
    its own error type, so a client does not retry a server that is going away."""

    error_type = "shutting_down"

    def __init__(self, retry_after_s: int) -> None:
        Exception.__init__(self, "the server is shutting down; retry the request")
        self.retry_after_s = retry_after_s


class OutOfTime(Busy):
    """Admitted work ran past its request's deadline: this machine was slower than the budget
    assumes (load, fewer cores); retryable, here later or on another instance."""

    def __init__(self, retry_after_s: int, deadline_s: float, *, for_chat: bool = False) -> None:
        Exception.__init__(
            self,
            "the request's model work was stopped at a running chat's deadline "
            "(DECISION_CHAT_DEADLINE_S), which it would have held past; retry the request"
            if for_chat
            else f"the request's model work ran past {deadline_s:g} s "
            "(DECISION_SCORING_DEADLINE_S); retry the request, or send fewer tokens",
        )
        self.retry_after_s = retry_after_s


class ChatTemplateError(ValueError):
    """The model's chat template cannot render what it was given (its own words included)."""


class EngineError(RuntimeError):
    """llama.cpp refused an operation (load, decode)."""


class ModelFileError(RuntimeError):
    """The model cannot be served; the message says which file and why."""


# --- limits ---------------------------------------------------------------------------
class LimitExceeded(Exception):
    """`subject` says which part of the request is over: "questions", "prompt" or
    "max_tokens"; the text follows the field's name in the message."""

    def __init__(self, status: int, subject: str, text: str, *, error_type: str) -> None:
        super().__init__(text)
        self.status, self.subject, self.text, self.error_type = status, subject, text, error_type

    def at(self, field: str) -> RequestError:
        return RequestError(
            self.status, f"{field}: {self.text}", field=field, error_type=self.error_type
        )


class TooManyQuestions(LimitExceeded):
    def __init__(self, count: int, limit: int) -> None:
        super().__init__(
            422,
            "questions",
            f"at most {limit} per request (DECISION_MAX_DECISIONS)",
            error_type="invalid_request",
        )
        self.count = count

    def at(self, field: str, noun: str = "questions") -> RequestError:
        return RequestError(self.status, f"{field}: {self.count} {noun}, {self.text}", field=field)


def over_token_budget(subject: str, needed: int | None, limit: int) -> LimitExceeded:
    """`needed` None: proved over the limit without counting every token."""
    what = "the request" if subject == "questions" else "the prompt"
    count = f"more than {limit}" if needed is None else str(needed)
    return LimitExceeded(
        413,
        subject,
        f"{what} needs {count} tokens, the limit is {limit}",
        error_type="token_limit_exceeded",
    )


def too_many_tokens_requested(requested: int, cap: int) -> LimitExceeded:
    return LimitExceeded(
        422,
        "max_tokens",
        f"{requested} requested, at most {cap} (DECISION_MAX_CHAT_TOKENS)",
        error_type="invalid_request",
    )
