"""docs/context.md's tables: every CDK context key of `stacks.config.AppConfig`, a table per
section (the top level, then each object key and the objects within it)."""

from __future__ import annotations

import typing
from collections.abc import Iterator

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from stacks.config import AppConfig

from .tables import annotated_constraints, constraints, default, table, type_name

SOURCE = "stacks/config/"


def _section_model(field: FieldInfo) -> type[BaseModel] | None:
    """The model a field holds (optional or not): it gets a section of its own."""
    for candidate in [field.annotation, *typing.get_args(field.annotation)]:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


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
    kind = type_name(field.annotation)
    allowed = "; ".join(constraints(field.metadata) + annotated_constraints(field.annotation))
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
