"""docs/context.md's tables: every CDK context key of `stacks.config.AppConfig`, a table per
section (the top level, then each object key and the objects within it)."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from enum import Enum

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from stacks.config import AppConfig

from .tables import constraints, default, literal, table

SOURCE = "stacks/config.py"


def _section_model(field: FieldInfo) -> type[BaseModel] | None:
    """The model a field holds (optional or not): it gets a section of its own."""
    for candidate in [field.annotation, *typing.get_args(field.annotation)]:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _type_name(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return "one of " + ", ".join(literal(arg) for arg in args)
    if origin in (typing.Union, types.UnionType):
        kinds = [_type_name(arg) for arg in args if arg is not type(None)]
        return " or ".join(kinds)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"object of {_type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + ", ".join(literal(member) for member in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    names: dict[object, str] = {
        str: "text",
        int: "integer",
        float: "number",
        bool: "`true` or `false`",
    }
    return names.get(annotation, str(annotation))


def _annotated_constraints(annotation: object) -> list[str]:
    """Constraints of an Annotated type inside another (an optional `S3Prefix`, a list's
    items): pydantic keeps those in the annotation, not in the field's metadata."""
    if typing.get_origin(annotation) is typing.Annotated:
        words = []
        for item in typing.get_args(annotation)[1:]:
            words += constraints(getattr(item, "metadata", [item]))
        return words
    return [word for arg in typing.get_args(annotation) for word in _annotated_constraints(arg)]


def _sections(
    model: type[BaseModel], key: str, title: str
) -> Iterator[tuple[str, type[BaseModel], str]]:
    yield key, model, title
    for field in model.model_fields.values():
        nested = _section_model(field)
        if nested is not None:
            child = f"{key}.{field.alias}" if key else str(field.alias)
            yield from _sections(nested, child, nested.__doc__ or field.description or "")


def _row(field: FieldInfo) -> tuple[str, str, str, str, str]:
    assert field.description, f"{field.alias} has no description="
    kind = _type_name(field.annotation)
    allowed = "; ".join(constraints(field.metadata) + _annotated_constraints(field.annotation))
    return (f"`{field.alias}`", kind, default(field), allowed, field.description)


def render() -> str:
    parts = []
    for key, model, title in _sections(AppConfig, "", ""):
        rows = [
            _row(field) for field in model.model_fields.values() if _section_model(field) is None
        ]
        heading = f"## `{key}`" if key else "## Top level"
        intro = " ".join(title.split()) if key else ""
        parts.append("\n\n".join(p for p in (heading, intro) if p))
        header = ("Key", "Type", "Default", "Constraint", "Meaning")
        parts.append(table(header, rows))
    return "\n\n".join(parts)
