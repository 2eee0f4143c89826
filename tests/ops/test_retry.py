"""Backoff policy: capped exponential, full jitter, Retry-After honoured; sleep injected."""

import random
import time
from email.utils import formatdate

import pytest

from ops.retry import (
    Backoff,
    RetriesExhausted,
    Retryable,
    call_with_retries,
    parse_retry_after,
    retry_after_in_body,
)


class MaxRandom(random.Random):
    """Always draws the top of the range, exposing the ceiling the policy allows."""

    def uniform(self, a, b):
        return b


def test_ceiling_doubles_then_stays_at_the_cap():
    backoff = Backoff(base_seconds=0.5, cap_seconds=4.0)
    ceilings = [backoff.delay(n, None, MaxRandom()) for n in range(6)]
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_full_jitter_draws_between_zero_and_the_ceiling():
    backoff = Backoff(base_seconds=1.0, cap_seconds=8.0)
    rng = random.Random(7)
    delays = [backoff.delay(3, None, rng) for _ in range(500)]
    assert all(0.0 <= d <= 8.0 for d in delays)
    assert min(delays) < 1.0 and max(delays) > 7.0  # spread over the whole range


def test_retry_after_sets_a_floor_but_is_itself_capped():
    backoff = Backoff(base_seconds=0.1, cap_seconds=1.0, max_retry_after_seconds=30.0)
    rng = random.Random(1)
    assert backoff.delay(0, 5.0, rng) == 5.0
    assert backoff.delay(0, 3600.0, rng) == 30.0


def test_retries_until_success_sleeping_between_attempts():
    outcomes = [Retryable("503"), Retryable("503", retry_after=2.0), "answer"]
    sleeps, retries = [], []

    def operation():
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    result = call_with_retries(
        operation,
        Backoff(max_attempts=5, base_seconds=0.5, cap_seconds=4.0),
        sleep=sleeps.append,
        rng=MaxRandom(),
        on_retry=lambda n, d, e: retries.append(n),
    )
    assert result == "answer"
    assert sleeps == [0.5, 2.0]  # second wait: the Retry-After floor beats the 1.0 ceiling
    assert retries == [1, 2]


def test_gives_up_after_max_attempts_without_a_final_sleep():
    sleeps = []
    calls = []

    def always_busy():
        calls.append(1)
        raise Retryable("HTTP 503")

    with pytest.raises(RetriesExhausted, match="3 attempts: HTTP 503") as gave_up:
        call_with_retries(
            always_busy, Backoff(max_attempts=3), sleep=sleeps.append, rng=random.Random(0)
        )
    assert len(calls) == 3 and len(sleeps) == 2
    assert gave_up.value.attempts == 3 and str(gave_up.value.last) == "HTTP 503"


def test_zero_attempts_never_calls_the_operation():
    with pytest.raises(AssertionError, match="^unreachable: max_attempts must be at least 1$"):
        call_with_retries(lambda: pytest.fail("called"), Backoff(max_attempts=0))


def test_each_retry_is_announced_with_its_refusal_and_works_without_a_given_rng():
    outcomes = [Retryable("HTTP 503"), "answer"]

    def operation():
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    announced = []
    result = call_with_retries(
        operation,
        Backoff(base_seconds=0.01),
        sleep=lambda s: None,
        on_retry=lambda attempt, delay, refusal: announced.append((attempt, str(refusal))),
    )
    assert result == "answer" and announced == [(1, "HTTP 503")]


def test_other_exceptions_are_not_retried():
    sleeps = []

    def broken():
        raise ValueError("bad request")

    with pytest.raises(ValueError):
        call_with_retries(broken, Backoff(), sleep=sleeps.append)
    assert sleeps == []


@pytest.mark.parametrize(
    "value, expected", [("3", 3.0), ("0", 0.0), (None, None), ("", None), ("soon", None)]
)
def test_parse_retry_after_seconds(value, expected):
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date():
    now = 1_700_000_000.0
    assert parse_retry_after(formatdate(now + 12, usegmt=True), now=now) == pytest.approx(12.0)
    assert parse_retry_after(formatdate(now - 12, usegmt=True), now=now) == 0.0


def test_parse_retry_after_http_date_against_the_real_clock():
    in_an_hour = formatdate(time.time() + 3600, usegmt=True)
    assert parse_retry_after(in_an_hour) == pytest.approx(3600, abs=5)


@pytest.mark.parametrize(
    "body,seconds",
    [
        ('{"error": "busy", "retryable": true, "retry_after_s": 2}', 2.0),
        ('{"detail": {"error_type": "overloaded", "message": "m", "retry_after_s": 3}}', 3.0),
        ('{"error": {"message": "m", "retry_after_s": 4}}', 4.0),
        ('{"error": "busy", "retryable": true}', None),
        ('{"retry_after_s": 0}', 0.0),
        ('{"retry_after_s": 0.5}', 0.5),
        ('{"retry_after_s": -1}', None),
        ('{"retry_after_s": true}', None),
        ('{"retry_after_s": "2"}', None),
        ("not json", None),
        ("[2]", None),
        (None, None),
    ],
)
def test_retry_after_in_a_body_is_read_from_each_error_shape(body, seconds):
    assert retry_after_in_body(body) == seconds
