"""`python -m bench.gpu_kit`: assemble `.gpukit/`, what one GPU machine without a package
registry needs to run `python -m bench.gpu_batching` (issue 57 item 6), carried beside the
working tree (`carry: [".gpukit"]`, 64 MiB for the whole tree).

- `llama-src.tar.xz`: the pinned llama-cpp-python sdist trimmed to what a CUDA build of
  libllama, ggml (CPU + CUDA) and llama-server needs, plus the pure-Python `llama_cpp` package,
  gguf-py (to write the random-weight model there) and ONE vocabulary GGUF (Llama 3's, 128,256
  tokens, the vocabulary of the model shape the benchmark generates). Left out: docs, media,
  benches, tests, examples, the conversion scripts, the other vocabularies, the web UI's
  sources (the server builds with `LLAMA_BUILD_UI=OFF`, `LLAMA_USE_PREBUILT_UI=OFF`) and the
  other GPU backends' sources (ggml adds a backend's folder only when its option is ON).
- `whl/`: py3.12 manylinux wheels of what the adapter imports and the machine's Python lacks
  (starlette, uvicorn, pydantic and its needs, diskcache for llama_cpp), at the versions this
  checkout's virtual environment holds (the pinned ones).

Run here (pip reaches PyPI here, not there); `--check` also configures the trimmed tree with
CMake (CPU only, nothing compiled) to prove the trimming left every folder CMake reads.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "container"))

import llama_build  # noqa: E402

from bench.llama_server_build import cache_root  # noqa: E402

KIT = REPO / ".gpukit"
SOURCE_ARCHIVE = "llama-src.tar.xz"
WHEELS = "whl"
VOCAB = "models/ggml-vocab-llama-bpe.gguf"
TREE_LIMIT = 64 << 20  # what one device call may carry, the working tree included

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


def pinned_version() -> str:
    return llama_build.pinned_version()


def default_sdist(version: str) -> Path:
    folder = cache_root() / f"llama-server-{version}" / "sdist"
    return folder / f"llama_cpp_python-{version}.tar.gz"


def kept(relative: str) -> bool:
    """Whether a path of the sdist (below its top folder) goes into the kit."""
    if relative.startswith("llama_cpp/"):
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


def trim(sdist: Path, archive: Path) -> dict:
    """Copy the kept members of the sdist into a .tar.xz, under the sdist's own top folder."""
    kept_files = dropped_files = kept_bytes = 0
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    with tarfile.open(sdist) as source, tarfile.open(partial, "w:xz", preset=6) as out:
        for member in source:
            top, _, relative = member.name.partition("/")
            if not member.isfile() or "/.git/" in f"/{relative}":
                continue
            if not kept(relative):
                dropped_files += 1
                continue
            data = source.extractfile(member)
            assert data is not None
            out.addfile(member, io.BytesIO(data.read()))
            kept_files += 1
            kept_bytes += member.size
    partial.rename(archive)
    return {
        "files": kept_files,
        "dropped_files": dropped_files,
        "unpacked_bytes": kept_bytes,
        "archive_bytes": archive.stat().st_size,
    }


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
    """Unpack the kit's source and configure it for CPU (no compiling): every folder CMake adds
    must still be there. Returns the last line CMake printed."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as source:
            source.extractall(tmp, filter="data")
        (top,) = Path(tmp).iterdir()
        finished = subprocess.run(
            [
                "cmake",
                "-S",
                str(top / "vendor" / "llama.cpp"),
                "-B",
                str(Path(tmp) / "build"),
                "-G",
                "Ninja",
                *configure_flags(cuda=False),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if finished.returncode != 0:
        raise SystemExit(f"the trimmed tree does not configure:\n{finished.stdout[-3000:]}")
    return finished.stdout.strip().splitlines()[-1]


def configure_flags(cuda: bool) -> list[str]:
    from bench.gpu_batching import cmake_flags

    return cmake_flags(cuda=cuda, cpu_args=[])


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
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_kit", description=__doc__)
    parser.add_argument("--out", type=Path, default=KIT, help="the kit's folder (.gpukit)")
    parser.add_argument("--sdist", type=Path, help="llama-cpp-python's sdist (default: cached)")
    parser.add_argument("--check", action="store_true", help="configure the trimmed tree (CPU)")
    parser.add_argument("--skip-wheels", action="store_true")
    args = parser.parse_args(argv)
    version = pinned_version()
    sdist = args.sdist or default_sdist(version)
    if not sdist.is_file():
        raise SystemExit(f"no sdist at {sdist}: `make bench` downloads it (or pass --sdist)")
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"llama_cpp_python": version, "sdist": str(sdist)}
    print(f"trimming {sdist.name} ...", flush=True)
    report["source"] = trim(sdist, args.out / SOURCE_ARCHIVE)
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
