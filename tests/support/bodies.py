"""Request bodies the tests send: a decision in a line, for tests whose subject is not the
body's wording."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def decision(
    state: str = "s",
    question: str = "q?",
    options: Sequence[str] = ("a", "b"),
    *,
    id: str = "d",
    **fields: Any,
) -> dict[str, Any]:
    """A `decision` body; `fields` adds to the decision (e.g. readout)."""
    listed = [{"id": option} for option in options]
    body = {"id": id, "state": state, "question": question, "options": listed, **fields}
    return {"decision": body}
