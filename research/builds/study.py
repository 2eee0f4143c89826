"""`python -m research.builds`: the same decision on each way of building llama.cpp, on the
machine it runs on.

Experiment (a) (one decision over HTTP against llama.cpp's own prefill of the same tokens) and
the floor's prefill of a 1,024-token prompt, for:
- `recipe`: the installed llama-cpp-python, built by container/llama_build.py for this CPU;
- `recipe_no_extra_buffers`: the same with llama.cpp's extra buffer types off (no repacking;
  the adapter's DECISION_EXTRA_BUFFER_TYPES=false, the floor likewise);
- `native_no_amx`: llama.cpp's default `-march=native`, with gcc told to leave AMX out;
- `avx2_only`: the flags the CPU image used before the recipe (AVX, AVX2, FMA, F16C);
- `image_dispatch`: the CPU image's own libraries (runtime CPU dispatch, every variant but
  AMX's), copied out of the image `make image-test` built (--image), whichever variant they
  pick here.
`native_no_amx` and `avx2_only` are compiled once from the engine's llama.cpp tree
(libllama and its ggml libraries only) into
~/.cache/decision-bench/builds/. Each build is loaded through LLAMA_CPP_LIB_PATH, by the adapter
and the floor alike, in a child process per build; the result records which CPU backend each
really ran (the adapter's start-up line).

Writes results/<date>-<machine>-builds.json here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import httpx
import llama_build

from bench.llama_server_build import (
    CMAKE_FLAGS,
    BuildFailed,
    _step,
    installed_version,
    vendored_llama_cpp,
)
from bench.workloads import THREADS, machine_name
from launcher import cache_root

RESULTS = Path(__file__).resolve().parent / "results"
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
LONG_PROMPT_TOKENS = 1024
LONG_REPEATS = 5
IMAGE = "decision-adapter:cpu-standin"  # tests/support/cpu_image.py's tag


# The builds compiled here, by their CMake flags (the others are installed or copied).
COMPILED = {
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
}
BUILDS = ("recipe", "recipe_no_extra_buffers", "native_no_amx", "avx2_only", "image_dispatch")


def image_libraries(image: str) -> Path:
    """The image's llama_cpp/lib, copied out of it (the image stays as it is)."""
    destination = cache_root() / "builds" / "image_dispatch"
    shutil.rmtree(destination, ignore_errors=True)
    destination.mkdir(parents=True)
    docker = os.environ.get("DOCKER", "docker")
    # Where the image's venv keeps its packages (its Python's version is the base image's).
    purelib = subprocess.run(
        [
            docker,
            "run",
            "--rm",
            "--entrypoint",
            "/opt/venv/bin/python",
            image,
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    container = subprocess.run(
        [docker, "create", image], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        inside = f"{container}:{purelib}/llama_cpp/lib/."
        subprocess.run([docker, "cp", inside, str(destination)], check=True)
    finally:
        subprocess.run([docker, "rm", container], capture_output=True, check=False)
    return destination


def ensure_libraries(name: str, image: str) -> Path | None:
    """The directory holding the build's libllama (None: the installed package's)."""
    if name == "image_dispatch":
        return image_libraries(image)
    if name not in COMPILED:
        return None
    directory = cache_root() / "builds" / f"{name}-{installed_version()}"
    flags = COMPILED[name]
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
    from decision_adapter.model.engine import Engine, EngineConfig
    from decision_adapter.scoring.prompts import PromptRenderer

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


MARKERS = ("<!-- research.builds report: begin -->", "<!-- research.builds report: end -->")
SIMD = ("AVX2", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI", "AMX_INT8")


def newest_result(directory: Path = RESULTS) -> Path:
    return max(directory.glob("*-builds.json"))


def report(result: dict) -> str:
    """The comparison as a Markdown table, the recipe's figures the reference."""
    runs = [run for run in result["builds"] if "single_decision" in run]
    base = next(run for run in runs if run["build"] == "recipe")
    base_rate = base["llama_cpp_prefill_1024"]["tokens_per_s"]
    lines = [
        f"Measured {result['measured_at'][:10]} on {result['machine']} ({result['threads']} "
        f"threads; CPU features {', '.join(result['cpu_flags_x86_features'])}), llama-cpp-python "
        f"{result['llama_cpp_python']}, the bundled model.",
        "",
        "| build | CPU backend | extra buffers in use | (a) HTTP | (a) floor | (a) ratio "
        "| prefill of 1,024 tokens | vs recipe |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        backend = run["cpu_backend"]
        simd = [feature for feature in backend["features"] if feature in SIMD]
        single = run["single_decision"]
        rate = run["llama_cpp_prefill_1024"]["tokens_per_s"]
        lines.append(
            f"| `{run['build']}` | {backend['variant']}: {', '.join(simd)} "
            f"| {', '.join(backend['extra_buffer_types_in_use']) or 'none'} "
            f"| {single['http_median_ms']:.0f} ms | {single['llama_cpp_prefill_median_ms']:.0f} ms "
            f"| {single['overhead_ratio']:.2f}x | {rate:.0f} tokens/s | {rate / base_rate:.2f}x |"
        )
    for run in result["builds"]:
        if "skipped_reason" in run:
            lines.append(f"| `{run['build']}` | not measured: {run['skipped_reason'][:120]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.builds", description=__doc__)
    parser.add_argument("--builds", nargs="+", choices=BUILDS, default=list(BUILDS))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--image", default=IMAGE, help="the CPU image (image_dispatch)")
    parser.add_argument("--measure", choices=BUILDS, help=argparse.SUPPRESS)
    parser.add_argument("--report", action="store_true", help="print the newest result's table")
    args = parser.parse_args(argv)
    if args.report:
        print(report(json.loads(newest_result().read_text())), end="")
        return 0
    if args.measure:
        print(json.dumps(measure(args.measure, args.repeats)))
        return 0
    runs = []
    for name in args.builds:
        try:
            libraries = ensure_libraries(name, args.image)
        except (BuildFailed, subprocess.CalledProcessError) as error:
            runs.append({"build": name, "skipped_reason": str(error)})
            continue
        env = dict(os.environ)
        # Absolute: the image's build runs in another working directory (below).
        env["PYTHONPATH"] = os.pathsep.join(
            str(Path(entry).resolve())
            for entry in env.get("PYTHONPATH", "").split(os.pathsep)
            if entry
        )
        if libraries is not None:
            env["LLAMA_CPP_LIB_PATH"] = str(libraries)
        print(f"measuring {name}", flush=True)
        # The image's build looks for its CPU variants in the image's venv, absent here, and
        # then in the working directory, which is where they are.
        finished = subprocess.run(
            [
                sys.executable,
                "-m",
                "research.builds.study",
                "--measure",
                name,
                "--repeats",
                str(args.repeats),
            ],
            env=env,
            cwd=libraries if name == "image_dispatch" else None,
            capture_output=True,
            text=True,
            check=False,
        )
        if finished.returncode != 0:
            runs.append({"build": name, "skipped_reason": finished.stderr[-2000:]})
            continue
        runs.append(json.loads(finished.stdout.strip().splitlines()[-1]))
        print(json.dumps(runs[-1]["single_decision"]), flush=True)
    now = datetime.now(UTC)
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
