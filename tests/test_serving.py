"""Process-level behaviour: refusing to start, the `serve` argument, draining on SIGTERM."""

from __future__ import annotations

import contextlib
import json
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
    run_adapter_until_exit,
    running_adapter,
    wait_until,
)
from model_manifest import sha256_of_file
from tests.adapter_process import post_in_flight, slow_decision

# Asserts on wall-clock time: runs in make test's serial part, alone on the machine.
pytestmark = pytest.mark.serial


def test_gpu_layers_without_a_gpu_backend_refuse_to_start():
    finished = run_adapter_until_exit({"DECISION_N_GPU_LAYERS": "-1"})
    assert finished.returncode != 0
    assert "no GPU backend" in finished.stderr


def test_impossible_configuration_exits_with_one_line():
    finished = run_adapter_until_exit({"DECISION_N_CTX": "ten"})
    assert finished.returncode == 2
    assert "DECISION_N_CTX" in finished.stderr and "Traceback" not in finished.stderr


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


def test_manifest_mismatch_refuses_to_start(tmp_path, gemma_gguf):
    (tmp_path / gemma_gguf.name).symlink_to(gemma_gguf)
    manifest = {
        "manifest_version": 1,
        "tool": {"name": "model_packaging", "version": "1"},
        "spec": "t",
        "model": {"name": "gemma", "gguf": gemma_gguf.name},
        "files": [
            {
                "path": gemma_gguf.name,
                "role": "gguf",
                "bytes": gemma_gguf.stat().st_size,
                "sha256": "f" * 64,
                "source": {"kind": "local", "file": "x"},
            }
        ],
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    (tmp_path / "model-manifest.json").write_text(json.dumps(manifest))
    finished = run_adapter_until_exit({"DECISION_MODEL_DIR": str(tmp_path)})
    assert finished.returncode == 1
    assert "checksum mismatch" in finished.stderr and gemma_gguf.name in finished.stderr

    manifest["files"][0]["sha256"] = sha256_of_file(gemma_gguf)
    (tmp_path / "model-manifest.json").write_text(json.dumps(manifest))
    with running_adapter(tmp_path, DECISION_MODEL_DIR=str(tmp_path)) as adapter:
        info = httpx.get(adapter.url + "/ping").json()
        assert info["model"] == "gemma"  # the manifest's identity names the model


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
    body = slow_decision(line, 160, options=("hardware", "network"))
    with running_adapter(
        tmp_path, DECISION_GRACEFUL_SHUTDOWN_S=str(GRACE_S), DECISION_STATE_CACHE_BYTES="0"
    ) as adapter:
        reply = post_in_flight(adapter, "/invocations", body)  # a prefill of ~2,000 tokens
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
    assert reply.result().json()["result"]["input_tokens"] > 1500
