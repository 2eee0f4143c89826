"""docs/configuration.md's table: every field of the adapter's `Settings`."""

from __future__ import annotations

import typing
from pathlib import Path

from decision_adapter.settings import Settings, environment_names
from pydantic import SecretStr

from .tables import constraints, default, table

SOURCE = "container/decision_adapter/settings.py"


def _kind(annotation: object) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    kind = args[0]
    if kind is bool:
        return "`true` or `false`"
    if kind is int:
        return "integer"
    if kind is float:
        return "number"
    if kind is Path:
        return "path"
    if kind is SecretStr:
        return "secret"
    return "text"


def render() -> str:
    rows = []
    for name, field in Settings.model_fields.items():
        assert field.description, f"Settings.{name} has no description="
        names = ", ".join(f"`{variable}`" for variable in environment_names(name))
        allowed = "; ".join([_kind(field.annotation), *constraints(field.metadata)])
        rows.append((names, default(field), allowed, field.description))
    return table(("Variable", "Default", "Allowed", "Meaning"), rows)
