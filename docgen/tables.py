"""Markdown tables from pydantic fields: a field's default and its allowed range as a reader
writes them."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel, SecretStr
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


def constraints(metadata: Iterable[Any], unit: str = "long") -> list[str]:
    """A field's (or an Annotated type's) constraints in words; `unit` is what a length
    counts ("items" for a list)."""
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
        least = bounds.get("min_length", 0)
        if "max_length" not in bounds:
            words.append(f"at least {least} {unit.removesuffix('s') if least == 1 else unit}")
        elif "min_length" not in bounds:
            words.append(f"at most {bounds['max_length']} {unit}")
        else:
            words.append(f"{least} to {bounds['max_length']} {unit}")
    if "pattern" in bounds:
        words.append(f"matches `{bounds['pattern']}`")
    return [word for word in words if word]


def object_name(model: type[BaseModel]) -> str:
    return "object"


def type_name(
    annotation: object,
    model_name: Callable[[type[BaseModel]], str] = object_name,
    *,
    inside: bool = False,
) -> str:
    """A field's type as a reader says it ("text", "list of integer", "one of `a`, `b`"), a
    model as `model_name` names it. A field's own null is its default, not its type; a null
    `inside` a list or an object is said."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0], model_name, inside=inside)
    if origin is typing.Literal:
        return literal(args[0]) if len(args) == 1 else "one of " + ", ".join(map(literal, args))
    if origin in (typing.Union, types.UnionType):
        kinds = [type_name(arg, model_name, inside=inside) for arg in args if arg is not type(None)]
        if inside and type(None) in args:
            kinds.append("null")
        return " or ".join(dict.fromkeys(kinds)) if kinds else "null"
    if origin is list:
        item = type_name(args[0], model_name, inside=True)
        return "list" if args[0] is Any else f"list of {item}"
    if origin is dict:
        value = type_name(args[1], model_name, inside=True)
        return "object" if args[1] is Any else f"object of {value}"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + ", ".join(literal(member) for member in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_name(annotation)
    names: dict[object, str] = {
        str: "text",
        int: "integer",
        float: "number",
        bool: "`true` or `false`",
        type(None): "null",
        None: "null",
    }
    return names.get(annotation, str(annotation))


def annotated_constraints(annotation: object) -> list[str]:
    """Constraints of an Annotated type inside another (an optional `S3Prefix`, a list's
    items): pydantic keeps those in the annotation, not in the field's metadata."""
    if typing.get_origin(annotation) is typing.Annotated:
        words = []
        for item in typing.get_args(annotation)[1:]:
            words += constraints(getattr(item, "metadata", [item]))
        return words
    return [word for arg in typing.get_args(annotation) for word in annotated_constraints(arg)]
