"""The decision `ops measure` sends a decision endpoint at rising concurrency: one short ticket
state, one routing question, three described queues. `make bench` sends the same one in its
concurrency runs, so a deployed endpoint's figures compare with a local run's."""

from __future__ import annotations

from typing import Any

SHORT_STATE = "The customer cannot receive a password reset email. They checked the spam folder."
OPTIONS = [
    {"id": "account_access", "description": "Login, password and account access problems."},
    {"id": "billing", "description": "Invoices, refunds and payment problems."},
    {"id": "shipping", "description": "Delivery and tracking problems."},
]
LOAD_QUESTION = "Which queue should handle this ticket?"


def decision(
    state: Any, question: str, index: int = 0, options: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    return {"id": f"d{index}", "state": state, "question": question, "options": options or OPTIONS}


def load_decision() -> dict[str, Any]:
    """The request of the concurrency runs: `python -m ops measure` and `make bench` (d)."""
    return {"decision": decision(SHORT_STATE, LOAD_QUESTION)}
