"""Domain errors that map to 4xx responses naming the field at fault."""

from __future__ import annotations

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
        {"field": field_path(e["loc"]), "message": e["msg"], "type": e["type"]}
        for e in error.errors(include_url=False, include_input=False)[:MAX_ERROR_DETAILS]
    ]
