"""Decisions/s on one GPU at 1-64 closed-loop clients: the adapter scoring decisions together in
shared batches (DECISION_MAX_SCORING_REQUESTS=64), the adapter one at a time, and llama-server
with 64 slots and continuous batching, over the very prompt tokens the adapter decodes (the
load decision of `make bench`'s (d)), one token each, prompt caches off (target: the batched
adapter within 1.2x of llama-server's decisions/s at 64 clients). Before it measures, it
bisects how llama-cpp-python's model load fares on the CUDA build (gpu_bisect.py).

It runs on a GPU host with nvcc and no package registry, from the kit that
`python -m research.gpu_batching.gpu_kit` assembles (`.gpukit/`, carried with the working tree),
started by `python -m research.gpu_batching.gpu_device` (the one command on the GPU host):

1. Build. The kit's source is the engine as container/llama_build.py prepares it for every
   build: llama-cpp-python 0.3.36's package over the b11434 llama.cpp tree. Its package root
   (the bindings' CMakeLists, which adds vendor/llama.cpp) is configured once as the GPU image
   configures it: a release build, CUDA for sm_90, the images' CPU runtime dispatch
   (`llama_build.image_cmake_args`: GGML_BACKEND_DL, every x86 variant, the backends' folder
   the build's bin/) and llama-server beside libllama (`llama_build.SERVER_CMAKE_ARGS`); then
   ninja on every core builds `llama` (which pulls in every backend module) and
   `llama-server`, and `llama_build.prune` deletes the CPU variants that need AMX, as the
   images do. ONE build serves llama-server and the adapter, whose llama-cpp-python is the
   kit's own pure-Python `llama_cpp` package on PYTHONPATH, pointed at the built libraries by
   its LLAMA_CPP_LIB_PATH. Beyond the image's flags, only what shortens the build without
   changing a kernel this run uses: FlashAttention kernels for an F16 KV cache only
   (`GGML_CUDA_FA_QUANTS=f16-f16`, the cache type both servers use), no fatbin compression, no
   NCCL. `--backends linked` builds the backends into libggml instead, with the machine's own
   CPU features less AMX (the local recipe). Where the toolkit lacks cuBLAS (one assembled
   from NVIDIA's pip wheels), it comes from the wheels beside PyTorch (cuda_hints).
2. Two random-weight llama GGUFs with Llama 3's real vocabulary (random_gguf.py), written
   with the kit's gguf-py while the build runs: the benchmark's, shaped like Llama 3.2 1B, and
   a 2-layer one that makes a bisect case cost seconds.
3. The bisection (gpu_bisect.py, `$OUT/gpu-bisect.json`): about 27 ways of loading the
   model, each in a child process, so a crash is recorded with its signal. A flip that makes
   the adapter's way load and that an adapter setting expresses (extra buffer types off) is
   applied to the adapters measured next, and said so in the report.
4. The servers, all at once on the one GPU (each holds its own copy of the model), every layer
   offloaded: the adapter (`python -m decision_adapter serve`, as `make run`) with
   DECISION_N_GPU_LAYERS=-1, its state cache off, a queue of 256 and a 60 s admission wait (64
   clients wait, not 503); llama-server with `-ngl 99 -np 64 -cb -c 64 x <per-request
   context>`. Same threads, batch size and per-request context on both.
5. Closed-loop load (bench.concurrency.run_load, from 4 processes whose answers are pooled)
   at each level, each server in turn, after one unmeasured warm-up at the highest level. 64
   clients are measured first (the target), then the rest upward. Each level's seconds shrink
   to fit the time left (--deadline-s); the one-at-a-time adapter is dropped first when time
   runs short.

`$OUT/gpu-batching.json` is rewritten after every step and level, and the servers' and the
build's log tails are copied beside it, so a run stopped by its time limit still returns what
it measured. `--cpu-smoke` runs the same path here: the kit's source and llama_cpp package, a
tiny model, no GPU, the local build's libraries and llama-server (--prebuilt, default the
recipe's cache entry: `make bench` builds its llama-server), levels 1 and 2 for a second each.

`ADAPTER_ENV="K=V K=V"` (or `--adapter-env K=V`) adds adapter settings to every adapter run;
`--bisect-only`, `--no-bisect`, `--no-one-at-a-time`, `--levels`, `--seconds`, `--n-batch`,
`--threads` and `--client-processes` change the plan. Files back under $OUT: gpu-batching.json,
gpu-bisect.json, log.txt, build-log-tail.txt and one log tail per server (7 of the 8 allowed).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import multiprocessing
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # the repository root
for _path in (REPO / "container", REPO):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import llama_build  # noqa: E402

from bench.llama_server import ServerSettings  # noqa: E402
from research.gpu_batching import gpu_bisect  # noqa: E402
from research.gpu_batching.random_gguf import TINY, Shape  # noqa: E402

KIT = REPO / ".gpukit"
SOURCE_ARCHIVE = "llama-src.tar.xz"
VOCAB = Path("models") / "ggml-vocab-llama-bpe.gguf"
REPORT = "gpu-batching.json"
GGUF = "random-llama.gguf"
BISECT_GGUF = "random-llama-tiny.gguf"
# What proves the unpacked source is the engine's tree and not the bindings' vendored one:
# the decision models' server code exists only in the newer tree.
ENGINE_MARKER = Path("vendor") / "llama.cpp" / "tools" / "server" / "server-decision.cpp"
LEVELS = (64, 1, 2, 4, 8, 16, 32)
SLOTS = 64
TARGET_RATIO = 1.2  # llama-server decisions/s over the batched adapter's, at most, at 64
LOG_TAIL_BYTES = 256 << 10
LEVEL_OVERHEAD_S = 1.5  # per level and server: the warm request, the last answers, asyncio
MIN_LEVEL_S = 1.0
RESERVE_S = 10.0  # stopping the servers and writing the report
MEASURE_RESERVE_S = 150.0  # kept for the measurement when the bisection's budget is set
MIN_BISECT_S = 60.0  # the bisection's budget, at least, whatever the measurement is left
# Build-time savers on top of the GPU image's flags: no kernel this run uses changes.
CUDA_BUILD_SAVERS = (
    "-DGGML_CUDA_FA_QUANTS=f16-f16",
    "-DGGML_CUDA_COMPRESSION_MODE=none",
    "-DGGML_CUDA_NCCL=OFF",
)
# Every adapter run: the state cache off (every decision decodes its whole prompt, as
# llama-server does with its prompt cache off), a queue long enough that clients wait.
ADAPTER_BASE = {
    "DECISION_STATE_CACHE_BYTES": "0",
    "DECISION_MAX_QUEUE": "256",
    "DECISION_ADMISSION_WAIT_S": "60",
}
BATCHED = "adapter_batched"
ONE_AT_A_TIME = "adapter_one_at_a_time"
SERVER = "llama_server"
ADAPTER_RUNS = {
    BATCHED: {"DECISION_MAX_SCORING_REQUESTS": str(SLOTS)},
    ONE_AT_A_TIME: {"DECISION_MAX_SCORING_REQUESTS": "1"},
}


# --- pure parts -------------------------------------------------------------------------------
def cmake_flags(
    cuda: bool,
    backend_dir: str | None = None,
    cpu_args: list[str] | None = None,
    architectures: str = "90",
) -> list[str]:
    """The one build's CMake flags, for the package root (see the module docstring): with
    `backend_dir`, the images' runtime CPU dispatch and backend modules installed there;
    without, the backends linked in with `cpu_args` (default: this machine's recipe)."""
    flags = ["-DCMAKE_BUILD_TYPE=Release", *llama_build.SERVER_CMAKE_ARGS]
    if cuda:
        flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={architectures}"]
        flags += CUDA_BUILD_SAVERS
    if backend_dir is not None:
        return flags + llama_build.image_cmake_args(backend_dir)
    return flags + (llama_build.local_cmake_args() if cpu_args is None else cpu_args)


def parse_env(words: list[str]) -> dict[str, str]:
    """`K=V` words (ADAPTER_ENV's, --adapter-env's) as a mapping; anything else is refused."""
    found = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise ValueError(f"not KEY=VALUE: {word!r}")
        found[key] = value
    return found


def ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 3) if ours > 0 and theirs > 0 else None


def level_row(clients: int, measured: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One level: each server's load result (bench.concurrency.LoadResult.as_dict) and the
    ratios that say how far each adapter run is from llama-server: `ours_over_server` is the
    adapter's decisions/s over llama-server's (above 1: faster), `server_over_ours` its inverse
    (the target: at most 1.2 at 64 clients)."""
    row: dict[str, Any] = {"clients": clients, **measured}
    server = measured.get(SERVER, {}).get("throughput_rps", 0.0)
    for name in (BATCHED, ONE_AT_A_TIME):
        if name in measured:
            ours = measured[name]["throughput_rps"]
            row[f"{name}_over_server"] = ratio(ours, server)
            row[f"server_over_{name}"] = ratio(server, ours)
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The target's verdict at the highest level measured with both sides."""
    both = [r for r in rows if r.get(f"server_over_{BATCHED}") is not None]
    if not both:
        return {"measured": False}
    top = max(both, key=lambda r: r["clients"])
    gap = top[f"server_over_{BATCHED}"]
    return {
        "measured": True,
        "clients": top["clients"],
        "adapter_batched_rps": top[BATCHED]["throughput_rps"],
        "llama_server_rps": top[SERVER]["throughput_rps"],
        "server_over_adapter_batched": gap,
        "target_max": TARGET_RATIO,
        "meets_target": top["clients"] == SLOTS and gap <= TARGET_RATIO,
    }


def level_seconds(remaining_s: float, levels_left: int, runs: int, wanted_s: float) -> float:
    """Seconds per level and server that fit the time left (0: no level fits any more)."""
    if levels_left <= 0 or runs <= 0:
        return 0.0
    fits = (remaining_s - RESERVE_S) / (levels_left * runs) - LEVEL_OVERHEAD_S
    if fits < MIN_LEVEL_S:
        return 0.0
    return round(min(wanted_s, fits), 2)


def server_arguments(threads: int, n_batch: int, slot_ctx: int, gpu: bool) -> ServerSettings:
    return GpuServerSettings(
        threads=threads,
        n_ctx=slot_ctx * SLOTS,
        n_batch=n_batch,
        parallel=SLOTS,
        n_gpu_layers=99 if gpu else 0,
    )


# --- the report ---------------------------------------------------------------------------
class Report:
    """The JSON report, rewritten whole (through a temporary file) at every change."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self.write()

    def update(self, **fields: Any) -> None:
        self.data.update(fields)
        self.write()

    def write(self) -> None:
        gpu_bisect.write_json(self.path, self.data)


def log(started: float, message: str) -> None:
    print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)


def copy_tail(source: Path, target: Path) -> None:
    if not source.is_file():
        return
    with source.open("rb") as handle:
        handle.seek(max(0, source.stat().st_size - LOG_TAIL_BYTES))
        target.write_bytes(handle.read())


# --- machine, build, model ----------------------------------------------------------------
def nvidia_smi(query: str) -> str | None:
    """nvidia-smi's CSV answer to `query` (e.g. `--query-gpu=name`), or None without one."""
    try:
        finished = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return finished.stdout.strip() or None


def gpu_line() -> str | None:
    return nvidia_smi("--query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap")


def gpu_memory_used() -> str | None:
    return nvidia_smi("--query-compute-apps=pid,used_memory")


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "gpu": gpu_line(),
        "load_average": os.getloadavg(),
    }


def unpack(kit: Path, work: Path) -> Path:
    """The kit's source, unpacked; returns its package folder (CMakeLists.txt, llama_cpp/,
    vendor/llama.cpp), refused unless it holds the engine's tree."""
    target = work / "src"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tarfile.open(kit / SOURCE_ARCHIVE) as archive:
        archive.extractall(target, filter="data")
    (top,) = target.iterdir()
    if not (top / ENGINE_MARKER).is_file():
        raise RuntimeError(
            f"{kit / SOURCE_ARCHIVE} holds no {ENGINE_MARKER}: not the engine's "
            f"{llama_build.ENGINE.build} tree; run `python -m research.gpu_batching.gpu_kit` again"
        )
    return top


def local_build() -> tuple[Path, Path]:
    """The local recipe's build (what `make` compiled): its libraries' folder and its
    llama-server (built by `make bench`, or `llama_build.py server`)."""
    entry = llama_build.cache_entry(llama_build.local_cmake_args())
    lib_dir = entry.build / "bin"
    beside = lib_dir / "llama-server"
    return lib_dir, beside if beside.is_file() else entry.server()


def server_binary(lib_dir: Path) -> Path:
    """llama-server of the build whose libraries are in lib_dir."""
    beside = lib_dir / "llama-server"
    if beside.is_file():
        return beside
    local_libs, local_server = local_build()
    return local_server if lib_dir == local_libs else beside


def cuda_toolkit() -> tuple[Path, str | None]:
    """The CUDA toolkit's folder and its nvcc (CUDA_HOME, CUDA_PATH, /usr/local/cuda, else the
    nvcc on PATH: a wrapper script there would hide the toolkit's folder)."""
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and (Path(candidate) / "bin" / "nvcc").is_file():
            return Path(candidate), str(Path(candidate) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    return (
        (Path(found).resolve().parent.parent, found) if found else (Path("/usr/local/cuda"), None)
    )


def site_roots() -> list[Path]:
    """Where this Python's packages live (NVIDIA's CUDA wheels install under nvidia/)."""
    import site

    roots = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    return [Path(r) for r in dict.fromkeys(roots) if r and Path(r).is_dir()]


def first(patterns: list[str], roots: list[Path]) -> Path | None:
    for root in roots:
        for pattern in patterns:
            found = sorted(root.glob(pattern))
            if found:
                return found[0]
    return None


DRIVER_DIRS = (
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib/wsl/lib",
)


def cuda_hints(
    toolkit: Path,
    roots: list[Path],
    headers: Path,
    driver_dirs: tuple[str, ...] = DRIVER_DIRS,
) -> tuple[list[str], list[str]]:
    """CMake flags for what CMake's FindCUDAToolkit would miss on an image whose toolkit holds
    nvcc and the runtime but not cuBLAS (a toolkit assembled from NVIDIA's pip wheels, as on
    this workplace's machines): cuBLAS from the pip wheels beside PyTorch (nvidia/cu13/ or
    nvidia/cublas/, whose libraries carry only versioned names find_library does not look for),
    and the driver's libcuda where no unversioned one or stub is on CMake's paths (without it,
    no VMM pool). The wheels' include folder holds other CUDA headers too, perhaps of another
    minor version than nvcc's: only its cuBLAS headers are linked into `headers`, the folder
    the build is told about. Returns the flags and the library folders for LD_LIBRARY_PATH."""
    flags: list[str] = []
    library_dirs: list[str] = []
    lib_names = ("lib64", "lib")
    if not (toolkit / "include" / "cublas_v2.h").is_file():
        header = first(["nvidia/*/include/cublas_v2.h"], roots)
        cublas = first(["nvidia/*/lib/libcublas.so*"], roots)
        cublas_lt = first(["nvidia/*/lib/libcublasLt.so*"], roots)
        if header and cublas and cublas_lt:
            headers.mkdir(parents=True, exist_ok=True)
            for found in header.parent.glob("cublas*.h"):
                link = headers / found.name
                if not link.exists():
                    link.symlink_to(found)
            flags += [
                f"-DCUDA_cublas_LIBRARY={cublas}",
                f"-DCUDA_cublasLt_LIBRARY={cublas_lt}",
                f"-DCMAKE_CUDA_FLAGS=-I{headers}",
            ]
            library_dirs.append(str(cublas.parent))
    toolkit_driver = [
        toolkit / lib / sub / "libcuda.so" for lib in lib_names for sub in ("", "stubs")
    ]
    if not any(p.exists() for p in toolkit_driver):
        driver = first(["libcuda.so", "libcuda.so.1"], [Path(d) for d in driver_dirs])
        if driver is not None:
            flags.append(f"-DCUDA_cuda_driver_LIBRARY={driver}")
        else:
            flags.append("-DGGML_CUDA_NO_VMM=ON")
    return flags, library_dirs


def build(
    source: Path, build_dir: Path, flags: list[str], jobs: int, log_path: Path
) -> dict[str, Any]:
    """Configure the package root `source` and build `llama` (with every backend module, which
    ggml depends on in a dynamic build) and `llama-server`; returns the steps' seconds and
    flags."""
    cmake = shutil.which("cmake") or "cmake"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    steps = {
        "configure": [cmake, "-S", str(source), "-B", str(build_dir), *generator, *flags],
        "build": [
            cmake,
            "--build",
            str(build_dir),
            "--target",
            "llama",
            "llama-server",
            "-j",
            str(jobs),
        ],
    }
    info: dict[str, Any] = {"flags": flags, "jobs": jobs, "generator": generator[1:] or "make"}
    with log_path.open("a") as out:
        for step, command in steps.items():
            out.write(f"$ {shlex.join(command)}\n")
            out.flush()
            began = time.monotonic()
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            RUNNING.append(process)
            try:
                returncode = process.wait()
            finally:
                RUNNING.remove(process)
            info[f"{step}_s"] = round(time.monotonic() - began, 1)
            if returncode != 0:
                raise RuntimeError(f"{step} failed (exit {returncode}); see {log_path}")
    return info


RUNNING: list[subprocess.Popen[bytes]] = []  # the build's step under way, stopped on an interrupt


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to a build step's process group (ninja then stops the compilers it started, each
    in a group of its own), SIGKILL after 5 s."""
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)


def timed_build(
    source: Path, build_dir: Path, flags: list[str], jobs: int, log: Path
) -> dict[str, Any]:
    began = time.monotonic()
    info = build(source, build_dir, flags, jobs, log)
    info["total_s"] = round(time.monotonic() - began, 1)
    return info


def sass_targets(library: Path) -> list[str] | None:
    """The GPU architectures a library holds machine code for (cuobjdump), e.g. ['sm_90']."""
    if not library.is_file() or not shutil.which("cuobjdump"):
        return None
    listing = subprocess.run(
        ["cuobjdump", "--list-elf", str(library)], capture_output=True, text=True, check=False
    ).stdout
    return sorted(set(re.findall(r"sm_\d+a?", listing)))


def make_model(args: argparse.Namespace, source: Path) -> dict[str, Any]:
    from research.gpu_batching.random_gguf import LLAMA3_TEMPLATE, write_model

    shape = TINY if args.cpu_smoke else Shape()
    if args.layers:
        shape = dataclasses.replace(shape, layers=args.layers)
    return write_model(
        args.work / GGUF,
        source / VOCAB,
        shape,
        chat_template=LLAMA3_TEMPLATE if args.chat_template else None,
        llama_cpp_source=source,
    )


def make_bisect_model(args: argparse.Namespace, source: Path) -> Path:
    """The bisection's 2-layer model (the benchmark's own where that is the tiny one)."""
    from research.gpu_batching.random_gguf import write_model

    work: Path = args.work
    if args.cpu_smoke and not args.layers:
        return work / GGUF
    path = work / BISECT_GGUF
    write_model(path, source / VOCAB, TINY, llama_cpp_source=source)
    return path


def build_flags(
    args: argparse.Namespace, build_dir: Path, work: Path
) -> tuple[list[str], list[str]]:
    """The build's flags (cmake_flags, the CUDA toolkit's hints, --cmake-arg) and the library
    folders the CUDA runtime needs on LD_LIBRARY_PATH."""
    cuda = not args.cpu_smoke
    backend_dir = str(build_dir / "bin") if args.backends == "dynamic" else None
    flags = cmake_flags(cuda, backend_dir)
    library_dirs: list[str] = []
    if cuda:
        toolkit, nvcc = cuda_toolkit()
        if nvcc:
            flags.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
        hints, library_dirs = cuda_hints(toolkit, site_roots(), work / "cublas")
        flags += hints
        library_dirs += [str(toolkit / "lib64"), str(toolkit / "lib")]
    return flags + args.cmake_arg, library_dirs


def start_build(
    args: argparse.Namespace,
    package_root: Path,
    build_log: Path,
    report: Report,
    started: float,
) -> tuple[Future[dict[str, Any]] | None, list[str]]:
    """The build under way in a thread (None with --prebuilt), and the CUDA library folders."""
    if args.prebuilt:
        report.update(build={"prebuilt": str(args.prebuilt)})
        return None, []
    build_dir = args.work / "build"
    flags, library_dirs = build_flags(args, build_dir, args.work)
    log(started, f"building llama + llama-server ({args.jobs} jobs): {shlex.join(flags)}")
    report.update(stage="building")
    building = ThreadPoolExecutor(1).submit(
        timed_build, package_root, build_dir, flags, args.jobs, build_log
    )
    return building, library_dirs


def finish_build(building: Future[dict[str, Any]], lib_dir: Path, backends: str) -> dict[str, Any]:
    """The build's record, once done: its seconds and flags, the GPU code it holds, and the
    CPU variants pruned as the images prune them (a dynamic build only)."""
    info = building.result()
    info["cuda_sass"] = sass_targets(lib_dir / "libggml-cuda.so")
    if backends == "dynamic":
        info["pruned"] = [path.name for path in llama_build.prune(lib_dir)]
        info["cpu_variants"] = sorted(p.name for p in lib_dir.glob("libggml-cpu-*.so"))
    return info


def bisect_budget(wanted_s: float, remaining_s: float, bisect_only: bool) -> float:
    """The bisection's seconds: what it wants, less what the measurement needs after it, but
    at least MIN_BISECT_S (the adapter cannot be measured on a build where its load crashes,
    so the bisection goes first), and never past the deadline."""
    left = remaining_s - RESERVE_S
    reserve = 0.0 if bisect_only else MEASURE_RESERVE_S
    return max(0.0, min(wanted_s, max(MIN_BISECT_S, left - reserve), left))


def run_bisect(
    args: argparse.Namespace,
    models: dict[str, Path],
    lib_dir: Path,
    env_paths: dict[str, str],
    report: Report,
    started: float,
    deadline: float,
) -> dict[str, str]:
    """gpu_bisect over this build, within its budget and what the measurement leaves; its
    verdict goes into the report. Returns the adapter settings it found to load."""
    budget = bisect_budget(args.bisect_budget_s, deadline - time.monotonic(), args.bisect_only)
    plan = gpu_bisect.Plan(
        models=models,
        dynamic=gpu_bisect.dynamic_build(lib_dir),
        env={**os.environ, **env_paths},
        work=args.work / "bisect",
        out=args.out,
        case_timeout_s=args.bisect_case_timeout_s,
        parallel=args.bisect_parallel,
        budget_s=budget,
    )
    report.update(stage="bisecting")
    log(started, f"bisecting the model load: {budget:.0f}s, {plan.parallel} cases at a time")
    found = gpu_bisect.run_bisect(plan, log=lambda message: log(started, message))
    report.update(
        bisect={
            "report": gpu_bisect.REPORT,
            "elapsed_s": found.get("elapsed_s"),
            "verdict": found.get("verdict"),
            "workaround_env": found.get("workaround_env", {}),
        }
    )
    workaround: dict[str, str] = found.get("workaround_env", {})
    return workaround


def apply_workaround(
    workaround: dict[str, str], adapter_env: dict[str, str], report: Report
) -> dict[str, str]:
    """The adapters' settings with the bisection's workaround under them: a setting given by
    hand (ADAPTER_ENV, --adapter-env) wins."""
    if not workaround:
        return adapter_env
    applied = {k: v for k, v in workaround.items() if k not in adapter_env}
    report.data.setdefault("notes", []).append(
        f"the bisection's workaround applied to every adapter: {applied or 'none (set by hand)'}"
    )
    report.update(adapter_env_extra=applied | adapter_env)
    return applied | adapter_env


def use_llama_cpp(package_root: Path, lib_dir: Path, library_dirs: list[str]) -> dict[str, str]:
    """Make this process and the adapters import the kit's `llama_cpp` bound to `lib_dir`;
    returns the variables the adapters get. `library_dirs` (CUDA's runtime and cuBLAS) go on
    LD_LIBRARY_PATH too, should the build's RUNPATH miss one."""
    os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_dir)
    sys.path.insert(0, str(package_root))
    path = [str(REPO / "container"), str(REPO), str(package_root)]
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    env = {"LLAMA_CPP_LIB_PATH": str(lib_dir), "PYTHONPATH": os.pathsep.join(path)}
    existing = [d for d in library_dirs if Path(d).is_dir()]
    if existing:
        ld = [*existing, os.environ.get("LD_LIBRARY_PATH", "")]
        os.environ["LD_LIBRARY_PATH"] = env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, ld))
    return env


# --- servers and load ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class GpuServerSettings(ServerSettings):
    """The adapter's settings (bench.llama_server.ServerSettings) plus every layer offloaded
    and continuous batching named (llama-server's default, said aloud)."""

    n_gpu_layers: int = 99

    def arguments(self) -> list[str]:
        return [*super().arguments(), "--n-gpu-layers", str(self.n_gpu_layers), "--cont-batching"]


def check_answers(
    adapter_urls: dict[str, str], server_url: str | None, tokens: list[int]
) -> dict[str, Any]:
    """One answer from each server, kept short: proof that each decodes what it should."""
    import httpx

    from bench.llama_server import completion_body
    from bench.workloads import load_decision

    seen: dict[str, Any] = {}
    with httpx.Client(timeout=120) as client:
        for name, url in adapter_urls.items():
            for _ in range(3):
                answer = client.post(url + "/invocations", json=load_decision())
            answer.raise_for_status()
            result = answer.json().get("result", answer.json())
            seen[name] = {k: result.get(k) for k in ("option_ids", "probabilities", "timing")}
        if server_url:
            body = completion_body(tokens, n_predict=1, cache_prompt=False)
            for _ in range(3):
                reply = client.post(server_url + "/completion", json=body)
            reply.raise_for_status()
            data = reply.json()
            seen[SERVER] = {
                "tokens_evaluated": data.get("tokens_evaluated"),
                "content": data.get("content"),
                "timings": data.get("timings"),
            }
    return seen


def client_shares(clients: int, processes: int) -> list[int]:
    """The clients spread over load processes, as evenly as can be (none left empty)."""
    count = max(1, min(clients, processes))
    return [clients // count + (1 if i < clients % count else 0) for i in range(count)]


def merge_loads(clients: int, results: list[Any]) -> dict[str, Any]:
    """One level's bench.concurrency.LoadResult from its processes' (their windows start
    within milliseconds of each other): answers pooled, the longest window."""
    from bench.concurrency import LoadResult

    merged = LoadResult(clients, max(r.elapsed_s for r in results))
    for result in results:
        merged.answered += result.answered
        merged.refused += result.refused
        merged.errors += result.errors
    return merged.as_dict() | {"client_processes": len(results)}


def load(
    pool: Any, processes: int, url: str, body: dict[str, Any], clients: int, seconds: float
) -> dict[str, Any]:
    """Closed-loop load (bench.concurrency.run_load) from several processes at once: at a
    thousand decisions/s one Python process sending them would measure itself."""
    from bench.concurrency import run_load

    shares = client_shares(clients, processes if pool is not None else 1)
    if len(shares) == 1:
        return merge_loads(clients, [run_load(url, body, clients, seconds)])
    return merge_loads(clients, pool.starmap(run_load, [(url, body, n, seconds) for n in shares]))


def measure(
    report: Report,
    urls: dict[str, str],
    bodies: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    deadline: float,
    started: float,
    copy_logs: Callable[[], None],
    pool: Any,
) -> None:
    runs = [name for name in (BATCHED, SERVER, ONE_AT_A_TIME) if name in urls]
    top = max(args.levels)
    if args.warmup_seconds > 0:
        for name in runs:
            log(started, f"warm-up: {name} at {top} clients for {args.warmup_seconds}s")
            load(pool, args.client_processes, urls[name], bodies[name], top, args.warmup_seconds)
    rows: list[dict[str, Any]] = []
    skipped: list[int] = []
    for index, clients in enumerate(args.levels):
        left = len(args.levels) - index
        seconds = level_seconds(deadline - time.monotonic(), left, len(runs), args.seconds)
        if seconds == 0.0 and ONE_AT_A_TIME in runs and len(runs) > 1:
            runs.remove(ONE_AT_A_TIME)  # the optional run goes first
            report.data.setdefault("notes", []).append(
                f"{ONE_AT_A_TIME} dropped from {clients} clients on: short of time"
            )
            seconds = level_seconds(deadline - time.monotonic(), left, len(runs), args.seconds)
        if seconds == 0.0:
            skipped = list(args.levels[index:])
            break
        measured = {}
        for name in runs:
            log(started, f"{name}: {clients} clients for {seconds}s")
            result = load(pool, args.client_processes, urls[name], bodies[name], clients, seconds)
            measured[name] = result
            log(
                started,
                f"  {result['throughput_rps']} decisions/s, p50 "
                f"{result['latency'].get('p50_ms')} ms, 503s {result['refused_503']}, "
                f"errors {result['errors']}",
            )
        rows.append(level_row(clients, measured))
        rows.sort(key=lambda r: r["clients"])
        report.update(rows=rows, summary=summary(rows), skipped_levels=skipped)
        copy_logs()
    report.update(rows=rows, summary=summary(rows), skipped_levels=skipped)


@contextlib.contextmanager
def servers(
    args: argparse.Namespace,
    gguf: Path,
    binary: Path,
    adapter_env: dict[str, str],
    work: Path,
    report: Report,
    started: float,
) -> Iterator[dict[str, str]]:
    from bench.llama_server import running_llama_server
    from launcher import running_adapter

    urls: dict[str, str] = {}
    logs: dict[str, Path] = {}
    settings = server_arguments(args.threads, args.n_batch, args.slot_ctx, not args.cpu_smoke)
    with contextlib.ExitStack() as stack:
        log(started, f"starting llama-server: {shlex.join(settings.arguments())}")
        server = stack.enter_context(running_llama_server(binary, gguf, settings, work))
        urls[SERVER], logs[SERVER] = server.url, server.log_path
        runs = [BATCHED] if args.no_one_at_a_time else [BATCHED, ONE_AT_A_TIME]
        environments = {}
        for name in runs:
            env = {
                **ADAPTER_BASE,
                "DECISION_MODEL_PATH": str(gguf),
                "DECISION_N_GPU_LAYERS": "0" if args.cpu_smoke else "-1",
                "DECISION_N_THREADS": str(args.threads),
                "DECISION_N_CTX": str(args.slot_ctx),
                "DECISION_N_BATCH": str(args.n_batch),
                **ADAPTER_RUNS[name],
                **adapter_env,
            }
            environments[name] = {k: v for k, v in env.items() if k.startswith("DECISION_")}
            log(started, f"starting {name}")
            try:
                adapter = stack.enter_context(running_adapter(work, ready_timeout=300, **env))
            except Exception as error:  # noqa: BLE001 - recorded; llama-server is still measured
                log(started, f"{name} did not start: {error!r}"[:2000])
                report.data.setdefault("adapter_failures", {})[name] = repr(error)[-4000:]
                continue
            urls[name], logs[name] = adapter.url, adapter.log_path
        report.update(
            adapter_environments=environments,
            llama_server_arguments=settings.arguments(),
            gpu_memory_after_start=gpu_memory_used(),
        )
        yield urls | {f"{k}_log": str(v) for k, v in logs.items()}


TOKENS_PROBE = """
import json, sys
from pathlib import Path
import llama_cpp
from bench.decision_concurrency import decision_tokens
tokens = decision_tokens(Path(sys.argv[1]))
print(json.dumps({"tokens": tokens, "llama_cpp": {
    "package": str(Path(llama_cpp.__file__).parent),
    "version": llama_cpp.__version__,
    "system_info": llama_cpp.llama_print_system_info().decode(errors="replace"),
}}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.gpu_batching.gpu_batching", description=__doc__
    )
    parser.add_argument("--kit", type=Path, default=KIT)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu-batching"))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")))
    parser.add_argument("--cpu-smoke", action="store_true", help="here, no GPU: see docstring")
    parser.add_argument("--prebuilt", type=Path, help="a build's bin/ (skips the build)")
    parser.add_argument("--build", action="store_true", help="with --cpu-smoke: build (CPU)")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--seconds", type=float, default=6.0, help="per level and server")
    parser.add_argument("--warmup-seconds", type=float, default=2.0)
    parser.add_argument("--deadline-s", type=float, default=540.0, help="from start, all in")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--client-processes", type=int, default=4, help="load generators")
    parser.add_argument("--n-batch", type=int, default=2048)
    parser.add_argument("--slot-ctx", type=int, default=1024, help="context per request/slot")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--layers", type=int, help="override the model's layer count")
    parser.add_argument("--chat-template", action="store_true", help="Llama 3's template")
    parser.add_argument("--no-one-at-a-time", action="store_true")
    parser.add_argument(
        "--backends",
        choices=("dynamic", "linked"),
        default="dynamic",
        help="dynamic: the images' backend modules and CPU variants; linked: the local recipe's",
    )
    parser.add_argument("--no-bisect", action="store_true", help="measure only")
    parser.add_argument("--bisect-only", action="store_true", help="build, bisect, stop")
    parser.add_argument("--bisect-budget-s", type=float, default=gpu_bisect.BUDGET_S)
    parser.add_argument(
        "--bisect-case-timeout-s", type=float, default=gpu_bisect.CASE_TIMEOUT_S, help="each"
    )
    parser.add_argument(
        "--bisect-parallel", type=int, default=gpu_bisect.PARALLEL, help="cases at once"
    )
    parser.add_argument("--adapter-env", action="append", default=[], metavar="K=V")
    parser.add_argument(
        "--cmake-arg",
        action="append",
        default=[],
        help="an extra CMake flag: --cmake-arg=-DGGML_CUDA_FA=OFF",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    deadline = started + args.deadline_s
    if args.cpu_smoke:
        if not args.build:
            args.prebuilt = args.prebuilt or local_build()[0]
        if args.levels == ",".join(map(str, LEVELS)):
            args.levels = "1,2"
        args.seconds = min(args.seconds, 1.0)
        args.warmup_seconds = min(args.warmup_seconds, 1.0)
        args.threads = min(args.threads, 2)
        args.client_processes = min(args.client_processes, 2)
        args.n_batch = min(args.n_batch, 512)
    args.levels = [int(level) for level in str(args.levels).split(",")]
    adapter_env = parse_env(shlex.split(os.environ.get("ADAPTER_ENV", "")) + args.adapter_env)

    # timeout(1) and the device's limit stop with a signal: unwind, so servers stop and the
    # report and logs are written.
    def interrupted(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    report = Report(
        args.out / REPORT,
        {
            "what": "decisions/s at closed-loop clients: adapter vs llama-server, one GPU",
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "mode": "cpu-smoke" if args.cpu_smoke else "gpu",
            "machine": machine(),
            "levels": args.levels,
            "seconds_per_level_wanted": args.seconds,
            "threads": args.threads,
            "n_batch": args.n_batch,
            "per_request_context": args.slot_ctx,
            "llama_server_slots": SLOTS,
            "adapter_env_extra": adapter_env,
            "stage": "starting",
        },
    )
    build_log = args.work / "build.log"
    logs: dict[str, str] = {}

    def copy_logs() -> None:
        copy_tail(build_log, args.out / "build-log-tail.txt")
        for name in (BATCHED, ONE_AT_A_TIME, SERVER):
            if f"{name}_log" in logs:
                copy_tail(Path(logs[f"{name}_log"]), args.out / f"{name}-log-tail.txt")

    try:
        log(started, f"machine: {report.data['machine']}")
        if (args.kit / "kit.json").is_file():
            report.update(kit=json.loads((args.kit / "kit.json").read_text()))
        package_root = unpack(args.kit, args.work)
        source = package_root / "vendor" / "llama.cpp"
        report.update(stage="unpacked", engine=llama_build.ENGINE.build)
        building, library_dirs = start_build(args, package_root, build_log, report, started)
        # The models are written while the build runs: one core of Python against ninja's.
        log(started, "writing the random-weight models")
        model = make_model(args, source)
        bisect_gguf = make_bisect_model(args, source)
        report.update(model=model, bisect_model=str(bisect_gguf))
        log(started, f"model: {model['parameters'] / 1e9:.3f} B parameters in {model['seconds']}s")
        lib_dir = args.prebuilt or args.work / "build" / "bin"
        if building is not None:
            try:
                report.update(build=finish_build(building, lib_dir, args.backends))
            finally:
                copy_logs()
            log(started, f"built in {report.data['build']['total_s']}s")
        report.update(stage="models written")
        adapter_env_paths = use_llama_cpp(package_root, lib_dir, library_dirs)
        gguf = args.work / GGUF
        if not args.no_bisect:
            models = {"tiny": bisect_gguf} | ({"bench": gguf} if bisect_gguf != gguf else {})
            fix = run_bisect(args, models, lib_dir, adapter_env_paths, report, started, deadline)
            adapter_env = apply_workaround(fix, adapter_env, report)
        if args.bisect_only:
            report.update(stage="done")
            return 0

        from bench.llama_server import completion_body
        from bench.workloads import load_decision

        # In a process of its own, the GPU hidden: llama.cpp crashed this one on the device
        # (a segmentation fault after the CUDA build; faulthandler's trace goes to the report).
        probe = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-c", TOKENS_PROBE, str(gguf)],
            capture_output=True,
            text=True,
            env={**os.environ, **adapter_env_paths, "CUDA_VISIBLE_DEVICES": ""},
            timeout=120,
        )
        if probe.returncode != 0:
            report.update(tokens_probe_stderr=probe.stderr[-4000:])
            raise RuntimeError(
                f"the token probe failed ({probe.returncode}): {probe.stderr[-500:]}"
            )
        probed = json.loads(probe.stdout.strip().splitlines()[-1])
        tokens = probed["tokens"]
        report.update(
            llama_cpp=probed["llama_cpp"],
            prompt_tokens=len(tokens),
            request={
                "adapter": load_decision(),
                "llama_server": completion_body(tokens, n_predict=1, cache_prompt=False)
                | {"prompt": f"<the adapter's {len(tokens)} token ids>"},
            },
            stage="servers",
        )
        bodies = {
            BATCHED: load_decision(),
            ONE_AT_A_TIME: load_decision(),
            SERVER: completion_body(tokens, n_predict=1, cache_prompt=False),
        }
        binary = server_binary(lib_dir)
        with servers(
            args, gguf, binary, adapter_env_paths | adapter_env, args.work, report, started
        ) as found:
            logs.update({k: v for k, v in found.items() if k.endswith("_log")})
            urls = {k: v for k, v in found.items() if not k.endswith("_log")}
            adapter_urls = {k: v for k, v in urls.items() if k != SERVER}
            report.update(answers=check_answers(adapter_urls, urls[SERVER], tokens))
            copy_logs()
            report.update(stage="measuring", client_processes=args.client_processes)
            processes = multiprocessing.get_context("spawn")
            with processes.Pool(args.client_processes) as pool:
                measure(
                    report,
                    {
                        k: v + ("/completion" if k == SERVER else "/invocations")
                        for k, v in urls.items()
                    },
                    bodies,
                    args,
                    deadline,
                    started,
                    copy_logs,
                    pool,
                )
        report.update(stage="done")
    except BaseException as error:
        report.update(error=f"{type(error).__name__}: {error}"[-4000:])
        log(started, f"stopped: {type(error).__name__}: {error}")
        if not isinstance(error, Exception | KeyboardInterrupt):
            raise
        return 1
    finally:
        for process in list(RUNNING):  # an interrupted build: ninja stops its compilers
            stop_group(process)
        report.update(elapsed_s=round(time.monotonic() - started, 1))
        copy_logs()
        log(started, f"report: {report.path}")
    print(json.dumps(report.data.get("summary", {}), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
