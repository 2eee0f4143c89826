"""llama-server for the side-by-side benchmarks, built by the engine's recipe in the CMake
folder that compiled the venv's libllama (container/llama_build.py, `build_server`): the same
llama.cpp tree and flags, and only the server's own sources compile, so a side by side compares
one build with itself. `vendored_llama_cpp` is that tree (its models/ holds the real
vocabularies and chat templates, its tools/ and gguf-py/ upstream's own code).

CMAKE_FLAGS and `_step` serve the benchmarks that compile other builds of the same tree
(research.builds, the GPU kit): what a server needs offline, no web UI download, no HTTPS, no
tests or examples. A failed step returns its reason; it never raises.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
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


def installed_version() -> str:
    return metadata.version(PACKAGE)


def engine_version() -> str:
    """The bindings' version and the engine's llama.cpp build, as the venv's record gives
    them: what a cache of things made with the engine is keyed by."""
    record = llama_build.installed_record(Path(sys.executable)) or {}
    return f"{installed_version()}-{record.get('engine', 'unknown')}"


def cmake_flags(recipe_args: list[str] | None = None) -> list[str]:
    """A standalone build's flags: the recipe's CPU flags (default: this machine's) after ours."""
    recipe_args = llama_build.local_cmake_args() if recipe_args is None else recipe_args
    return [*CMAKE_FLAGS, *recipe_args]


def recipe_entry() -> llama_build.CacheEntry:
    """The recipe's cache entry the venv's llama-cpp-python came from; raises BuildFailed."""
    record = llama_build.installed_record(Path(sys.executable))
    if record is None or "cache" not in record:
        raise BuildFailed("the venv holds no build of the recipe (run `make llama`)")
    entry = llama_build.CacheEntry(Path(record["cache"]))
    if entry.wheel() is None:
        raise BuildFailed(f"{entry.directory} holds no finished build (run `make llama`)")
    return entry


def ensure_llama_server() -> Build:
    """The recipe's llama-server, built now if it is not yet; a failure comes back as
    Build.reason."""
    try:
        version = installed_version()
    except metadata.PackageNotFoundError:
        return Build("?", Path(), reason=f"{PACKAGE} is not installed")
    try:
        entry = recipe_entry()
    except BuildFailed as error:
        return Build(version, Path(), reason=str(error))
    if entry.server().is_file():
        return Build(version, entry.directory, binary=entry.server())
    try:
        binary = llama_build.build_server(entry, jobs=BUILD_JOBS)
    except SystemExit as error:
        return Build(version, entry.directory, reason=f"llama-server build: {error}")
    if not binary.is_file():
        return Build(version, entry.directory, reason=f"the build finished without {binary}")
    return Build(version, entry.directory, binary=binary, built_now=True)


def vendored_llama_cpp() -> Path:
    """The llama.cpp tree the venv's libllama was compiled from; raises BuildFailed."""
    return recipe_entry().tree


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
