"""The llama.cpp build this suite loads is the recipe's, and it survives a decision.

`make test` runs this file first, alone, and stops when it fails: a build that crashes
(AMX at the pinned llama.cpp, ggml-org/llama.cpp#20824) would otherwise kill pytest workers
across the suite and show as a hundred failures instead of one.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import httpx
import llama_build
import llama_cpp
import pytest
from decision_adapter.http.openapi import DECISION_EXAMPLE
from decision_adapter.model.native_libraries import (
    cpu_backend,
    cpu_extra_buffer_types,
    cpu_features,
    loaded_llama_libraries,
)

from launcher import running_adapter

# The recipe's options that llama.cpp's system info reports (ggml-cpu.cpp's feature list has
# no SSE42, AMX_TILE or AMX_BF16).
REPORTED = {
    "AVX",
    "AVX_VNNI",
    "AVX2",
    "F16C",
    "FMA",
    "BMI2",
    "AVX512",
    "AVX512_VBMI",
    "AVX512_VNNI",
    "AVX512_BF16",
    "AMX_INT8",
}


def recipe_features() -> list[str]:
    record = llama_build.installed_record(Path(sys.executable))
    assert record is not None, "this venv's llama-cpp-python was not installed by the recipe"
    assert record["cmake_args"] == llama_build.local_cmake_args(), "another machine's build"
    return [
        arg[len("-DGGML_") : -len("=ON")] for arg in record["cmake_args"] if arg.endswith("=ON")
    ]


def system_info() -> str:
    llama_cpp.llama_backend_init()
    return llama_cpp.llama_print_system_info().decode(errors="replace")


def test_the_cpu_backend_has_no_excluded_feature_and_every_recipe_one():
    features = cpu_features(system_info())
    assert features, system_info()
    for excluded in llama_build.excluded():
        assert excluded not in features, f"{excluded} is compiled in: {system_info()}"
    if llama_build.is_x86():
        wanted = set(recipe_features()) & REPORTED
        assert "AVX" in wanted, "every x86-64 CPU serving models has AVX"
        missing = wanted - set(features)
        assert not missing, f"the recipe asked for {sorted(missing)}; llama.cpp reports {features}"


def test_no_amx_buffer_type_is_offered():
    extra = cpu_extra_buffer_types(loaded_llama_libraries())
    assert extra is not None, "no libggml is mapped into this process"
    assert all("AMX" not in name for name in extra), extra


def test_the_start_up_line_names_the_backend_and_the_buffers(engine):
    backend = cpu_backend(loaded_llama_libraries(), engine.model_buffers)
    assert backend["variant"] == "built in"  # the local build has one CPU backend
    assert backend["features"] == cpu_features(system_info())
    # The weights' buffers as llama.cpp logged them: the mapped file at least, in MiB.
    assert engine.model_buffers.get("CPU_Mapped", 0) > 50, engine.model_buffers
    assert set(backend["extra_buffer_types_in_use"]) <= set(backend["extra_buffer_types"])
    assert set(backend["extra_buffer_types_in_use"]) == (
        set(engine.model_buffers) & set(backend["extra_buffer_types"])
    )


def test_a_decision_in_a_child_process_does_not_kill_it(tmp_path):
    """README's first curl, in an adapter process: a crash in llama.cpp's kernels shows here
    as the signal that ended it."""
    with running_adapter(tmp_path) as adapter:
        try:
            response = httpx.post(f"{adapter.url}/invocations", json=DECISION_EXAMPLE, timeout=120)
        except httpx.HTTPError as error:
            code = adapter.process.wait(timeout=30)
            name = signal.Signals(-code).name if code < 0 else f"exit {code}"
            pytest.fail(
                f"the adapter died ({name}) on its first decision: {error}\n{adapter.log()}"
            )
        assert response.status_code == 200, response.text
        assert adapter.process.poll() is None
        assert sum(response.json()["result"]["probabilities"]) == pytest.approx(1.0)
