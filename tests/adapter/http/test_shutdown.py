"""SIGTERM with work in flight: the work stops at the deadline, each request ends in its own
format, and the process exits within DECISION_GRACEFUL_SHUTDOWN_S."""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from launcher import running_adapter, wait_until
from tests.support.adapter_process import post_in_flight
from tests.support.bodies import decision

# Asserts on wall-clock time: runs in make test's serial part, alone on the machine.
pytestmark = pytest.mark.serial

GRACE_S = 1.0
# Tear-down after the last request ended (freeing the model, leaving Python) on a shared CI box.
EXIT_SLACK_S = 0.5
LONG_CHAT = {
    "messages": [{"role": "user", "content": "Count from 1 to 2000: 1, 2, 3,"}],
    "max_tokens": 1024,
    "temperature": 0,
    "stop": ["@@@"],
}


def _terminate(adapter) -> float:
    adapter.process.send_signal(signal.SIGTERM)
    return time.monotonic()


def _exits_within_grace(adapter, sigterm_at: float) -> None:
    assert adapter.process.wait(timeout=30) == 0
    took = time.monotonic() - sigterm_at
    print(f"exited {took:.2f} s after SIGTERM")
    assert took < GRACE_S + EXIT_SLACK_S, f"exited {took:.2f} s after SIGTERM"


def test_a_streamed_chat_ends_with_an_error_event_at_the_deadline(tmp_path):
    with running_adapter(tmp_path, DECISION_GRACEFUL_SHUTDOWN_S=str(GRACE_S)) as adapter:
        body = {**LONG_CHAT, "stream": True}
        with httpx.stream(
            "POST", adapter.url + "/v1/chat/completions", json=body, timeout=60
        ) as response:
            lines = (line for line in response.iter_lines() if line)
            for line in lines:  # the first generated text: generation is in progress
                if json.loads(line[6:])["choices"][0]["delta"].get("content"):
                    break
            sigterm_at = _terminate(adapter)
            rest = list(lines)
        _exits_within_grace(adapter, sigterm_at)
    assert rest[-1] == "data: [DONE]"
    error = json.loads(rest[-2][6:])["error"]
    assert error["type"] == "server_shutting_down" and error["retryable"] is True
    assert len(rest) < 1024, "generation must stop at the deadline, not run to max_tokens"


def test_a_chat_in_flight_at_the_deadline_gets_a_503_in_its_format(tmp_path):
    with running_adapter(tmp_path, DECISION_GRACEFUL_SHUTDOWN_S=str(GRACE_S)) as adapter:
        reply = post_in_flight(adapter, "/v1/chat/completions", LONG_CHAT)
        sigterm_at = _terminate(adapter)
        reply.result()
        _exits_within_grace(adapter, sigterm_at)
    assert reply.result().status_code == 503
    error = reply.result().json()
    assert error["retryable"] is True and "shutting down" in error["error"]
    assert error["error_type"] == "shutting_down"  # not `overloaded`: this server is going away


def test_a_decision_in_flight_at_the_deadline_gets_a_503_in_its_format(tmp_path):
    # ~6,000 tokens of state: a prefill of many seconds here, longer than the grace period.
    state = "The warehouse scanner logs show repeated timeouts on aisle 7. " * 460
    body = {
        "model": "jev-latest",
        "state": state,
        "questions": {"team": {"type": "noul", "instructions": "Is it hardware?"}},
    }
    with running_adapter(
        tmp_path, DECISION_GRACEFUL_SHUTDOWN_S=str(GRACE_S), DECISION_STATE_CACHE_BYTES="0"
    ) as adapter:
        reply = post_in_flight(adapter, "/v1/systemone", body)
        sigterm_at = _terminate(adapter)
        reply.result()
        _exits_within_grace(adapter, sigterm_at)
    assert reply.result().status_code == 503, reply.result().text
    assert reply.result().json()["detail"]["error_type"] == "shutting_down"


def test_a_request_being_prepared_at_the_deadline_gets_a_503_and_the_exit_does_not_wait(tmp_path):
    # Under the cheap bound (bytes / the longest token), so it is tokenized: one llama.cpp call
    # of seconds here (byte-fallback tokens), which neither the answer nor the exit waits for.
    body = decision("\U000f0000" * 98_000, "Which team?", ("data", "infra"))
    with running_adapter(tmp_path, DECISION_GRACEFUL_SHUTDOWN_S=str(GRACE_S)) as adapter:
        executor = ThreadPoolExecutor(max_workers=1)
        reply = executor.submit(httpx.post, adapter.url + "/invocations", json=body, timeout=60)
        executor.shutdown(wait=False)
        wait_until(lambda: adapter.stats()["preparing"] == 1, what="a preparation running")
        sigterm_at = _terminate(adapter)
        response = reply.result()
        _exits_within_grace(adapter, sigterm_at)
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()
    assert error["retryable"] is True and "shutting down" in error["error"]
