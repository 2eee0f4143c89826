"""Timing helpers: timed HTTP requests, sample summaries, and the run's time budget."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

# How long the benchmark's clients wait for one answer (a long chat on a slow host).
REQUEST_TIMEOUT_S = 300
BUSY_PAUSE_S = 0.02
BUSY_ATTEMPTS = 250


class Caller:
    """Sequential requests, timed end to end. A sequential client should never meet a busy
    model; when it does (the previous request's model work outlived its response), it retries
    after a short pause, times only the attempt that was answered, and counts the refusal."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.refused_503 = 0

    def post(self, url: str, body: dict) -> tuple[float, dict]:
        for _ in range(BUSY_ATTEMPTS):
            started = time.perf_counter()
            response = self.client.post(url, json=body)
            elapsed = time.perf_counter() - started
            if response.status_code != 503:
                response.raise_for_status()
                return elapsed, response.json()
            self.refused_503 += 1
            time.sleep(BUSY_PAUSE_S)
        raise RuntimeError(f"{url}: still 503 after {BUSY_ATTEMPTS} attempts")

    def seconds(self, url: str, body: dict) -> float:
        return self.post(url, body)[0]

    def stream(self, url: str, body: dict, has_text: Callable[[dict], bool]) -> Streamed:
        """A server-sent-event response, timed per event: when the first and the last event
        that `has_text` accepts arrived, and when the stream ended."""
        started = time.perf_counter()
        first = last = None
        events: list[dict] = []
        with self.client.stream("POST", url, json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[len("data: ") :])
                events.append(event)
                if has_text(event):
                    last = time.perf_counter() - started
                    first = last if first is None else first
        total = time.perf_counter() - started
        if first is None:
            raise RuntimeError(f"{url}: the stream carried no text")
        return Streamed(first_s=first, last_s=last, total_s=total, events=events)


@dataclass(frozen=True)
class Streamed:
    first_s: float  # time to the first text
    last_s: float  # time to the last text
    total_s: float
    events: list[dict]

    def generation_rate(self, tokens: int) -> float:
        """Tokens per second after the first: generation alone, prompt processing excluded."""
        return (tokens - 1) / (self.last_s - self.first_s) if self.last_s > self.first_s else 0.0


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def median_ms(samples: list[float]) -> float:
    return ms(statistics.median(samples))


def samples_ms(samples: list[float]) -> list[float]:
    return [round(s * 1000, 1) for s in samples]


@dataclass
class Budget:
    """The whole run's wall-clock budget. Each experiment may start another repetition only
    before its own deadline, a cumulative share of the budget; the first repetition always runs,
    so a slow machine gets fewer repeats, never missing experiments."""

    total_s: float
    started: float = field(default_factory=time.monotonic)
    # The shares past whose deadline a planned repetition was refused: what the run cut short.
    refused: list[float] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def until(self, share: float) -> float:
        return self.started + share * self.total_s

    def remaining(self, share: float = 1.0) -> float:
        return self.until(share) - time.monotonic()

    def more(self, share: float, done: int, minimum: int = 1) -> bool:
        """Whether to run repetition number `done` + 1 (asked only while the plan wants one)."""
        if done < minimum or time.monotonic() < self.until(share):
            return True
        if share not in self.refused:
            self.refused.append(share)
        return False
