"""The adapter's one start-up line: model, GPUs, layers offloaded, libllama/libggml bound; and
the OpenMP runtime llama.cpp's threads run on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import llama_cpp
import pytest
from decision_adapter.model.gpu_devices import gpu_devices
from decision_adapter.model.native_libraries import offloaded_layers

from launcher import running_adapter

WHEEL_LIB = Path(llama_cpp.__file__).resolve().parent / "lib"


def library_lines(log: str) -> list[dict]:
    entries = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [e for e in entries if e.get("event") == "model_loaded"]


def test_the_real_adapters_start_up_line_says_what_the_model_runs_on(adapter, engine):
    (entry,) = library_lines(adapter.log())
    assert entry["message"] == "model loaded"
    assert entry["model"]["gguf_file"] == "gemma-3-270m-q4_k_m.gguf"
    # The CPU wheel offloads nothing of Gemma 3 270M's 18 blocks plus its output layer.
    assert int(engine.metadata("gemma3.block_count")) == 18
    assert entry["layers"] == {"offloaded": 0, "total": 19}
    assert entry["gpus"] == gpu_devices()  # this machine's driver, None without one


def test_the_real_adapters_start_up_log_names_the_wheels_libllama(adapter):
    (entry,) = library_lines(adapter.log())
    files = [Path(f).resolve() for f in entry["llama_libraries"]]
    assert (WHEEL_LIB / "libllama.so").resolve() in files
    assert any(f.name.startswith("libggml-base") for f in files)
    # Nothing from elsewhere: this process has no LD_LIBRARY_PATH to pull other copies in.
    assert all(f.parent == WHEEL_LIB for f in files), files
    assert entry["level"] == "INFO" and entry["logger"] == "decision_adapter"


def test_a_libggml_found_through_ld_library_path_shows_in_the_log(tmp_path):
    """The DLC's case: LD_LIBRARY_PATH holds other libggml files, which the loader prefers to
    the wheel's RUNPATH. Here they are copies of the wheel's own (same ABI, so it still runs)."""
    elsewhere = tmp_path / "opt-llama.cpp-bin"
    elsewhere.mkdir()
    for library in WHEEL_LIB.glob("libggml*.so*"):
        shutil.copy(library, elsewhere / library.name)
    with running_adapter(tmp_path, LD_LIBRARY_PATH=str(elsewhere)) as running:
        (entry,) = library_lines(running.log())
    assert entry["ld_library_path"] == str(elsewhere)
    by_name = {os.path.basename(f): Path(f).parent for f in entry["llama_libraries"]}
    assert by_name["libggml-base.so.0"] == elsewhere  # bound from LD_LIBRARY_PATH, not the wheel
    assert Path(by_name["libllama.so"]).resolve() == WHEEL_LIB  # loaded by path by the bindings


@pytest.mark.parametrize(("requested", "offloaded"), [(-1, 19), (5, 5), (19, 19), (999, 19)])
def test_layers_offloaded_are_the_request_clamped_to_llama_cpps_count(
    engine, monkeypatch, requested, offloaded
):
    """What a GPU build would report, on the real model: this CPU wheel cannot offload, so the
    build's answer to "can you offload?" is the one thing set here."""
    monkeypatch.setattr(type(engine), "gpu_offload", property(lambda _: True))
    assert offloaded_layers(engine, requested) == {"offloaded": offloaded, "total": 19}


def test_a_cpu_build_offloads_nothing_whatever_was_asked(engine):
    assert not engine.gpu_offload
    assert offloaded_layers(engine, -1) == {"offloaded": 0, "total": 19}


# What libgomp itself took from the environment when it loaded (OpenMP 5.1's omp_display_env).
SHOW_OPENMP = (
    "import ctypes, decision_adapter.model.engine; ctypes.CDLL('libgomp.so.1').omp_display_env(1)"
)


@pytest.mark.parametrize("operator_value,in_effect", [(None, "3000"), ("50000", "50000")])
def test_llama_cpps_openmp_threads_spin_briefly_unless_the_operator_says(operator_value, in_effect):
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    if operator_value is not None:
        env["GOMP_SPINCOUNT"] = operator_value
    shown = subprocess.run(
        [sys.executable, "-c", SHOW_OPENMP], env=env, capture_output=True, text=True, check=True
    ).stderr
    assert f"GOMP_SPINCOUNT = '{in_effect}'" in shown
