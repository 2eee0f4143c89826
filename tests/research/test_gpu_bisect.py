"""The GPU bisection's CPU paths: a child killed by a signal or past its timeout is a result,
the design is the two ends, their one-factor flips and the cheap product, the verdict names the
flips that change an end's outcome, and a case loads the bundled GGUF on this machine's build
through either loader."""

import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from research.gpu_batching import gpu_bisect as gbi

CRASHING_CHILD = f"""
import json, os, signal
for stage in ("imported", "llama_model_load_from_file:begin"):
    print({gbi.MARK!r} + json.dumps({{"stage": stage}}), flush=True)
os.kill(os.getpid(), signal.SIGSEGV)
"""


def test_a_child_killed_by_sigsegv_is_recorded_with_its_signal(tmp_path):
    command = [sys.executable, "-X", "faulthandler", "-c", CRASHING_CHILD]
    run = gbi.run_child(command, dict(os.environ), tmp_path / "case", timeout_s=30)
    assert run.signal == "SIGSEGV" and run.exit_code == -signal.SIGSEGV
    assert not run.timed_out
    assert "Segmentation fault" in run.stderr_tail  # faulthandler's trace is kept
    result = gbi.case_result(gbi.Case(), ["adapter_end"], run)
    assert result["outcome"] == gbi.CRASHED and not result["loaded"]
    assert result["signal"] == "SIGSEGV"
    assert result["died_in"] == "llama_model_load_from_file"
    assert result["stages"] == ["imported", "llama_model_load_from_file:begin"]


def test_a_child_past_its_timeout_is_killed_and_recorded(tmp_path):
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    run = gbi.run_child(command, dict(os.environ), tmp_path, timeout_s=0.5)
    assert run.timed_out and run.signal is None and run.seconds < 30
    assert gbi.case_result(gbi.Case(), [], run)["outcome"] == gbi.TIMEOUT


def test_a_stopped_bisection_kills_the_children_under_way(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    command = [sys.executable, "-c", "print('@bisect {}', flush=True); import time; time.sleep(60)"]
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(gbi.run_child, command, dict(os.environ), tmp_path, 60)
        while not (tmp_path / "stdout.txt").is_file() or not gbi._running:
            time.sleep(0.05)
        gbi.kill_children()
        run = running.result(timeout=30)
    assert run.signal == "SIGKILL" and run.seconds < 30 and not gbi._running


def test_a_child_that_raises_says_where(tmp_path):
    lines = [{"stage": "imported"}, {"stage": "registry"}, {"stage": "error", "error": "E: x"}]
    stdout = "".join(f"{gbi.MARK}{json.dumps(line)}\n" for line in lines)
    run = gbi.ChildRun(1, None, 0.1, False, "noise\n" + stdout, "")
    result = gbi.case_result(gbi.Case(), [], run)
    assert result["outcome"] == gbi.FAILED and result["error"] == "E: x"
    assert result["died_in"] == "after registry"


def test_a_crash_after_the_decision_is_a_crash_at_exit_with_the_decision_kept():
    lines = [{"stage": "loaded"}, {"stage": "done", "top_option": "billing"}]
    stdout = "".join(f"{gbi.MARK}{json.dumps(line)}\n" for line in lines)
    run = gbi.ChildRun(-signal.SIGSEGV, "SIGSEGV", 0.1, False, stdout, "")
    result = gbi.case_result(gbi.Case(), [], run)
    assert result["outcome"] == gbi.CRASHED and result["loaded"]
    assert result["top_option"] == "billing" and result["died_in"].startswith("at exit")


@pytest.mark.parametrize(("dynamic", "count"), [(True, 27), (False, 22)])
def test_the_design_is_both_ends_their_flips_and_the_cheap_product(dynamic, count):
    cases = gbi.design(dynamic, ["tiny", "bench"])
    assert len(cases) == count == len(set(cases))
    adapter, far = gbi.adapter_end(dynamic), gbi.far_end(dynamic)
    assert cases[:2] == [adapter, far]  # the ends first: a run stopped early still has them
    assert adapter == gbi.Case(backends="search" if dynamic else "linked")
    levels = gbi.factor_levels(dynamic, ["tiny", "bench"])
    assert len(gbi.cheap_product(adapter, levels)) == 12
    for case in [
        *(c for _, _, c in gbi.flips(adapter, gbi.MAIN_FACTORS + gbi.SIDE_FACTORS, levels)),
        *(c for _, _, c in gbi.flips(far, gbi.MAIN_FACTORS, levels)),
        *gbi.cheap_product(adapter, levels),
    ]:
        assert case in cases
    # the side factors only from the adapter's end; no GPU device, no layers asked for
    assert {c.model for c in cases if c.model == "bench"} == {"bench"}
    assert all(c.gpu_layers == "none" for c in cases if c.gpu == "hidden" or c.backends == "cpu")
    assert all(gbi.roles(c, dynamic) for c in cases)


def test_without_the_benchmark_model_no_case_asks_for_it():
    assert all(c.model == "tiny" for c in gbi.design(True, ["tiny"]))


def _result(case: gbi.Case, outcome: str, top: str | None = None) -> dict:
    return {
        "key": case.key,
        "case": dataclasses.asdict(case),
        "outcome": outcome,
        "loaded": outcome == gbi.LOADED,
        "top_option": top,
    }


def test_the_verdict_names_the_flips_that_change_an_ends_outcome():
    adapter, far = gbi.adapter_end(True), gbi.far_end(True)
    results = [
        _result(adapter, gbi.CRASHED),
        _result(far, gbi.LOADED, "billing"),
        _result(dataclasses.replace(adapter, log="native"), gbi.LOADED, "billing"),
        _result(dataclasses.replace(adapter, loader="llama"), gbi.CRASHED),
        _result(dataclasses.replace(far, log="quiet"), gbi.CRASHED),
        _result(dataclasses.replace(adapter, extra_bufts=False), gbi.SKIPPED),
    ]
    verdict = gbi.verdict(results, dynamic=True)
    assert verdict["adapter_end"]["outcome"] == gbi.CRASHED
    assert verdict["far_end"]["outcome"] == gbi.LOADED
    changed = {
        (c["from"], c["factor"], c["level"]) for c in verdict["flips_that_change_the_outcome"]
    }
    assert changed == {("adapter_end", "log", "native"), ("far_end", "log", "quiet")}
    assert verdict["crashed"] == [adapter.key, results[3]["key"], results[4]["key"]]
    assert verdict["top_options"] == {"billing": 2}


def test_a_workaround_is_offered_only_for_a_flip_the_adapter_can_be_told():
    adapter = gbi.adapter_end(True)
    without_extra = dataclasses.replace(adapter, extra_bufts=False)
    crashed = _result(adapter, gbi.CRASHED)
    assert gbi.workaround_env([crashed, _result(without_extra, gbi.LOADED)], True) == {
        "DECISION_EXTRA_BUFFER_TYPES": "false"
    }
    assert gbi.workaround_env([crashed, _result(without_extra, gbi.CRASHED)], True) == {}
    native = dataclasses.replace(adapter, log="native")
    assert gbi.workaround_env([crashed, _result(native, gbi.LOADED)], True) == {}
    loaded = _result(adapter, gbi.LOADED)
    assert gbi.workaround_env([loaded, _result(without_extra, gbi.LOADED)], True) == {}


def test_a_case_past_the_budget_is_skipped_without_a_child(tmp_path):
    plan = gbi.Plan({"tiny": tmp_path / "m.gguf"}, False, {}, tmp_path, tmp_path)
    result = gbi.run_case(gbi.Case(), 0, plan, deadline=0.0)
    assert result["outcome"] == gbi.SKIPPED and not list(tmp_path.iterdir())


def test_models_are_named_and_the_tiny_one_is_required():
    assert gbi.parse_models(["tiny=/a.gguf", "bench=/b.gguf"]) == {
        "tiny": Path("/a.gguf"),
        "bench": Path("/b.gguf"),
    }
    for words in (["bench=/b.gguf"], ["huge=/c.gguf"], ["/a.gguf"]):
        with pytest.raises(ValueError):
            gbi.parse_models(words)


def test_a_build_with_dynamic_backends_is_told_from_a_linked_one(tmp_path):
    linked = tmp_path / "linked" / "bin"
    linked.mkdir(parents=True)
    (linked / "libggml-cpu.so").write_text("")
    assert gbi.dynamic_build(linked) is False
    assert gbi.dynamic_build(None) is False
    variants = tmp_path / "variants" / "lib"
    variants.mkdir(parents=True)
    (variants / "libggml-cpu-haswell.so").write_text("")
    assert gbi.dynamic_build(variants) is True
    cached = tmp_path / "cached" / "bin"
    cached.mkdir(parents=True)
    (cached.parent / "CMakeCache.txt").write_text("GGML_BACKEND_DL:BOOL=ON\n")
    assert gbi.dynamic_build(cached) is True


@pytest.mark.parametrize(
    "case",
    [
        # the adapter's Engine and quiet callback, as the token probe loads it
        gbi.normalized(gbi.Case(backends="linked", gpu="hidden")),
        # plain Llama with llama.cpp's own logger and no extra buffer types
        gbi.Case(
            loader="llama", log="native", extra_bufts=False, gpu_layers="none", backends="linked"
        ),
    ],
    ids=["engine", "llama"],
)
def test_a_case_loads_the_bundled_gguf_on_the_cpu_and_decides(case, gemma_gguf, tmp_path):
    plan = gbi.Plan({"tiny": gemma_gguf}, False, dict(os.environ), tmp_path, tmp_path)
    result = gbi.run_case(case, 0, plan, deadline=float("inf"))
    assert result["outcome"] == gbi.LOADED, result.get("error") or result.get("stderr_tail")
    assert result["exit_code"] == 0 and result["signal"] is None and result["died_in"] is None
    assert result["top_option"] in {"account_access", "billing", "shipping"}
    assert result["default_params"]["non_null_pointers"] == []  # the bindings read the struct
    assert "CPU" in result["backends"]
    assert "llama_model_load_from_file:end" in result["stages"]
