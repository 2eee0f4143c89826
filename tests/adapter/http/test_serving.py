"""Process-level behaviour: `/ping` while loading, draining on SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

import httpx
import pytest

from launcher import (
    adapter_environment,
    free_port,
    running_adapter,
    wait_until,
)
from tests.support.adapter_process import post_in_flight, slow_decision

# Asserts on wall-clock time: runs in make test's serial part, alone on the machine.
pytestmark = pytest.mark.serial


def test_ping_answers_503_loading_while_the_model_loads(tmp_path):
    os.mkfifo(tmp_path / "model.gguf")  # checksumming it waits for a writer: loading never ends
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "decision_adapter", "serve"],
        env=adapter_environment(PORT=str(port), DECISION_MODEL_DIR=str(tmp_path)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url, answers = f"http://127.0.0.1:{port}", []

    def answered() -> bool:
        with contextlib.suppress(httpx.TransportError):
            answers.append(httpx.get(url + "/ping", timeout=2))
        return bool(answers)

    try:
        wait_until(answered, what="the server listening")
        assert answers[0].status_code == 503
        assert answers[0].json() == {"status": "loading"}
        decision = {
            "id": "d",
            "state": "s",
            "question": "q?",
            "options": [{"id": "a"}, {"id": "b"}],
        }
        busy = httpx.post(url + "/invocations", json={"decision": decision}, timeout=10)
        assert busy.status_code == 503 and busy.json()["retryable"] is True
    finally:
        process.kill()  # SIGTERM would wait for the loader, blocked on the FIFO
        process.wait(timeout=30)


GRACE_S = 20


def _refuses_connections(url: str) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_sigterm_refuses_new_connections_while_an_in_flight_decision_finishes(tmp_path):
    line = "The warehouse scanner logs show repeated timeouts on aisle 7. "
    body = slow_decision(line, 50, options=("hardware", "network"))
    with running_adapter(
        tmp_path, DECISION_GRACEFUL_SHUTDOWN_S=str(GRACE_S), DECISION_STATE_CACHE_BYTES="0"
    ) as adapter:
        reply = post_in_flight(adapter, "/invocations", body)  # a prefill of ~650 tokens (2 s+)
        assert not _refuses_connections(adapter.url)
        adapter.process.send_signal(signal.SIGTERM)
        sigterm_at = time.monotonic()
        wait_until(
            lambda: _refuses_connections(adapter.url),
            timeout=5,
            what="new connections refused after SIGTERM",
        )
        assert not reply.done(), "refused while the decision still holds the server open"
        assert adapter.process.poll() is None
        reply.result()
        assert adapter.process.wait(timeout=GRACE_S + 5) == 0
        assert time.monotonic() - sigterm_at < GRACE_S
    assert reply.result().status_code == 200
    assert reply.result().json()["result"]["input_tokens"] > 600
