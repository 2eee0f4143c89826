"""Requests over a configured limit. The service says what was exceeded; the wire format that
received the request names the field at fault (`LimitExceeded.at`)."""

from __future__ import annotations

from .errors import RequestError


class LimitExceeded(Exception):
    """`subject` says which part of the request is over: "questions", "prompt" or
    "max_tokens"; the text follows the field's name in the message."""

    def __init__(self, status: int, subject: str, text: str, *, error_type: str) -> None:
        super().__init__(text)
        self.status, self.subject, self.text, self.error_type = status, subject, text, error_type

    def at(self, field: str) -> RequestError:
        return RequestError(
            self.status, f"{field}: {self.text}", field=field, error_type=self.error_type
        )


class TooManyQuestions(LimitExceeded):
    def __init__(self, count: int, limit: int) -> None:
        super().__init__(
            422,
            "questions",
            f"at most {limit} per request (DECISION_MAX_DECISIONS)",
            error_type="invalid_request",
        )
        self.count = count

    def at(self, field: str, noun: str = "questions") -> RequestError:
        return RequestError(self.status, f"{field}: {self.count} {noun}, {self.text}", field=field)


def over_token_budget(subject: str, needed: int | None, limit: int) -> LimitExceeded:
    """`needed` None: proved over the limit without counting every token."""
    what = "the request" if subject == "questions" else "the prompt"
    count = f"more than {limit}" if needed is None else str(needed)
    return LimitExceeded(
        413,
        subject,
        f"{what} needs {count} tokens, the limit is {limit}",
        error_type="token_limit_exceeded",
    )


def too_many_tokens_requested(requested: int, cap: int) -> LimitExceeded:
    return LimitExceeded(
        422,
        "max_tokens",
        f"{requested} requested, at most {cap} (DECISION_MAX_CHAT_TOKENS)",
        error_type="invalid_request",
    )
