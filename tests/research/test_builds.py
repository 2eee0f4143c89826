"""research.builds: the comparison of llama.cpp builds, its committed result and the table that
docs/benchmarks.md shows of it."""

from __future__ import annotations

import json
from pathlib import Path

import llama_build

from research.builds.study import BUILDS, COMPILED, MARKERS, NO_AMX, newest_result, report

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_result_measures_every_build_on_the_backend_it_names():
    result = json.loads(newest_result().read_text())
    runs = {run["build"]: run for run in result["builds"]}
    assert set(runs) == set(BUILDS)
    measured = {name: run for name, run in runs.items() if "single_decision" in run}
    assert {"recipe", "recipe_no_extra_buffers", "avx2_only"} <= set(measured)
    for name, run in measured.items():
        backend = run["cpu_backend"]
        assert not set(llama_build.EXCLUDED) & set(backend["features"]), name
        assert run["single_decision"]["overhead_ratio"] > 0
        # The child process really ran that build: the installed one, or the one it was given.
        assert (run["llama_cpp_lib_path"] is None) == (name.startswith("recipe")), name
    assert measured["recipe_no_extra_buffers"]["cpu_backend"]["extra_buffer_types_in_use"] == []
    if "image_dispatch" in measured:
        assert measured["image_dispatch"]["cpu_backend"]["variant"] != "built in"


def test_benchmarks_page_shows_the_newest_builds_table():
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    begin, end = MARKERS
    shown = page.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"
    assert shown == report(json.loads(newest_result().read_text()))


def test_native_leaves_amx_out_through_the_compiler_and_avx2_is_the_old_image():
    assert NO_AMX.split() == ["-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"]
    assert "-DGGML_NATIVE=ON" in COMPILED["native_no_amx"]
    assert "-DGGML_AVX512=ON" not in COMPILED["avx2_only"]
