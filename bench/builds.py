"""`python -m bench.builds`: the same decision on each way of building llama.cpp, on this machine.

Experiment (a) (one decision over HTTP against llama.cpp's own prefill of the same tokens) and
the floor's prefill of a 1,024-token prompt, for:
- `recipe`: the installed llama-cpp-python, built by container/llama_build.py for this CPU;
- `recipe_no_extra_buffers`: the same with llama.cpp's extra buffer types off (no repacking;
  the adapter's DECISION_EXTRA_BUFFER_TYPES=false, the floor likewise);
- `native_no_amx`: llama.cpp's default `-march=native`, with gcc told to leave AMX out;
- `avx2_only`: the flags the CPU image used before the recipe (AVX, AVX2, FMA, F16C);
- `image_dispatch`: the images' runtime CPU dispatch (every variant, AMX pruned), whichever
  variant it picks here.
Each other build is compiled once from the llama.cpp source the installed llama-cpp-python
vendors (libllama and its ggml libraries only) into ~/.cache/decision-bench/builds/ and loaded
through LLAMA_CPP_LIB_PATH, by the adapter and the floor alike, in a child process per build;
the result records which CPU backend each really ran (the adapter's start-up line).

Writes bench/results/<date>-<machine>-builds.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import httpx
import llama_build

from bench.llama_server_build import (
    CMAKE_FLAGS,
    BuildFailed,
    _step,
    cache_root,
    installed_version,
    vendored_llama_cpp,
)
from bench.workloads import THREADS, machine_name

RESULTS = Path(__file__).resolve().parent / "results"
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
LONG_PROMPT_TOKENS = 1024
LONG_REPEATS = 5


def build_flags(name: str, directory: Path) -> list[str] | None:
    """The CMake flags of each compared build (None: the installed one)."""
    return {
        "recipe": None,
        "recipe_no_extra_buffers": None,
        "native_no_amx": [
            "-DGGML_NATIVE=ON",
            f"-DCMAKE_C_FLAGS={NO_AMX}",
            f"-DCMAKE_CXX_FLAGS={NO_AMX}",
        ],
        "avx2_only": [
            "-DGGML_NATIVE=OFF",
            "-DGGML_AVX=ON",
            "-DGGML_AVX2=ON",
            "-DGGML_FMA=ON",
            "-DGGML_F16C=ON",
        ],
        "image_dispatch": llama_build.image_cmake_args(str(directory / "build" / "bin")),
    }[name]


BUILDS = ("recipe", "recipe_no_extra_buffers", "native_no_amx", "avx2_only", "image_dispatch")


def ensure_libraries(name: str) -> Path | None:
    """The directory holding the build's libllama (None: the installed package's)."""
    version = installed_version()
    directory = cache_root() / "builds" / f"{name}-{version}"
    flags = build_flags(name, directory)
    if flags is None:
        return None
    binaries = directory / "build" / "bin"
    flags_file = directory / "build" / "bench-cmake-flags"
    everything = [*CMAKE_FLAGS, "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_TOOLS=OFF", *flags]
    if (binaries / "libllama.so").is_file() and _read(flags_file) == "\n".join(everything):
        return binaries
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "build.log"
    source = vendored_llama_cpp()
    _step(
        "cmake configure",
        ["cmake", "-S", str(source), "-B", str(directory / "build"), *everything],
        log,
    )
    _step(
        "cmake build",
        [
            "cmake",
            "--build",
            str(directory / "build"),
            "--target",
            "llama",
            "-j",
            str(os.cpu_count() or 1),
        ],
        log,
    )
    if name == "image_dispatch":
        llama_build.prune(binaries)
    flags_file.write_text("\n".join(everything))
    return binaries


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def measure(name: str, repeats: int) -> dict:
    """In this process (whose LLAMA_CPP_LIB_PATH, if any, names the build): (a) and the long
    prefill, with the adapter started from here so it loads the same libraries."""
    from bench.experiments import Plan, single_decision
    from bench.floor import Floor
    from bench.timing import REQUEST_TIMEOUT_S, Budget, Caller, median_ms
    from bench.workloads import OPTIONS, QUESTIONS, SHORT_STATE, prompt_tokens
    from launcher import running_adapter
    from launcher.models import local_model

    gguf = local_model("gemma3")
    extra = name != "recipe_no_extra_buffers"
    tokens, long_tokens = _tokens(gguf, SHORT_STATE, QUESTIONS[0], OPTIONS, prompt_tokens)
    env = {
        "DECISION_N_THREADS": str(THREADS),
        "DECISION_STATE_CACHE_BYTES": "0",
        "DECISION_MODEL_PATH": str(gguf),
        "DECISION_EXTRA_BUFFER_TYPES": str(extra).lower(),
    }
    with (
        tempfile.TemporaryDirectory() as tmp,
        httpx.Client(timeout=REQUEST_TIMEOUT_S) as client,
        running_adapter(Path(tmp), **env) as adapter,
        Floor(gguf, extra_buffer_types=extra) as floor,
    ):
        single = single_decision(
            Caller(client),
            f"{adapter.url}/invocations",
            Plan(single_repeats=repeats),
            Budget(total_s=3600),
            tokens,
            floor,
        )
        for _ in range(2):
            floor.prefill(long_tokens)  # warm-up
        long = [floor.prefill(long_tokens) for _ in range(LONG_REPEATS)]
        (loaded,) = [
            json.loads(line)
            for line in adapter.log().splitlines()
            if line.startswith("{") and '"model_loaded"' in line
        ]
    single.pop("samples_ms")
    return {
        "build": name,
        "llama_cpp_lib_path": os.environ.get("LLAMA_CPP_LIB_PATH"),
        "cpu_backend": loaded["cpu_backend"],
        "single_decision": single,
        "llama_cpp_prefill_1024": {
            "prompt_tokens": len(long_tokens),
            "median_ms": median_ms(long),
            "tokens_per_s": round(len(long_tokens) / statistics.median(long), 1),
        },
    }


def _tokens(gguf: Path, state, question, options, prompt_tokens) -> tuple[list[int], list[int]]:
    from decision_adapter.engine import Engine, EngineConfig
    from decision_adapter.prompts import PromptRenderer

    engine = Engine(gguf, EngineConfig(8192, 512, THREADS, 0, 4))
    try:
        renderer = PromptRenderer(engine)
        short = prompt_tokens(renderer, state, question, options)
        filler = " ".join(
            f"line {n}: the printer on floor {n % 7} is out of paper." for n in range(400)
        )
        long = prompt_tokens(renderer, filler, question, options)[:LONG_PROMPT_TOKENS]
    finally:
        engine.close()
    return short, long


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.builds", description=__doc__)
    parser.add_argument("--builds", nargs="+", choices=BUILDS, default=list(BUILDS))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--measure", choices=BUILDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.repeats)))
        return 0
    runs = []
    for name in args.builds:
        try:
            libraries = ensure_libraries(name)
        except BuildFailed as error:
            runs.append({"build": name, "skipped_reason": str(error)})
            continue
        env = dict(os.environ)
        if libraries is not None:
            env["LLAMA_CPP_LIB_PATH"] = str(libraries)
        print(f"measuring {name}", flush=True)
        finished = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.builds",
                "--measure",
                name,
                "--repeats",
                str(args.repeats),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if finished.returncode != 0:
            runs.append({"build": name, "skipped_reason": finished.stderr[-2000:]})
            continue
        runs.append(json.loads(finished.stdout.strip().splitlines()[-1]))
        print(json.dumps(runs[-1]["single_decision"]), flush=True)
    now = datetime.now(timezone.utc)
    result = {
        "measured_at": now.isoformat(timespec="seconds"),
        "machine": machine_name(),
        "cpu_flags_x86_features": llama_build.local_features(llama_build.cpu_flags()),
        "threads": THREADS,
        "llama_cpp_python": installed_version(),
        "builds": runs,
    }
    path = RESULTS / f"{now:%Y-%m-%d}-{machine_name()}-builds.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
