"""Start-up: every failure ends the process non-zero with one line naming the cause, and a model
directory's manifest is checked before the model loads."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from launcher import run_adapter_until_exit, running_adapter
from model_manifest import sha256_of_file
from tests.gguf_variants import with_chat_template


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
