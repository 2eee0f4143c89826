"""Markdown tables from pydantic fields: a field's default and its allowed range as a reader
writes them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def number(value: float) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) and abs(value) >= 10_000 else f"{value}"


def literal(value: Any) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, (int, float)):
        return f"`{number(value)}`"
    if isinstance(value, (str, Path)):
        return f"`{value}`"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, (list, tuple)):
        return ", ".join(literal(item) for item in value) if value else "none"
    if isinstance(value, dict):
        return ", ".join(f"`{k}`: {literal(v)}" for k, v in value.items()) if value else "none"
    return f"`{value}`"


def default(field: FieldInfo) -> str:
    """The default as the page shows it: `shown_default` where the code computes it."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "shown_default" in extra:
        return str(extra["shown_default"])
    if field.default_factory is not None:
        return literal(field.default_factory())  # type: ignore[call-arg]
    if field.default is PydanticUndefined:
        return "required"
    if field.default is None:
        return "unset"
    return literal(field.default)


def constraints(metadata: Iterable[Any]) -> list[str]:
    """A field's (or an Annotated type's) constraints in words."""
    bounds: dict[str, Any] = {}
    words = []
    for item in metadata:
        for kind in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
            value = getattr(item, kind, None)
            if value is not None:
                bounds[kind] = value
        if isinstance(item, annotated_types.Predicate):
            words.append(item.func.__doc__ or "")
    low = [f"over {number(bounds['gt'])}"] if "gt" in bounds else []
    low += [f"at least {number(bounds['ge'])}"] if "ge" in bounds else []
    high = [f"under {number(bounds['lt'])}"] if "lt" in bounds else []
    high += [f"at most {number(bounds['le'])}"] if "le" in bounds else []
    if "ge" in bounds and "le" in bounds:
        words.insert(0, f"{number(bounds['ge'])} to {number(bounds['le'])}")
    elif low or high:
        words.insert(0, ", ".join(low + high))
    if "min_length" in bounds or "max_length" in bounds:
        words.append(
            f"{bounds.get('min_length', 0)} to {bounds['max_length']} long"
            if "max_length" in bounds
            else f"at least {bounds['min_length']} long"
        )
    if "pattern" in bounds:
        words.append(f"matches `{bounds['pattern']}`")
    return [word for word in words if word]
