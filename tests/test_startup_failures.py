"""Every failure to load the model ends the process non-zero with one line naming the cause."""

from __future__ import annotations

import socket

import pytest

from launcher import run_adapter_until_exit
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
