"""Decisions/s on one GPU at 1-64 closed-loop clients: the adapter scoring decisions together in
shared batches (DECISION_MAX_SCORING_REQUESTS=64), the adapter one at a time, and llama-server
with 64 slots and continuous batching, over the very prompt tokens the adapter decodes (the
load decision of `make bench`'s (d)), one token each, prompt caches off (issue 57 item 6;
target: the batched adapter within 1.2x of llama-server's decisions/s at 64 clients).

It runs on the device machine (one H200, 16 cores, nvcc, no package registry) from the kit that
`python -m bench.gpu_kit` assembles here (`.gpukit/`, carried with the working tree):

1. Build. The kit's trimmed llama.cpp source (the pinned llama-cpp-python sdist's vendor/
   llama.cpp) is configured once with CUDA for sm_90 and built with ninja on every core, targets
   `llama` and `llama-server` only: ONE build serves llama-server and the adapter, whose
   llama-cpp-python is the sdist's own pure-Python `llama_cpp` package on PYTHONPATH, pointed
   at the built libraries by its LLAMA_CPP_LIB_PATH (it loads libllama.so from there; libggml*
   come through libllama's RUNPATH, the build folder). Not `pip wheel` of the sdist: its
   CMakeLists builds mtmd and no llama-server, so llama-server would need a second CUDA build of
   the same kernels, and the build is the longest step of the run. Flags: llama-server's bench
   flags (bench.llama_server_build: shared libraries, no curl/OpenSSL/tests/examples/web UI),
   the CPU recipe of container/llama_build.py (the machine's x86 features less AMX), and for
   CUDA: `CMAKE_CUDA_ARCHITECTURES=90`, FlashAttention kernels for an F16 KV cache only
   (`GGML_CUDA_FA_QUANTS=f16-f16`, the cache type both servers use), no fatbin compression and
   no NCCL: each shortens the build without changing a kernel this run uses. Where the
   toolkit lacks cuBLAS (one assembled from NVIDIA's pip wheels), it comes from the wheels
   beside PyTorch (cuda_hints).
2. A random-weight llama GGUF shaped like Llama 3.2 1B with Llama 3's real vocabulary
   (bench.random_gguf), written with the kit's gguf-py while the build runs.
3. The servers, all at once on the one GPU (each holds its own copy of the model), every layer
   offloaded: the adapter (`python -m decision_adapter serve`, as `make run`) with
   DECISION_N_GPU_LAYERS=-1, its state cache off, a queue of 256 and a 60 s admission wait (64
   clients wait, not 503); llama-server with `-ngl 99 -np 64 -cb -c 64 x <per-request
   context>`. Same threads, batch size and per-request context on both.
4. Closed-loop load (bench.concurrency.run_load, from 4 processes whose answers are pooled)
   at each level, each server in turn, after one unmeasured warm-up at the highest level. 64
   clients are measured first (the target), then the rest upward. Each level's seconds shrink
   to fit the time left (--deadline-s); the one-at-a-time adapter is dropped first when time
   runs short.

`$OUT/gpu-batching.json` is rewritten after every step and level, and the servers' and the
build's log tails are copied beside it, so a run stopped by its time limit still returns what
it measured. `--cpu-smoke` runs the same path here: the kit's source and llama_cpp package, a
tiny model, no GPU, the already built CPU llama-server's libraries (--prebuilt), levels 1 and 2
for a second each.

The device command (one call, well under 2,000 characters; `carry: [".gpukit"]`, `timeout_s:
600`), on one line:

    set -o pipefail; python3 -m pip install -q --no-index --no-deps --no-compile
    --no-cache-dir --upgrade --target /tmp/site .gpukit/whl/*.whl && export
    PYTHONPATH=/tmp/site || exit; nvidia-smi -L; PYTHONUNBUFFERED=1 timeout 560 python3 -m
    bench.gpu_batching --out "$OUT" --deadline-s 540 2>&1 | tee "$OUT/log.txt"

`ADAPTER_ENV="K=V K=V"` before `timeout` (or `--adapter-env K=V`) adds adapter settings to
every adapter run; `--no-one-at-a-time`, `--levels`, `--seconds`, `--n-batch`, `--threads`
and `--client-processes` change the plan. Files back under $OUT: gpu-batching.json, log.txt,
build-log-tail.txt and one log tail per server (6 of the 8 allowed).
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO / "container", REPO):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import llama_build  # noqa: E402

from bench.llama_server import ServerSettings  # noqa: E402
from bench.llama_server_build import CMAKE_FLAGS  # noqa: E402
from bench.random_gguf import TINY, Shape  # noqa: E402

KIT = REPO / ".gpukit"
SOURCE_ARCHIVE = "llama-src.tar.xz"
VOCAB = Path("models") / "ggml-vocab-llama-bpe.gguf"
REPORT = "gpu-batching.json"
GGUF = "random-llama.gguf"
LEVELS = (64, 1, 2, 4, 8, 16, 32)
SLOTS = 64
TARGET_RATIO = 1.2  # llama-server decisions/s over the batched adapter's, at most, at 64
CPU_SMOKE_SERVER = Path.home() / ".cache/decision-bench/llama-server-0.3.36/build/bin"
LOG_TAIL_BYTES = 256 << 10
LEVEL_OVERHEAD_S = 1.5  # per level and server: the warm request, the last answers, asyncio
MIN_LEVEL_S = 1.0
RESERVE_S = 10.0  # stopping the servers and writing the report
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
    cuda: bool, cpu_args: list[str] | None = None, architectures: str = "90"
) -> list[str]:
    """The one build's CMake flags (see the module docstring)."""
    flags = [
        *CMAKE_FLAGS,
        "-DLLAMA_BUILD_TOOLS=ON",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_BUILD_APP=OFF",
    ]
    if cuda:
        flags += [
            "-DGGML_CUDA=ON",
            f"-DCMAKE_CUDA_ARCHITECTURES={architectures}",
            "-DGGML_CUDA_FA_QUANTS=f16-f16",
            "-DGGML_CUDA_COMPRESSION_MODE=none",
            "-DGGML_CUDA_NCCL=OFF",
        ]
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
    (the issue's target: at most 1.2 at 64 clients)."""
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(self.data, indent=2) + "\n")
        partial.replace(self.path)


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
    """The kit's source, unpacked; returns the sdist's top folder (llama_cpp/, vendor/)."""
    target = work / "src"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tarfile.open(kit / SOURCE_ARCHIVE) as archive:
        archive.extractall(target, filter="data")
    (top,) = target.iterdir()
    return top


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


def build(source: Path, build_dir: Path, flags: list[str], jobs: int, log_path: Path) -> dict:
    """Configure and build `llama` and `llama-server`; returns the steps' seconds and flags."""
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


RUNNING: list[subprocess.Popen] = []  # the build's step under way, stopped on an interrupt


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to a build step's process group (ninja then stops the compilers it started, each
    in a group of its own), SIGKILL after 5 s."""
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)


def timed_build(source: Path, build_dir: Path, flags: list[str], jobs: int, log: Path) -> dict:
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
    from bench.random_gguf import LLAMA3_TEMPLATE, write_model

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


def check_answers(adapter_urls: dict[str, str], server_url: str | None, tokens: list[int]) -> dict:
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
    pool: Any, processes: int, url: str, body: dict, clients: int, seconds: float
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
    bodies: dict[str, dict],
    args: argparse.Namespace,
    deadline: float,
    started: float,
    copy_logs,
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
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_batching", description=__doc__)
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
            args.prebuilt = args.prebuilt or CPU_SMOKE_SERVER
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
        report.update(stage="unpacked")
        library_dirs: list[str] = []
        building = None
        if args.prebuilt:
            lib_dir = args.prebuilt
            report.update(build={"prebuilt": str(lib_dir)})
        else:
            cuda = not args.cpu_smoke
            flags = cmake_flags(cuda)
            if cuda:
                toolkit, nvcc = cuda_toolkit()
                if nvcc:
                    flags.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
                hints, library_dirs = cuda_hints(toolkit, site_roots(), args.work / "cublas")
                flags += hints
                library_dirs += [str(toolkit / "lib64"), str(toolkit / "lib")]
            flags += args.cmake_arg
            log(started, f"building llama + llama-server ({args.jobs} jobs)")
            report.update(stage="building")
            building = ThreadPoolExecutor(1).submit(
                timed_build, source, args.work / "build", flags, args.jobs, build_log
            )
        # The model is written while the build runs: one core of Python against ninja's.
        log(started, "writing the random-weight model")
        model = make_model(args, source)
        report.update(model=model)
        log(started, f"model: {model['parameters'] / 1e9:.3f} B parameters in {model['seconds']}s")
        if building is not None:
            try:
                info = building.result()
            finally:
                copy_logs()
            lib_dir = args.work / "build" / "bin"
            info["cuda_sass"] = sass_targets(lib_dir / "libggml-cuda.so")
            report.update(build=info)
            log(started, f"built in {info['total_s']}s")
        report.update(stage="model written")
        adapter_env_paths = use_llama_cpp(package_root, lib_dir, library_dirs)
        gguf = args.work / GGUF

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
        binary = lib_dir / "llama-server"
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
