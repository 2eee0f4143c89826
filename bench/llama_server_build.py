"""llama-server for the side-by-side benchmark, built once from the llama.cpp source that the
installed llama-cpp-python vendors (same commit, so the same kernels), cached outside the
repository: ~/.cache/decision-bench/llama-server-<version>/ (DECISION_BENCH_CACHE moves it).

Flags follow llama-cpp-python's own build: its CMakeLists forces shared libraries and no curl,
and the CPU features come from the same recipe (container/llama_build.py) that built the
installed llama-cpp-python, so the side-by-side compares one build with itself. Beyond that
only what a server needs offline: no web UI download, no HTTPS, no tests or examples. A failed
step returns its reason; it never raises.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import llama_build

PACKAGE = "llama-cpp-python"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)
BUILD_JOBS = 2
LOG_TAIL_LINES = 15


@dataclass(frozen=True)
class Build:
    """The binary, or why there is none."""

    version: str
    directory: Path
    binary: Path | None = None
    reason: str | None = None
    built_now: bool = False

    def as_dict(self) -> dict:
        return {
            "llama_cpp_python": self.version,
            "binary": str(self.binary) if self.binary else None,
            "built_now": self.built_now,
            "skipped_reason": self.reason,
        }


class BuildFailed(RuntimeError):
    """One step of the build failed; the message says which and why."""


def cache_root() -> Path:
    configured = os.environ.get("DECISION_BENCH_CACHE", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "decision-bench"


def installed_version() -> str:
    return metadata.version(PACKAGE)


def cmake_flags(recipe_args: list[str] | None = None) -> list[str]:
    """The server's flags: the recipe's CPU flags (default: this machine's) after ours."""
    recipe_args = llama_build.local_cmake_args() if recipe_args is None else recipe_args
    return [*CMAKE_FLAGS, *recipe_args]


def ensure_llama_server(
    root: Path | None = None, version: str | None = None, recipe_args: list[str] | None = None
) -> Build:
    """The cached binary, or a fresh build of it; a failure comes back as Build.reason."""
    try:
        version = version or installed_version()
    except metadata.PackageNotFoundError:
        return Build("?", Path(), reason=f"{PACKAGE} is not installed")
    directory = (root or cache_root()) / f"llama-server-{version}"
    binary = directory / "build" / "bin" / "llama-server"
    flags_file = directory / "build" / "bench-cmake-flags"
    flags = cmake_flags(recipe_args)
    if binary.is_file() and _read(flags_file) == "\n".join(flags):
        return Build(version, directory, binary=binary)
    try:
        _build(directory, version, flags)
    except BuildFailed as error:
        return Build(version, directory, reason=str(error))
    if not binary.is_file():
        return Build(version, directory, reason=f"the build finished without {binary}")
    flags_file.write_text("\n".join(flags))
    return Build(version, directory, binary=binary, built_now=True)


def vendored_llama_cpp(root: Path | None = None, version: str | None = None) -> Path:
    """The llama.cpp source itself, unpacked once into the cache beside the build (its models/
    holds the real vocabularies and chat templates the suite's model matrix uses); raises
    BuildFailed."""
    version = version or installed_version()
    directory = (root or cache_root()) / f"llama-server-{version}"
    directory.mkdir(parents=True, exist_ok=True)
    return _vendored_source(directory, version, directory / "build.log")


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def _build(directory: Path, version: str, flags: list[str]) -> None:
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    cmake = shutil.which("cmake", path=search)
    if cmake is None:
        raise BuildFailed("cmake not found (install it, e.g. `pip install cmake`)")
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "build.log"
    source = _vendored_source(directory, version, log)
    build = directory / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    _step(
        "cmake configure",
        [cmake, "-S", str(source), "-B", str(build), *generator, *flags],
        log,
    )
    _step(
        "cmake build",
        [cmake, "--build", str(build), "--target", "llama-server", "-j", str(BUILD_JOBS)],
        log,
    )


def _vendored_source(directory: Path, version: str, log: Path) -> Path:
    """llama-cpp-python's sdist (pip's cache answers a second download) holds vendor/llama.cpp."""
    source = directory / "src" / "llama.cpp"
    if (source / "CMakeLists.txt").is_file():
        return source
    downloads = directory / "sdist"
    _step(
        "download the llama-cpp-python sdist",
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"{PACKAGE}=={version}",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--dest",
            str(downloads),
        ],
        log,
    )
    archives = sorted(downloads.glob("*.tar.gz"))
    if not archives:
        raise BuildFailed(f"pip download left no .tar.gz in {downloads}")
    marker = "/vendor/llama.cpp/"
    with tarfile.open(archives[0]) as archive:
        members = []
        for member in archive.getmembers():
            if marker in member.name:
                member.name = member.name.split(marker, 1)[1]
                members.append(member)
        if not members:
            raise BuildFailed(f"{archives[0].name} holds no vendor/llama.cpp")
        source.mkdir(parents=True, exist_ok=True)
        archive.extractall(source, members=members, filter="data")
    return source


def _step(what: str, command: list[str], log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        try:
            finished = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
        except OSError as error:
            raise BuildFailed(f"{what}: {error}") from None
    if finished.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        raise BuildFailed(
            f"{what} failed (exit {finished.returncode}, log {log}):\n" + "\n".join(tail)
        )
