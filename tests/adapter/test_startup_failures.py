"""Start-up: every failure ends the process non-zero with one line naming the cause, and a model
directory's manifest is checked before the model loads."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from decision_adapter.http.openapi import DECISION_EXAMPLE as DECISION

from launcher import (
    REPO,
    adapter_environment,
    free_port,
    run_adapter_until_exit,
    running_adapter,
    stop,
    wait_until,
)
from model_manifest import sha256_of_file
from tests.support.gguf_variants import with_chat_template


def _one_line(finished) -> str:
    assert "Traceback" not in finished.stderr
    lines = [line for line in finished.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, finished.stderr
    return lines[0]


def test_a_chat_template_that_does_not_compile_exits_with_one_line(tmp_path, gemma_gguf):
    with_chat_template(gemma_gguf, tmp_path, "{% if %}<start_of_turn>user\n{{ messages }}")
    finished = run_adapter_until_exit({"DECISION_MODEL_DIR": str(tmp_path)}, timeout=90)
    assert finished.returncode == 1
    assert "chat template does not compile" in _one_line(finished)


@pytest.mark.parametrize("name", ["model-manifest.json", "calibration.json"])
def test_a_deeply_nested_json_file_beside_the_model_exits_with_one_line(tmp_path, gemma_gguf, name):
    (tmp_path / gemma_gguf.name).symlink_to(gemma_gguf)
    (tmp_path / name).write_text("[" * 100_000)
    finished = run_adapter_until_exit({"DECISION_MODEL_DIR": str(tmp_path)}, timeout=90)
    assert finished.returncode == 1
    assert str(tmp_path / name) in _one_line(finished)


def test_an_address_that_cannot_be_bound_exits_2_with_one_line():
    finished = run_adapter_until_exit({"HOST": "256.1.1.1"}, timeout=60)
    assert finished.returncode == 2
    assert "HOST=256.1.1.1" in _one_line(finished)


def test_a_port_in_use_exits_2_with_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        finished = run_adapter_until_exit({"PORT": str(port)}, timeout=60)
    assert finished.returncode == 2
    line = _one_line(finished)
    assert str(port) in line and "in use" in line


def test_gpu_layers_without_a_gpu_backend_refuse_to_start():
    finished = run_adapter_until_exit({"DECISION_N_GPU_LAYERS": "-1"})
    assert finished.returncode != 0
    assert "no GPU backend" in finished.stderr


def test_impossible_configuration_exits_with_one_line():
    finished = run_adapter_until_exit({"DECISION_N_CTX": "ten"})
    assert finished.returncode == 2
    assert "DECISION_N_CTX" in finished.stderr and "Traceback" not in finished.stderr


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


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_corrupt_gguf_exits_with_one_line(tmp_path, gemma_gguf, damage):
    broken = tmp_path / "model.gguf"
    with gemma_gguf.open("rb") as source:
        data = source.read(4 << 20)
    broken.write_bytes(data if damage == "truncated" else b"\x00not a gguf" * 1000)
    finished = run_adapter_until_exit({"DECISION_MODEL_DIR": str(tmp_path)})
    assert finished.returncode == 1
    assert "model.gguf" in _one_line(finished)


def test_a_model_directory_that_is_a_file_exits_with_one_line(tmp_path):
    not_a_directory = tmp_path / "model"
    not_a_directory.write_text("x")
    finished = run_adapter_until_exit({"DECISION_MODEL_DIR": str(not_a_directory)})
    assert finished.returncode == 1 and "not a directory" in _one_line(finished)


PROFILES = REPO / "model_packaging" / "profiles"


def _unreadable_profile(folder, kind: str):
    path = folder / f"{kind}.json"
    if kind == "fifo":  # opening it for reading would wait for a writer forever
        os.mkfifo(path)
    elif kind == "device":  # endless zeros
        path.symlink_to("/dev/zero")
    else:  # a gigabyte (sparse: no disk used)
        with path.open("wb") as file:
            file.truncate(1 << 30)
    return path


@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_a_profile_that_is_no_small_regular_file_exits_with_one_line_at_once(tmp_path, kind):
    path = _unreadable_profile(tmp_path, kind)
    finished = run_adapter_until_exit({"DECISION_CALIBRATION_PROFILES": str(tmp_path)}, timeout=60)
    assert finished.returncode == 1
    line = _one_line(finished)
    assert str(path) in line
    assert ("not a regular file" if kind != "huge" else "over 1048576 bytes") in line


def test_unreadable_profiles_beside_the_served_models_own_do_not_stop_the_start(tmp_path):
    for kind in ("fifo", "device", "huge"):
        _unreadable_profile(tmp_path, kind)
    (tmp_path / "broken.json").write_text('{"gguf_sha256": "' + "0" * 64 + '", "temperature": -1}')
    (tmp_path / "unparsable.json").write_text("{")
    ours = tmp_path / "gemma.json"
    shutil.copy(PROFILES / "gemma3-270m.json", ours)
    with running_adapter(tmp_path, DECISION_CALIBRATION_PROFILES=str(tmp_path)) as adapter:
        body = {"decision": {**DECISION["decision"], "readout": None}}
        result = httpx.post(adapter.url + "/invocations", json=body, timeout=60).json()["result"]
    profile = json.loads(ours.read_text())
    assert result["readout"] == profile["readout"]
    assert result["temperature"] == profile["temperature"]


def test_two_profiles_for_the_served_model_exit_naming_both(tmp_path):
    shutil.copy(PROFILES / "gemma3-270m.json", tmp_path / "a.json")
    shutil.copy(PROFILES / "gemma3-270m.json", tmp_path / "b.json")
    finished = run_adapter_until_exit({"DECISION_CALIBRATION_PROFILES": str(tmp_path)}, timeout=90)
    assert finished.returncode == 1
    line = _one_line(finished)
    assert str(tmp_path / "a.json") in line and str(tmp_path / "b.json") in line


def test_sigterm_while_the_model_is_still_being_checked_exits_at_once(tmp_path):
    # A sparse 64 GB "model": its checksum alone takes many seconds.
    model = tmp_path / "big.gguf"
    with model.open("wb") as file:
        file.truncate(64 << 30)
    port = free_port()
    with (tmp_path / "adapter.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "decision_adapter", "serve"],
            env=adapter_environment(PORT=str(port), DECISION_MODEL_PATH=str(model)),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def loading() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"http://127.0.0.1:{port}/ping").json() == {"status": "loading"}
            return False

        wait_until(loading, what="/ping answering loading")
        process.send_signal(signal.SIGTERM)
        sigterm_at = time.monotonic()
        assert process.wait(timeout=60) == 0
        took = time.monotonic() - sigterm_at
    finally:
        stop(process)
    assert took < 5, f"exited {took:.1f} s after SIGTERM"


def test_an_api_key_of_whitespace_exits_2_with_one_line():
    finished = run_adapter_until_exit({"DECISION_API_KEY": " \t "}, timeout=60)
    assert finished.returncode == 2
    assert "DECISION_API_KEY: only whitespace" in _one_line(finished)


GIB = 1 << 30


def test_batched_decisions_whose_kv_would_not_fit_refuse_to_start_naming_the_setting(tmp_path):
    """Issue 69, finding 7: each batched-decision lane reserves two KV streams of the whole
    request limit (8 lanes: 2.3 GiB on the bundled model; 64: about 18.6 GiB), unchecked. Under
    an address-space limit of 6 GiB, 64 lanes refuse the start with one line naming the
    setting; a start that fits logs what its lanes hold in the start-up line."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 * GIB, 6 * GIB))

    finished = run_adapter_until_exit(
        {"DECISION_MAX_SCORING_REQUESTS": "64"}, timeout=120, preexec_fn=limited
    )
    assert finished.returncode == 1, finished.stderr[-2000:]
    line = _one_line(finished)
    assert "DECISION_MAX_SCORING_REQUESTS=64" in line and "RLIMIT_AS" in line, line
    with running_adapter(tmp_path, DECISION_MAX_SCORING_REQUESTS="8") as adapter:
        loaded = next(
            json.loads(text) for text in adapter.log().splitlines() if '"shared_kv_bytes"' in text
        )
    assert 2.2 * GIB < loaded["shared_kv_bytes"] < 2.5 * GIB, loaded["shared_kv_bytes"]


def test_chat_streams_whose_kv_would_not_fit_refuse_to_start_naming_the_setting(tmp_path):
    """Issue 69, finding 7: each chat stream reserves a KV stream of the request limit, its
    sliding-window layers only their window (64 streams: 2.4 GiB on the bundled model),
    unchecked. Under an address-space limit of 3 GiB, 64 streams refuse the start with one line
    naming the setting. Under 5 GiB, 64 streams and 8 batched decisions (2.3 GiB) each fit
    alone but not together: the line names both. A start that fits logs what its streams hold."""
    import resource

    def limited(gib: int):
        return lambda: resource.setrlimit(resource.RLIMIT_AS, (gib * GIB, gib * GIB))

    chats = {"DECISION_MAX_CHAT_STREAMS": "64"}
    finished = run_adapter_until_exit(chats, timeout=120, preexec_fn=limited(3))
    assert finished.returncode == 1, finished.stderr[-2000:]
    line = _one_line(finished)
    assert "DECISION_MAX_CHAT_STREAMS=64:" in line and "RLIMIT_AS" in line, line
    both = {**chats, "DECISION_MAX_SCORING_REQUESTS": "8"}
    finished = run_adapter_until_exit(both, timeout=120, preexec_fn=limited(5))
    assert finished.returncode == 1, finished.stderr[-2000:]
    line = _one_line(finished)
    assert "DECISION_MAX_SCORING_REQUESTS=8 and DECISION_MAX_CHAT_STREAMS=64:" in line, line
    left = float(re.search(r"more than the ([0-9.]+) GiB", line).group(1))
    assert 2.5 < left < 4.7, line  # each alone (2.3 GiB, 2.4 GiB) fits, together they do not
    with running_adapter(tmp_path, DECISION_MAX_CHAT_STREAMS="8") as adapter:
        loaded = next(
            json.loads(text) for text in adapter.log().splitlines() if '"chat_kv_bytes"' in text
        )
    # 8 streams of 3 whole layers of 8,192 cells and 15 sliding-window layers of 1,024, each cell
    # 1 KiB a layer: llama.cpp's own KV buffers for them are 192.00 MiB and 120.00 MiB.
    assert loaded["chat_kv_bytes"] == 312 * 2**20, loaded
    assert loaded["shared_kv_bytes"] == 0, loaded


@pytest.mark.parametrize(
    ("streams", "cells", "swa_full"),
    [(8, 8192, False), (8, 600, False), (2, 8200, True)],
    ids=["chat streams", "streams shorter than the window", "decision streams"],
)
def test_the_kv_counted_is_what_llama_cpp_reserves(engine, streams, cells, swa_full):
    """kv_bytes, counted before a StreamContext is made, against the KV buffers llama.cpp logs as
    it makes one ("CPU KV buffer size = 192.00 MiB"), on the bundled model."""
    import llama_cpp
    from decision_adapter.model.engine import silence_llama_logs
    from decision_adapter.model.streams import StreamContext, kv_bytes

    logged: list[float] = []

    def keep(level: int, text: bytes | None, user_data: int | None) -> None:  # noqa: ARG001
        if match := re.search(rb"KV buffer size =\s*([0-9.]+) MiB", text or b""):
            logged.append(float(match.group(1)))

    callback = llama_cpp.llama_log_callback(keep)
    llama_cpp.llama_log_set(callback, ctypes.c_void_p())
    try:
        StreamContext(engine, streams, cells, swa_full=swa_full).close()
    finally:
        silence_llama_logs()
    assert logged, "llama.cpp logged no KV buffer"
    assert kv_bytes(engine, streams, cells, swa_full=swa_full) == round(sum(logged) * 2**20)
