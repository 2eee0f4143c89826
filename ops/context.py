"""`python -m ops context set|unset`: the release's values and switches kept in cdk.json.

A `-c key=value` lasts one `cdk` command, so two deploys that pass different ones undo each
other (the GPU step's switch gone at the next deploy, a measured endpoint back to its measuring
values). Written into cdk.json's context and committed, they are read by every later
`make deploy` and `make destroy`, in any clone. A key is a context key, a dotted one reaching
into its object (`decisionGpuEndpoint.enabled`); a value is JSON where it parses as JSON
(`true`, `8`, `["ml.g6e.xlarge"]`), else a string (an S3 URI, an image URI). The app's
configuration must accept the result (a capacity not yet measured excepted, as for a removal),
or nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from stacks import capacity
from stacks.config import AppConfig


class ContextError(ValueError):
    """An assignment or a key that cdk.json's context cannot take."""


def cdk_json() -> Path:
    """The app's cdk.json, where the CDK CLI reads the context from."""
    return capacity.ROOT / "cdk.json"


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _path(key: str) -> list[str]:
    path = key.split(".")
    if not all(path):
        raise ContextError(f"{key!r} is not a context key (names joined by dots)")
    known = {field.alias for field in AppConfig.model_fields.values()}
    if path[0] not in known:
        raise ContextError(f"{path[0]!r} is not a key the app reads (stacks/config/, AppConfig)")
    return path


def assign(context: dict[str, Any], assignment: str) -> None:
    """KEY=VALUE into `context`, creating the objects a dotted key reaches into."""
    key, sep, text = assignment.partition("=")
    if not sep:
        raise ContextError(f"expected KEY=VALUE, got {assignment!r}")
    *parents, name = _path(key)
    holder = context
    for parent in parents:
        holder = holder.setdefault(parent, {})
        if not isinstance(holder, dict):
            raise ContextError(f"{key}: {parent} holds a value, not an object")
    holder[name] = _value(text)


def remove(context: dict[str, Any], key: str) -> bool:
    """Drop KEY (and the objects it leaves empty); False when it was not there."""
    *parents, name = _path(key)
    holders = [context]
    for parent in parents:
        holder = holders[-1].get(parent)
        if not isinstance(holder, dict):
            return False
        holders.append(holder)
    if name not in holders[-1]:
        return False
    del holders[-1][name]
    for parent, holder, child in zip(
        reversed(parents), reversed(holders[:-1]), reversed(holders), strict=False
    ):
        if child:
            break
        del holder[parent]
    return True


def check(context: dict[str, Any]) -> None:
    """The configuration the app reads from `context`, or ContextError naming the fields."""
    try:
        AppConfig.from_context({**context, "forDestroy": True})
    except ValidationError as error:
        raise ContextError(f"the app's configuration would be invalid:\n{error}") from None


def update(action: str, items: list[str], path: Path | None = None) -> list[str]:
    """Apply `set` (KEY=VALUE items) or `unset` (KEY items) to cdk.json, if the result is a
    valid configuration; what changed, one line each."""
    path = path or cdk_json()
    document = json.loads(path.read_text(encoding="utf-8"))
    context = document.setdefault("context", {})
    changed = []
    for item in items:
        if action == "set":
            assign(context, item)
            key, _, text = item.partition("=")
            changed.append(f"{key} = {json.dumps(_value(text))}")
        else:
            changed.append(f"{item} unset" if remove(context, item) else f"{item} was not set")
    check(context)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return changed
