"""Capped exponential backoff with full jitter, honouring Retry-After.

SageMaker hands a container's 503 to boto3 as a ModelError that boto3 never retries, and the
adapter answers 503 whenever its admission slots are full: the client owns the retry.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TypeVar

T = TypeVar("T")


class Retryable(Exception):
    """A transient refusal (503, throttling): the same request may succeed later."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RetriesExhausted(Exception):
    def __init__(self, attempts: int, last: Retryable) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last}")
        self.attempts = attempts
        self.last = last


@dataclass(frozen=True)
class Backoff:
    max_attempts: int = 6
    base_seconds: float = 0.5
    cap_seconds: float = 20.0
    # A server may ask for a long pause; past this we would rather give up and say so.
    max_retry_after_seconds: float = 60.0

    def delay(self, retry_number: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before retry `retry_number` (0 for the first retry)."""
        ceiling = min(self.cap_seconds, self.base_seconds * (2**retry_number))
        # Full jitter: spreads clients that were refused together, so they don't return together.
        delay = rng.uniform(0.0, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after_seconds))
        return delay


def call_with_retries(
    operation: Callable[[], T],
    backoff: Backoff,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    on_retry: Callable[[int, float, Retryable], None] | None = None,
) -> T:
    rng = rng if rng is not None else random.Random()
    for attempt in range(1, backoff.max_attempts + 1):
        try:
            return operation()
        except Retryable as refusal:
            if attempt == backoff.max_attempts:
                raise RetriesExhausted(attempt, refusal) from refusal
            delay = backoff.delay(attempt - 1, refusal.retry_after, rng)
            if on_retry is not None:
                on_retry(attempt, delay, refusal)
            sleep(delay)
    raise AssertionError("unreachable: max_attempts must be at least 1")


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP date; None if absent or invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def retry_after_in_body(text: str | bytes | None) -> float | None:
    """The adapter's `retry_after_s` from a 503 body, in any of its formats' error shapes
    (top level; System One's `detail`; an `error` object). SageMaker's InvokeEndpoint passes a
    container's 503 body on as the ModelError's OriginalMessage but drops its Retry-After."""
    try:
        body = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    for holder in (body, body.get("detail"), body.get("error")):
        if isinstance(holder, dict):
            value = holder.get("retry_after_s")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                return float(value)
    return None
