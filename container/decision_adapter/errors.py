"""Domain errors that map to 4xx responses naming the field at fault."""

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
        location: tuple | None = None,
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


def without_union_labels(location: Sequence[Any]) -> tuple:
    return tuple(
        part
        for position, part in enumerate(location)
        if not (
            isinstance(part, str)
            and _UNION_LABEL.fullmatch(part)
            and not (position and location[position - 1] in _CLIENT_KEYED)
        )
    )


def field_path(location: tuple) -> str:
    """pydantic's ('decisions', 0, 'options') -> 'decisions[0].options'."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


# An error body names the first few problems and how many there were: a body of a million
# bad items must not get a million-entry answer.
MAX_ERROR_DETAILS = 20


def validation_details(error: ValidationError) -> list[dict]:
    return [
        {
            "field": field_path(without_union_labels(e["loc"])),
            "message": e["msg"],
            "type": e["type"],
        }
        for e in error.errors(include_url=False, include_input=False)[:MAX_ERROR_DETAILS]
    ]
