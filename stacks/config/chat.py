"""Chat on a real-time decision endpoint (`chat`): capped in tokens and time."""

from __future__ import annotations

from pydantic import Field

from .base import Section


class ChatLimits(Section):
    """Chat on a real-time decision endpoint: it holds the model a decision would have, so it is
    capped in tokens and time. Long chat belongs on the text-generation endpoint."""

    max_tokens: int = Field(
        256,
        ge=1,
        le=8192,
        description="`DECISION_MAX_CHAT_TOKENS`: a chat's default and largest " "`max_tokens`",
    )
    deadline_s: float | None = Field(
        None,
        gt=0,
        le=50,
        description="`DECISION_CHAT_DEADLINE_S`: a chat stops generating this long after it "
        "arrived; unset: the endpoint's `admissionWaitS` (at least 1 s), so a decision that "
        "arrives behind a chat is admitted within its wait",
    )

    def environment(self, admission_wait_s: float) -> dict[str, str]:
        """The adapter's variables for it, the deadline following the admission wait."""
        deadline = self.deadline_s if self.deadline_s is not None else max(1.0, admission_wait_s)
        return {
            "DECISION_MAX_CHAT_TOKENS": str(self.max_tokens),
            "DECISION_CHAT_DEADLINE_S": str(deadline),
        }
