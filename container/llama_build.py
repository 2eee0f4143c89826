"""The one recipe for compiling llama.cpp: the local virtual environment, `make bench`'s
llama-server and both images take their CMake flags from here.

Why a recipe at all: llama.cpp's default (`GGML_NATIVE=ON`, `-march=native`) compiles its AMX
matrix-multiply path on an Intel Xeon with AMX (Sapphire Rapids class: ml.c7i/m7i/r7i, many CI
runners), and that path crashes on the first decode at the pinned llama.cpp
(ggml-org/llama.cpp#20824: `ldtilecfg` in `ggml_backend_amx_mul_mat`, the tile configuration and
the per-thread XTILEDATA permission; fix pending in #26954). So no build here ever enables the
features in EXCLUDED; `LLAMA_BUILD_ALLOW_AMX=1` turns them back on once the pinned llama.cpp
carries the fix.

Two targets:
- `local`: the machine's own x86 features, read from /proc/cpuinfo and passed one by one with
  `GGML_NATIVE=OFF`, less EXCLUDED (`-march=native` cannot be told to leave AMX out through
  ggml's options, and an explicit list is what the build check compares the library against).
  Other architectures keep llama.cpp's native default: the crash is x86-only.
- `image`: ggml's runtime CPU dispatch (`GGML_BACKEND_DL=ON`, `GGML_CPU_ALL_VARIANTS=ON`: one
  CPU backend library per x86 generation, the best one the CPU supports chosen when llama.cpp
  starts), so one image runs AVX-512 on ml.c6i (Ice Lake) and AVX2 on older types. llama-cpp-
  python's bindings call `llama_backend_init`, which loads the backends from GGML_BACKEND_DIR;
  the recipe points that at the package's own `llama_cpp/lib`, where ggml installs the
  variants, and `prune` deletes the variants that need an EXCLUDED feature, so an ml.c7i
  instance falls back to the best variant without AMX.

pip caches a built wheel by the sdist, not by CMAKE_ARGS, so a machine that once built another
wheel would get it back; `install` builds into a cache of its own keyed by the recipe (version
and flags) and force-installs that wheel, recording the key in the virtual environment, so a
venv holding any other build (a crashing native one included) is repaired by the next `make`.

Standard library only: it runs in the images' builder stage before anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE = "llama-cpp-python"
REQUIREMENTS = Path(__file__).with_name("requirements.txt")

# ggml's x86 CPU options and the /proc/cpuinfo flags each needs (all of them).
X86_FEATURES: dict[str, tuple[str, ...]] = {
    "SSE42": ("sse4_2",),
    "AVX": ("avx",),
    "F16C": ("f16c",),
    "FMA": ("fma",),
    "BMI2": ("bmi2",),
    "AVX2": ("avx2",),
    "AVX_VNNI": ("avx_vnni",),
    "AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "AVX512_VBMI": ("avx512vbmi",),
    "AVX512_VNNI": ("avx512_vnni",),
    "AVX512_BF16": ("avx512_bf16",),
    "AMX_TILE": ("amx_tile",),
    "AMX_INT8": ("amx_int8",),
    "AMX_BF16": ("amx_bf16",),
}
# Features no build may use (see the module docstring), and the opt-in that lifts it.
EXCLUDED = ("AMX_TILE", "AMX_INT8", "AMX_BF16")
ALLOW_AMX_ENV = "LLAMA_BUILD_ALLOW_AMX"
# The CPU backend variants (libggml-cpu-<name>.so) GGML_CPU_ALL_VARIANTS builds that need an
# EXCLUDED feature: prune deletes them after the install.
EXCLUDED_VARIANTS = ("sapphirerapids",)


def excluded(environ: dict[str, str] | None = None) -> tuple[str, ...]:
    environ = os.environ if environ is None else environ
    return () if environ.get(ALLOW_AMX_ENV, "") == "1" else EXCLUDED


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The flags of the first processor in /proc/cpuinfo (empty where there is none)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    match = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def local_features(flags: set[str], environ: dict[str, str] | None = None) -> list[str]:
    """ggml's x86 options this CPU supports, less the excluded ones, in X86_FEATURES' order."""
    leave_out = excluded(environ)
    return [
        feature
        for feature, needs in X86_FEATURES.items()
        if feature not in leave_out and all(flag in flags for flag in needs)
    ]


def is_x86(machine: str | None = None) -> bool:
    return (machine or platform.machine()).lower() in {"x86_64", "amd64"}


def local_cmake_args(
    flags: set[str] | None = None,
    machine: str | None = None,
    environ: dict[str, str] | None = None,
) -> list[str]:
    """The flags of a build for this machine: every x86 feature it has but the excluded."""
    if not is_x86(machine):
        return []
    features = local_features(cpu_flags() if flags is None else flags, environ)
    return ["-DGGML_NATIVE=OFF"] + [
        f"-DGGML_{feature}={'ON' if feature in features else 'OFF'}" for feature in X86_FEATURES
    ]


def image_cmake_args(backend_dir: str) -> list[str]:
    """The CPU image's flags: every x86 variant, chosen at start-up, installed in backend_dir."""
    return [
        "-DGGML_NATIVE=OFF",
        "-DGGML_BACKEND_DL=ON",
        "-DGGML_CPU_ALL_VARIANTS=ON",
        f"-DGGML_BACKEND_DIR={backend_dir}",
    ]


def prune(lib_dir: Path, environ: dict[str, str] | None = None) -> list[Path]:
    """Delete the CPU variants that need an excluded feature; return what was deleted."""
    if not excluded(environ):
        return []
    removed = []
    for variant in EXCLUDED_VARIANTS:
        for path in sorted(lib_dir.glob(f"libggml-cpu-{variant}.so*")):
            path.unlink()
            removed.append(path)
    variants = sorted(lib_dir.glob("libggml-cpu-*.so"))
    if not variants:
        raise SystemExit(f"no CPU backend variants in {lib_dir}: was it built with the recipe?")
    return removed


def pinned_version(requirements: Path = REQUIREMENTS) -> str:
    for line in requirements.read_text().splitlines():
        match = re.match(rf"^{re.escape(PACKAGE)}==(\S+)", line.strip())
        if match:
            return match.group(1)
    raise SystemExit(f"{requirements} pins no {PACKAGE}")


def recipe_key(version: str, cmake_args: list[str]) -> str:
    digest = hashlib.sha256("\n".join([version, *cmake_args]).encode()).hexdigest()
    return f"{version}-{digest[:16]}"


def wheel_cache() -> Path:
    configured = os.environ.get("DECISION_LLAMA_WHEELS", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "decision-llama"


def record_path(python: Path) -> Path:
    """The record of the build a virtual environment holds, beside its interpreter's bin/."""
    return python.parent.parent / "llama-build.json"


def installed_record(python: Path) -> dict | None:
    try:
        return json.loads(record_path(python).read_text())
    except (OSError, ValueError):
        return None


def install(python: Path, cmake_args: list[str], version: str | None = None) -> str:
    """Make `python`'s environment hold this recipe's wheel: nothing when its record says so,
    else the cached wheel, else a fresh build into the cache. Returns what was done."""
    version = version or pinned_version()
    key = recipe_key(version, cmake_args)
    record = installed_record(python)
    if record and record.get("key") == key and _importable(python, version):
        return f"{PACKAGE} {key} already installed"
    directory = wheel_cache() / key
    wheels = sorted(directory.glob("llama_cpp_python-*.whl"))
    done = f"installed {PACKAGE} {key} from {directory}"
    if not wheels:
        _build_wheel(python, version, cmake_args, directory)
        wheels = sorted(directory.glob("llama_cpp_python-*.whl"))
        done = f"built and installed {PACKAGE} {key} into {directory}"
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--force-reinstall",
            "--no-deps",
            str(wheels[-1]),
        ]
    )
    record_path(python).write_text(
        json.dumps({"key": key, "version": version, "cmake_args": cmake_args}, indent=2) + "\n"
    )
    return done


def _importable(python: Path, version: str) -> bool:
    probe = "import importlib.metadata as m, sys; sys.exit(m.version(sys.argv[1]) != sys.argv[2])"
    finished = subprocess.run([str(python), "-c", probe, PACKAGE, version], capture_output=True)
    return finished.returncode == 0


def _build_wheel(python: Path, version: str, cmake_args: list[str], directory: Path) -> None:
    """pip's own cache is bypassed: it would answer with any wheel of this sdist."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    environ = {
        **os.environ,
        "CMAKE_ARGS": shlex.join(cmake_args),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1),
    }
    print(f"compiling {PACKAGE}=={version} with {shlex.join(cmake_args) or 'defaults'}")
    try:
        _run(
            [
                str(python),
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-cache-dir",
                "--no-binary",
                PACKAGE,
                "--wheel-dir",
                str(scratch),
                f"{PACKAGE}=={version}",
            ],
            env=environ,
        )
        scratch.rename(directory)  # whole or not at all: a half-built cache entry never counts
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(command: list[str], env: dict[str, str] | None = None) -> None:
    finished = subprocess.run(command, env=env)
    if finished.returncode != 0:
        raise SystemExit(f"failed (exit {finished.returncode}): {shlex.join(command)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llama_build", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("local-args", help="print the local build's CMake flags")
    image = commands.add_parser("image-args", help="print the CPU image's CMake flags")
    image.add_argument("--backend-dir", required=True)
    prune_cmd = commands.add_parser("prune", help="delete the excluded CPU variants")
    prune_cmd.add_argument("lib_dir", type=Path)
    install_cmd = commands.add_parser("install", help="install the local build into a venv")
    install_cmd.add_argument("--python", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "local-args":
        print(shlex.join(local_cmake_args()))
    elif args.command == "image-args":
        print(shlex.join(image_cmake_args(args.backend_dir)))
    elif args.command == "prune":
        for path in prune(args.lib_dir):
            print(f"removed {path}")
    else:
        print(install(args.python, local_cmake_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
