"""Which way of loading a GGUF through llama-cpp-python survives a CUDA build of the engine:
the bisection the GPU batching run (gpu_batching.py) makes first on the GPU host, before it
measures the adapter against llama-server.

Why: on an H200, llama-cpp-python's `llama_model_load_from_file` died of a segmentation fault
on the CUDA build with the GPU visible, even with no layer offloaded, while llama-server from the
same build served and the same load with the GPU hidden worked. The adapter cannot be measured
until the factor is known.

Each case loads the same GGUF in a child process of its own (`python -X faulthandler -m
research.gpu_batching.gpu_bisect child`), so a crash is a result, with its signal, not the end
of the run. A case records: loaded or not, the exit code or signal, seconds, the last step the
child reported (`died_in`: the llama.cpp call under way, each traced with a marker before and
after), the backends and devices ggml registered, the default model parameters as the
bindings read them (a non-NULL pointer there is a struct the bindings describe differently
from the library), and, loaded, one decision: the prompt of the load decision
(ops/workloads.py), decoded, its options
compared by the logit of their first token (`top_option`, `option_logits`: the same readout for
every loader, so the GPU cases can be compared with the GPU-hidden ones).

The factors (Case), the adapter's own way first:
- loader: `engine` (the adapter's Engine, EngineConfig built from Settings as DecisionService
  builds it) or `llama` (plain `llama_cpp.Llama`);
- log: `quiet` (the adapter's log callback, engine.silence_llama_logs), `bindings` (the Python
  callback llama_cpp installs when imported) or `native` (llama.cpp's own stderr logger: no
  Python in the log path at all);
- extra_bufts: `use_extra_bufts` in the model parameters, on (the adapter's default) or off;
- gpu_layers: `all` (-1) or `none` (0);
- backends, on a build with dynamic backends (GGML_BACKEND_DL, as the images build): `search`
  (llama_backend_init's ggml_backend_load_all: GGML_BACKEND_DIR, the executable's folder, the
  working folder), `dir` (ggml_backend_load_all_from_path of the library's own folder, before
  init) or `cpu` (only the best CPU variant, by path: no CUDA module at all). A build with the
  backends linked in has the one level `linked` (switching needs a second CUDA build, which one
  device call cannot afford; gpu_batching's `--backends linked` builds that one instead);
- gpu: `visible` or `hidden` (CUDA_VISIBLE_DEVICES empty: the control that loaded before);
- side factors, flipped from the adapter's end only: no_host (`no_host` in the model
  parameters: the CPU weights out of CUDA's pinned host buffer, which llama.cpp uses only when a
  GPU is there) and model (`tiny`, the random-weight 2-layer model with Llama 3's vocabulary
  that makes a case cost seconds, or `bench`, the benchmark's 1.24 B one).

The full product is 2 x 3 x 2 x 2 x 3 x 2 (x 2 x 2) = 576 cases, minutes of device time; the
design (`design`) runs about 27, six at a time, each with a timeout of its own (45 s, cut to
what is left of the bisection's 90 s budget; a case that no longer fits is `skipped`):
1. the two ends: the adapter's way (engine, quiet, extra on, all layers, search, visible) and
   its opposite with the GPU still visible (llama, bindings' log, extra off, no layers, `dir`
   or `linked`), which is also how llama-cpp-python is commonly used;
2. one factor at a time from each end (from the adapter's end the side factors too): a flip
   that changes an end's outcome names a factor, and doing it from both ends catches a factor
   that matters only beside another;
3. the full product of the cheap in-process factors (loader x log x extra_bufts) at the
   adapter's end of the others, since the log callback and the buffer types act together
   inside the one load call.
`verdict` lists every flip that changed an end's outcome; `workaround_env` turns such a flip
into an adapter setting where one exists (DECISION_EXTRA_BUFFER_TYPES), so the measurement that
follows in the same call can use it.

Standalone, e.g. the CPU path here against the venv's build (no GPU, backends linked):
`python -m research.gpu_batching.gpu_bisect run --model tiny=PATH.gguf --out DIR`; on the GPU
host, `python -m research.gpu_batching.gpu_device` runs it through gpu_batching.py (see there).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # the repository root
REPORT = "gpu-bisect.json"
MARK = "@bisect "  # the child's stage lines on stdout, told apart from anything else there
STDERR_TAIL_BYTES = 3000
CASE_TIMEOUT_S = 45.0
BUDGET_S = 90.0
MIN_CASE_S = 10.0  # less left of the budget than this and a case is skipped, not started
PARALLEL = 6
# Per case: several cases at once share the cores without spinning on each other's.
CHILD_THREADS = min(4, os.cpu_count() or 1)
TRACED = ("llama_backend_init", "llama_model_load_from_file", "llama_init_from_model")

LOADERS = ("engine", "llama")
LOGS = ("quiet", "bindings", "native")
DYNAMIC_BACKENDS = ("search", "dir", "cpu")
LINKED_BACKENDS = ("linked",)
MODELS = ("tiny", "bench")

# Outcomes, from what the child reported and how it ended.
LOADED, CRASHED, FAILED, TIMEOUT, SKIPPED = "loaded", "crashed", "failed", "timeout", "skipped"


# --- the design ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Case:
    """One way of loading the model; the defaults are the adapter's own on a GPU image."""

    loader: str = "engine"
    log: str = "quiet"
    extra_bufts: bool = True
    gpu_layers: str = "all"
    backends: str = "search"
    gpu: str = "visible"
    no_host: bool = False
    model: str = "tiny"

    @property
    def key(self) -> str:
        parts = [
            self.loader,
            f"log-{self.log}",
            f"xbuf-{'on' if self.extra_bufts else 'off'}",
            f"ngl-{self.gpu_layers}",
            f"be-{self.backends}",
            f"gpu-{self.gpu}",
        ]
        if self.no_host:
            parts.append("no-host")
        if self.model != "tiny":
            parts.append(f"model-{self.model}")
        return "/".join(parts)


MAIN_FACTORS = ("loader", "log", "extra_bufts", "gpu_layers", "backends", "gpu")
SIDE_FACTORS = ("no_host", "model")
CHEAP_FACTORS = ("loader", "log", "extra_bufts")


def factor_levels(dynamic: bool, models: Sequence[str] = ("tiny",)) -> dict[str, tuple[Any, ...]]:
    """Each factor's levels on this build (dynamic backends or linked) with these models."""
    return {
        "loader": LOADERS,
        "log": LOGS,
        "extra_bufts": (True, False),
        "gpu_layers": ("all", "none"),
        "backends": DYNAMIC_BACKENDS if dynamic else LINKED_BACKENDS,
        "gpu": ("visible", "hidden"),
        "no_host": (False, True),
        "model": tuple(m for m in MODELS if m in models),
    }


def adapter_end(dynamic: bool) -> Case:
    return Case(backends="search" if dynamic else "linked")


def far_end(dynamic: bool) -> Case:
    """Every main factor at the other common level, the GPU still visible."""
    return Case(
        loader="llama",
        log="bindings",
        extra_bufts=False,
        gpu_layers="none",
        backends="dir" if dynamic else "linked",
    )


def normalized(case: Case) -> Case:
    """Without a GPU device (hidden, or no CUDA module loaded) no layers are asked for: the
    Engine refuses GPU layers without one, which would make these controls refusals, not
    loads."""
    no_device = case.gpu == "hidden" or case.backends == "cpu"
    return dataclasses.replace(case, gpu_layers="none") if no_device else case


def flips(
    end: Case, factors: Sequence[str], levels: dict[str, tuple[Any, ...]]
) -> list[tuple[str, Any, Case]]:
    """`end` with one factor changed, for each factor and each of its other levels."""
    return [
        (factor, level, normalized(dataclasses.replace(end, **{factor: level})))
        for factor in factors
        for level in levels[factor]
        if level != getattr(end, factor)
    ]


def cheap_product(end: Case, levels: dict[str, tuple[Any, ...]]) -> list[Case]:
    return [
        dataclasses.replace(end, **dict(zip(CHEAP_FACTORS, combination, strict=True)))
        for combination in itertools.product(*(levels[f] for f in CHEAP_FACTORS))
    ]


def ends(dynamic: bool) -> dict[str, tuple[Case, tuple[str, ...]]]:
    """Each end and the factors flipped from it."""
    return {
        "adapter_end": (adapter_end(dynamic), MAIN_FACTORS + SIDE_FACTORS),
        "far_end": (far_end(dynamic), MAIN_FACTORS),
    }


def design(dynamic: bool, models: Sequence[str] = ("tiny",)) -> list[Case]:
    """The cases, most telling first (the ends, then their flips, then the product's rest),
    each once: a run stopped early still has the ends."""
    levels = factor_levels(dynamic, models)
    ordered = [end for end, _ in ends(dynamic).values()]
    for end, factors in ends(dynamic).values():
        ordered += [case for _, _, case in flips(end, factors, levels)]
    ordered += cheap_product(adapter_end(dynamic), levels)
    return list(dict.fromkeys(ordered))


def roles(case: Case, dynamic: bool, models: Sequence[str] = MODELS) -> list[str]:
    """Why a case is in the design: an end, which end it flips and how, the product."""
    levels = factor_levels(dynamic, models)
    found = []
    for name, (end, factors) in ends(dynamic).items():
        if case == end:
            found.append(name)
        found += [f"{name} with {f}={v}" for f, v, c in flips(end, factors, levels) if c == case]
    if case in cheap_product(adapter_end(dynamic), levels):
        found.append("cheap product")
    return found


# --- running one case ---------------------------------------------------------------------
@dataclasses.dataclass
class ChildRun:
    """How a child process ended and what it printed."""

    exit_code: int | None
    signal: str | None
    seconds: float
    timed_out: bool
    stdout: str
    stderr_tail: str


def run_child(
    command: Sequence[str], env: dict[str, str], folder: Path, timeout_s: float
) -> ChildRun:
    """Run `command` to its end, its output into files in `folder` (pipes would block a child
    that writes more than they hold); a child past `timeout_s` is killed with its group."""
    folder.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = folder / "stdout.txt", folder / "stderr.txt"
    began = time.monotonic()
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        process = subprocess.Popen(
            list(command), stdout=out, stderr=err, env=env, cwd=folder, start_new_session=True
        )
        with _running_lock:
            _running.add(process)
        timed_out = False
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process)
            code = process.wait()
        finally:
            with _running_lock:
                _running.discard(process)
    seconds = round(time.monotonic() - began, 2)
    killed_by = signal_name(-code) if code < 0 and not timed_out else None
    return ChildRun(
        exit_code=code,
        signal=killed_by,
        seconds=seconds,
        timed_out=timed_out,
        stdout=stdout_path.read_text(errors="replace"),
        stderr_tail=tail(stderr_path, STDERR_TAIL_BYTES),
    )


# The case children under way: in sessions of their own (a case's crash or kill takes its own
# group only), so a stopped bisection kills them itself.
_running: set[subprocess.Popen[bytes]] = set()
_running_lock = threading.Lock()


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)


def kill_children() -> None:
    with _running_lock:
        running = list(_running)
    for process in running:
        _kill_group(process)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal has no name
        return f"signal {number}"


def tail(path: Path, size: int) -> str:
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - size))
        return handle.read().decode(errors="replace")


def stages(stdout: str) -> list[dict[str, Any]]:
    """The child's stage lines, in order (anything else on stdout is not ours)."""
    found = []
    for line in stdout.splitlines():
        if line.startswith(MARK):
            with contextlib.suppress(ValueError):
                found.append(json.loads(line[len(MARK) :]))
    return found


def outcome(run: ChildRun, reported: list[dict[str, Any]]) -> str:
    if run.timed_out:
        return TIMEOUT
    if run.signal is not None:
        return CRASHED
    done = bool(reported) and reported[-1].get("stage") == "done"
    return LOADED if run.exit_code == 0 and done else FAILED


def died_in(reported: list[dict[str, Any]]) -> str | None:
    """The step under way when the child stopped or raised: a traced call begun and never
    ended, else the step after the last one it finished; None for a child that finished."""
    steps = [str(e.get("stage")) for e in reported if e.get("stage") != "error"]
    if not steps or steps[-1] == "done":
        return None
    last = steps[-1]
    return last.removesuffix(":begin") if last.endswith(":begin") else f"after {last}"


def case_result(case: Case, case_roles: list[str], run: ChildRun) -> dict[str, Any]:
    reported = stages(run.stdout)
    facts: dict[str, Any] = {}
    for entry in reported:
        facts.update({k: v for k, v in entry.items() if k not in ("stage", "t")})
    ended = outcome(run, reported)
    where = died_in(reported)
    if where is None and ended != LOADED:
        where = "at exit, after the decision"  # e.g. a crash in the teardown
    result = {
        "key": case.key,
        "case": dataclasses.asdict(case),
        "roles": case_roles,
        "outcome": ended,
        "loaded": any(e.get("stage") == "loaded" for e in reported),
        "exit_code": run.exit_code,
        "signal": run.signal,
        "seconds": run.seconds,
        "died_in": where,
        "stages": [e.get("stage") for e in reported],
        **facts,
    }
    if result["outcome"] != LOADED:
        result["stderr_tail"] = run.stderr_tail
    return result


def child_env(base: dict[str, str], case: Case) -> dict[str, str]:
    """The child's environment: the run's, the repository importable, the GPU hidden or not."""
    env = dict(base)
    path = [str(REPO), str(REPO / "container")]
    env["PYTHONPATH"] = os.pathsep.join([*path, *filter(None, [env.get("PYTHONPATH")])])
    if case.gpu == "hidden":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def child_command(case: Case, model: Path) -> list[str]:
    return [
        sys.executable,
        "-X",
        "faulthandler",
        "-m",
        "research.gpu_batching.gpu_bisect",
        "child",
        "--case",
        json.dumps(dataclasses.asdict(case)),
        "--model",
        str(model),
    ]


# --- the whole bisection ------------------------------------------------------------------
def verdict(results: list[dict[str, Any]], dynamic: bool) -> dict[str, Any]:
    """Each end's outcome and every single flip that changed it: the factors that matter."""
    by_key = {r["key"]: r for r in results}
    levels = factor_levels(dynamic, [r["case"]["model"] for r in results] or ["tiny"])
    summary: dict[str, Any] = {"outcomes": dict(Counter(r["outcome"] for r in results))}
    changes = []
    for name, (end, factors) in ends(dynamic).items():
        base = by_key.get(end.key)
        summary[name] = _brief(base)
        if base is None or base["outcome"] == SKIPPED:
            continue
        for factor, level, flipped in flips(end, factors, levels):
            other = by_key.get(flipped.key)
            if other is None or other["outcome"] in (SKIPPED, base["outcome"]):
                continue
            changes.append(
                {"from": name, "factor": factor, "level": level}
                | {"outcome": other["outcome"], "was": base["outcome"]}
            )
    summary["flips_that_change_the_outcome"] = changes
    summary["crashed"] = [r["key"] for r in results if r["outcome"] == CRASHED]
    summary["top_options"] = dict(Counter(r.get("top_option") for r in results if r["loaded"]))
    return summary


def _brief(result: dict[str, Any] | None) -> dict[str, Any] | None:
    if result is None:
        return None
    keys = ("key", "outcome", "signal", "died_in", "seconds", "top_option")
    return {k: result.get(k) for k in keys}


def workaround_env(results: list[dict[str, Any]], dynamic: bool) -> dict[str, str]:
    """Adapter settings that make the adapter's way load where it did not: only a flip that
    an adapter setting expresses, and only when that flip loaded."""
    by_key = {r["key"]: r for r in results}
    end = adapter_end(dynamic)
    if by_key.get(end.key, {}).get("outcome") in (None, LOADED, SKIPPED):
        return {}
    without_extra = by_key.get(dataclasses.replace(end, extra_bufts=False).key, {})
    if without_extra.get("outcome") == LOADED:
        return {"DECISION_EXTRA_BUFFER_TYPES": "false"}
    return {}


@dataclasses.dataclass
class Plan:
    """What one bisection runs, with what, and where it reports."""

    models: dict[str, Path]
    dynamic: bool
    env: dict[str, str]
    work: Path
    out: Path
    case_timeout_s: float = CASE_TIMEOUT_S
    parallel: int = PARALLEL
    budget_s: float = BUDGET_S


def write_json(path: Path, data: dict[str, Any]) -> None:
    """The whole report, through a temporary file: a run stopped mid-write leaves the last one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=2) + "\n")
    partial.replace(path)


class BisectReport:
    """gpu-bisect.json, rewritten whole after every case (a run stopped early keeps them)."""

    def __init__(self, plan: Plan, cases: list[Case]) -> None:
        self.path = plan.out / REPORT
        self.lock = threading.Lock()
        self.dynamic = plan.dynamic
        self.data: dict[str, Any] = {
            "what": "loading one GGUF through llama-cpp-python, one case per child process",
            "design": "the two ends, one factor at a time from each, the cheap factors' product "
            "(research/gpu_batching/gpu_bisect.py's docstring)",
            "dynamic_backends": plan.dynamic,
            "models": {name: str(path) for name, path in plan.models.items()},
            "case_timeout_s": plan.case_timeout_s,
            "parallel": plan.parallel,
            "planned": [c.key for c in cases],
            "cases": [],
        }
        self.write()

    def add(self, result: dict[str, Any]) -> None:
        with self.lock:
            self.data["cases"].append(result)
            self.data["verdict"] = verdict(self.data["cases"], self.dynamic)
            self.data["workaround_env"] = workaround_env(self.data["cases"], self.dynamic)
            self.write()

    def write(self) -> None:
        write_json(self.path, self.data)


def run_case(case: Case, index: int, plan: Plan, deadline: float) -> dict[str, Any]:
    """One case in its child, its timeout cut to what is left of the budget, or `skipped`
    when too little is left to load anything."""
    case_roles = roles(case, plan.dynamic, list(plan.models))
    left = deadline - time.monotonic()
    if left < MIN_CASE_S:
        return {
            "key": case.key,
            "case": dataclasses.asdict(case),
            "roles": case_roles,
            "outcome": SKIPPED,
            "loaded": False,
        }
    folder = plan.work / f"{index:02d}-{case.key.replace('/', '_')}"
    run = run_child(
        child_command(case, plan.models[case.model]),
        child_env(plan.env, case),
        folder,
        min(plan.case_timeout_s, left),
    )
    return case_result(case, case_roles, run)


def run_bisect(plan: Plan, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every case of the design, `plan.parallel` at a time, within `plan.budget_s`. Stopped
    (SIGTERM turned into KeyboardInterrupt by the caller), it kills the cases under way, whose
    children live in sessions of their own, and records none of them."""
    cases = design(plan.dynamic, list(plan.models))
    report = BisectReport(plan, cases)
    began = time.monotonic()
    deadline = began + plan.budget_s
    stopping = threading.Event()

    def one(indexed: tuple[int, Case]) -> None:
        index, case = indexed
        if stopping.is_set():
            return
        result = run_case(case, index, plan, deadline)
        if not stopping.is_set():
            report.add(result)
            log(f"bisect {case.key}: {result['outcome']} {result.get('signal') or ''}".rstrip())

    pool = ThreadPoolExecutor(max(1, plan.parallel), thread_name_prefix="bisect")
    try:
        list(pool.map(one, enumerate(cases)))
    except BaseException:
        stopping.set()
        pool.shutdown(wait=False, cancel_futures=True)
        kill_children()
        raise
    finally:
        pool.shutdown(wait=True)
        report.data["elapsed_s"] = round(time.monotonic() - began, 1)
        report.write()
    return report.data


# --- the child: one case in this process ----------------------------------------------------
_started = time.monotonic()


def emit(stage: str, **data: Any) -> None:
    """A stage line on stdout, flushed at once: what a crash a moment later leaves behind."""
    line = {"stage": stage, "t": round(time.monotonic() - _started, 3), **data}
    print(MARK + json.dumps(line, default=str), flush=True)


def trace(modules: Sequence[Any], names: Sequence[str] = TRACED) -> None:
    """Wrap each named llama.cpp call in `modules` (the llama_cpp package, which the Engine
    calls through, and llama_cpp.llama_cpp, which Llama's internals call through) so a stage
    line marks its start and end: a crash inside says which call it was."""
    for name in names:
        original = getattr(modules[0], name)

        def traced(*args: Any, _name: str = name, _call: Any = original) -> Any:
            emit(f"{_name}:begin")
            value = _call(*args)
            emit(f"{_name}:end")
            return value

        for module in modules:
            setattr(module, name, traced)


def override_default_params(modules: Sequence[Any], **fields: bool) -> None:
    """llama_model_default_params with `fields` set: the way into the parameters neither
    Llama (use_extra_bufts, no_host) nor the Engine (no_host) takes as an argument."""
    original = modules[0].llama_model_default_params

    def with_fields() -> Any:
        params = original()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    for module in modules:
        module.llama_model_default_params = with_fields


def ggml_library() -> tuple[ctypes.CDLL, Path]:
    """The libggml this process mapped with libllama (the same instance, by its own path)."""
    from decision_adapter.model.native_libraries import loaded_llama_libraries

    for path in loaded_llama_libraries():
        if Path(path).name.startswith("libggml.so"):
            return ctypes.CDLL(path), Path(path).parent
    raise RuntimeError("no libggml.so mapped after importing llama_cpp")


def best_cpu_variant(lib_dir: Path) -> Path | None:
    """The CPU backend module ggml would choose: the highest ggml_backend_score."""
    scored = []
    for path in sorted(lib_dir.glob("libggml-cpu*.so")):
        score = getattr(ctypes.CDLL(str(path)), "ggml_backend_score", None)
        if score is not None:
            score.restype = ctypes.c_int
            scored.append((score(), path))
    scored = [s for s in scored if s[0] > 0]
    return max(scored)[1] if scored else None


def load_backends(level: str, ggml: ctypes.CDLL, lib_dir: Path) -> dict[str, Any]:
    """The `backends` factor: what is loaded before llama_backend_init looks."""
    ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    before = int(ggml.ggml_backend_reg_count())
    if level == "dir":
        ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
        ggml.ggml_backend_load_all_from_path(str(lib_dir).encode())
    elif level == "cpu":
        variant = best_cpu_variant(lib_dir)
        if variant is None:
            raise RuntimeError(f"no CPU backend module in {lib_dir}")
        ggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
        ggml.ggml_backend_load.restype = ctypes.c_void_p
        if not ggml.ggml_backend_load(str(variant).encode()):
            raise RuntimeError(f"ggml_backend_load refused {variant}")
    return {"registered_before_init": before, "lib_dir": str(lib_dir)}


def registry(ggml: ctypes.CDLL) -> dict[str, Any]:
    """The backends and devices ggml holds now."""
    for name in ("ggml_backend_reg_count", "ggml_backend_dev_count"):
        getattr(ggml, name).restype = ctypes.c_size_t
    for name in ("ggml_backend_reg_get", "ggml_backend_dev_get"):
        getattr(ggml, name).restype = ctypes.c_void_p
        getattr(ggml, name).argtypes = [ctypes.c_size_t]
    for name in ("ggml_backend_reg_name", "ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(ggml, name).restype = ctypes.c_char_p
        getattr(ggml, name).argtypes = [ctypes.c_void_p]
    backends = [
        ggml.ggml_backend_reg_name(ggml.ggml_backend_reg_get(i)).decode()
        for i in range(ggml.ggml_backend_reg_count())
    ]
    devices = []
    for i in range(ggml.ggml_backend_dev_count()):
        device = ggml.ggml_backend_dev_get(i)
        name = ggml.ggml_backend_dev_name(device).decode()
        devices.append(f"{name}: {ggml.ggml_backend_dev_description(device).decode()}")
    return {"backends": backends, "devices": devices}


def default_params(llama_cpp: Any) -> dict[str, Any]:
    """The default model parameters as the bindings read them: every pointer NULL, or the
    bindings' struct is not the library's."""
    params = llama_cpp.llama_model_default_params()
    pointers = ("devices", "tensor_buft_overrides", "tensor_split", "kv_overrides")
    return {
        "sizeof": ctypes.sizeof(params),
        "non_null_pointers": [p for p in pointers if bool(getattr(params, p))],
        "progress_callback": bool(params.progress_callback),
        "n_gpu_layers": params.n_gpu_layers,
        "use_extra_bufts": bool(params.use_extra_bufts),
        "no_host": bool(params.no_host),
    }


def set_log(level: str, llama_cpp: Any) -> None:
    """The `log` factor, before anything is loaded."""
    if level == "quiet":
        from decision_adapter.model.engine import silence_llama_logs

        silence_llama_logs()
    elif level == "native":
        # A NULL callback: llama.cpp's own logger (a CFUNCTYPE called bare is a NULL pointer).
        llama_cpp.llama_log_set(llama_cpp.llama_log_callback(), ctypes.c_void_p())


def decision_text() -> tuple[str, list[str]]:
    """The load decision of bench.workloads as plain text, and its option ids."""
    from bench.workloads import load_decision

    item = load_decision()["decision"]
    options = [str(o["id"]) for o in item["options"]]
    text = f"{item['state']}\n{item['question']}\nOptions: {', '.join(options)}\nAnswer:"
    return text, options


class Decider:
    """A loaded model that decodes a prompt and gives its last logits: what each loader does
    its own way."""

    def tokens(self, text: str, bos: bool) -> list[int]:
        raise NotImplementedError

    def last_logits(self, tokens: list[int]) -> Any:
        raise NotImplementedError


class EngineDecider(Decider):
    def __init__(self, case: Case, model: Path) -> None:
        from decision_adapter.model.engine import Engine
        from decision_adapter.service.decision_service import engine_config
        from decision_adapter.settings import Settings

        settings = Settings.from_environment(
            {
                "DECISION_MODEL_PATH": str(model),
                "DECISION_N_GPU_LAYERS": "-1" if case.gpu_layers == "all" else "0",
                "DECISION_EXTRA_BUFFER_TYPES": "true" if case.extra_bufts else "false",
                "DECISION_N_THREADS": str(CHILD_THREADS),
                "DECISION_N_CTX": "2048",
            }
        )
        config = engine_config(settings)  # as DecisionService builds it
        assert settings.model_path is not None
        self.engine = Engine(settings.model_path, config, quiet=case.log == "quiet")

    def tokens(self, text: str, bos: bool) -> list[int]:
        found = self.engine.tokenize(text, special=False)
        return [self.engine.bos_token, *found] if bos and self.engine.adds_bos else found

    def last_logits(self, tokens: list[int]) -> Any:
        last = len(tokens) - 1
        return self.engine.decode_sequence(0, tokens, 0, [last])[last]


class LlamaDecider(Decider):
    def __init__(self, case: Case, model: Path) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(
            model_path=str(model),
            n_gpu_layers=-1 if case.gpu_layers == "all" else 0,
            n_ctx=2048,
            n_batch=512,
            n_threads=CHILD_THREADS,
            verbose=True,  # False would redirect the process's stderr around the load
        )

    def tokens(self, text: str, bos: bool) -> list[int]:
        return list(self.llm.tokenize(text.encode(), add_bos=bos, special=False))

    def last_logits(self, tokens: list[int]) -> Any:
        import numpy as np

        self.llm.eval(tokens)
        pointer = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self.llm.n_vocab(),)).copy()


def decide(decider: Decider) -> dict[str, Any]:
    """One decision: the prompt decoded, each option scored by its first token's logit."""
    text, options = decision_text()
    tokens = decider.tokens(text, bos=True)
    logits = decider.last_logits(tokens)
    scores = {o: float(logits[decider.tokens(" " + o, bos=False)[0]]) for o in options}
    return {
        "prompt_tokens": len(tokens),
        "top_option": max(scores, key=lambda o: scores[o]),
        "option_logits": {o: round(v, 4) for o, v in scores.items()},
    }


def child(case: Case, model: Path) -> int:
    """Load the model the case's way and make one decision, reporting each step; an exception
    is reported too (a refusal, a failed load), then exit 1."""
    try:
        return load_and_decide(case, model)
    except Exception as error:  # noqa: BLE001 - the parent records it as the case's result
        emit("error", error=f"{type(error).__name__}: {error}"[:2000])
        return 1


def load_and_decide(case: Case, model: Path) -> int:
    if case.loader == "engine" or case.log == "quiet":
        # The adapter's import order: engine.py sets GOMP_SPINCOUNT before llama_cpp loads.
        import decision_adapter.model.engine  # noqa: F401
    import llama_cpp
    import llama_cpp.llama_cpp as bindings

    modules = [llama_cpp, bindings]
    emit("imported", llama_cpp=llama_cpp.__version__, pid=os.getpid())
    ggml, lib_dir = ggml_library()
    emit("backends_chosen", **load_backends(case.backends, ggml, lib_dir))
    set_log(case.log, llama_cpp)
    emit("params", default_params=default_params(llama_cpp))
    overrides = {"no_host": case.no_host}
    if case.loader == "llama":
        overrides["use_extra_bufts"] = case.extra_bufts
    override_default_params(modules, **overrides)
    trace(modules)
    # Both loaders call it first; called here, the registry can be read before the load.
    llama_cpp.llama_backend_init()
    emit("registry", gpu_offload=bool(llama_cpp.llama_supports_gpu_offload()), **registry(ggml))
    began = time.monotonic()
    decider: Decider = (
        EngineDecider(case, model) if case.loader == "engine" else LlamaDecider(case, model)
    )
    emit("loaded", load_s=round(time.monotonic() - began, 3))
    emit("done", **decide(decider))
    return 0


# --- the command line ---------------------------------------------------------------------
def parse_models(words: Sequence[str]) -> dict[str, Path]:
    """`name=path` words (`tiny=...`, `bench=...`) as a mapping; a name not in MODELS is refused."""
    models = {}
    for word in words:
        name, sep, path = word.partition("=")
        if not sep or name not in MODELS:
            raise ValueError(f"not {'|'.join(MODELS)}=PATH: {word!r}")
        models[name] = Path(path)
    if "tiny" not in models:
        raise ValueError("the tiny model is the design's own: give tiny=PATH")
    return models


def library_dir() -> Path | None:
    """Where llama_cpp loads libllama from (LLAMA_CPP_LIB_PATH, else the package's lib/),
    found without loading it."""
    if os.environ.get("LLAMA_CPP_LIB_PATH"):
        return Path(os.environ["LLAMA_CPP_LIB_PATH"])
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "lib"


def dynamic_build(lib_dir: Path | None) -> bool:
    """Whether the build loads its backends at run time (GGML_BACKEND_DL): its CMake cache
    says so, or it holds CPU variant modules (which only such a build makes)."""
    if lib_dir is None:
        return False
    cache = lib_dir.parent / "CMakeCache.txt"
    if cache.is_file() and "GGML_BACKEND_DL:BOOL=ON" in cache.read_text(errors="replace"):
        return True
    return any(p.name != "libggml-cpu.so" for p in lib_dir.glob("libggml-cpu-*.so"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.gpu_batching.gpu_bisect", description=__doc__
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="the whole bisection; gpu-bisect.json into --out")
    run.add_argument("--model", action="append", required=True, metavar="NAME=PATH")
    run.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")))
    run.add_argument("--work", type=Path, default=Path("/tmp/gpu-bisect"))
    run.add_argument("--case-timeout-s", type=float, default=CASE_TIMEOUT_S)
    run.add_argument("--parallel", type=int, default=PARALLEL)
    run.add_argument("--budget-s", type=float, default=BUDGET_S)
    one = commands.add_parser("child", help="one case in this process (what `run` starts)")
    one.add_argument("--case", required=True, help="the Case as JSON")
    one.add_argument("--model", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "child":
        return child(Case(**json.loads(args.case)), args.model)
    plan = Plan(
        models=parse_models(args.model),
        dynamic=dynamic_build(library_dir()),
        env=dict(os.environ),
        work=args.work,
        out=args.out,
        case_timeout_s=args.case_timeout_s,
        parallel=args.parallel,
        budget_s=args.budget_s,
    )
    data = run_bisect(plan)
    print(json.dumps(data["verdict"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
