"""The slot grace (DECISION_SLOT_GRACE_MS), on the shared adapter (default settings) and the
real model: a client that abandons a streamed chat and at once sends its next request is served,
not refused for its own abandoned work; the grace is bounded and one request at a time uses it."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.support.adapter_process import model_held

# Asserts on wall-clock time: runs in make test's serial part, alone on the machine.
pytestmark = pytest.mark.serial

LONG_STREAM = {
    "messages": [{"role": "user", "content": "Count from 1 to 1000: 1, 2, 3,"}],
    "max_tokens": 1000,
    "temperature": 0,
    "stop": ["@@@"],
    "stream": True,
}
DECISION = {
    "decision": {"id": "d", "state": "s", "question": "q?", "options": [{"id": "a"}, {"id": "b"}]}
}


def abandon_a_stream(url: str, events: int = 5) -> int:
    """Read a few events of a long streamed chat, then close the connection mid-answer."""
    with (
        httpx.Client(base_url=url, timeout=60) as client,
        client.stream("POST", "/v1/chat/completions", json=LONG_STREAM) as response,
    ):
        if response.status_code != 200:
            return response.status_code
        received = 0
        for line in response.iter_lines():
            received += line.startswith("data: ")
            if received >= events:
                break
    return 200


def refusals(adapter) -> dict[str, int]:
    admission = adapter.stats()["admission"]
    return {key: admission[key] for key in ("refused_queue_full", "admitted_in_grace")}


def test_abandon_then_request_is_served_three_times_in_a_row(adapter):
    # Default settings: DECISION_MAX_QUEUE=0 and the default grace.
    before = refusals(adapter)
    statuses = []
    for _ in range(3):
        with httpx.Client(base_url=adapter.url, timeout=60) as next_client:
            next_client.get("/ping")  # connected already: the next request goes out at once
            streamed = abandon_a_stream(adapter.url)
            statuses += [streamed, next_client.post("/invocations", json=DECISION).status_code]
    assert statuses == [200] * 6  # (stream, next request) three times
    assert refusals(adapter)["refused_queue_full"] == before["refused_queue_full"]


def test_the_grace_is_bounded_and_taken_by_one_request_at_a_time(adapter):
    # DECISION_SLOT_GRACE_MS's default; its bound (5 s) is tested in tests/adapter/test_settings.py
    grace_s = 1.0
    before = refusals(adapter)
    outcome = {}

    def graced() -> None:
        started = time.monotonic()
        response = httpx.post(adapter.url + "/invocations", json=DECISION, timeout=60)
        outcome["graced"] = (response, time.monotonic() - started)

    with model_held(adapter):  # a long chat holds the model past the grace
        waiter = threading.Thread(target=graced)
        waiter.start()
        adapter.wait_until_in_flight(1, waiting=1)  # in its grace (the queue is 0)
        other = httpx.post(adapter.url + "/invocations", json=DECISION, timeout=60)
        # Refused at once: the one grace place is taken, and the first still waits.
        assert other.status_code == 503
        assert adapter.stats()["admission"]["waiting"] == 1
        waiter.join(60)
    response, waited = outcome["graced"]
    after = refusals(adapter)
    assert response.status_code == 503 and response.json()["retry_after_s"] == 1
    assert waited >= grace_s  # it waited the whole grace, then was refused
    assert after == {
        "refused_queue_full": before["refused_queue_full"] + 2,
        "admitted_in_grace": before["admitted_in_grace"],
    }
