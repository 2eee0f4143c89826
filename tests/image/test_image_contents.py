"""What the child images will hold, read from their Dockerfiles' final stages: the adapter's
modules import from exactly the files those stages copy, and every shared library that
llama.cpp's binaries need is installed there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dockerfile_stages import Stage, context_copies, stages

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = [ROOT / "container" / "Dockerfile", ROOT / "container" / "Dockerfile.gpu"]

# Libraries every Amazon Linux 2023 image with Python has (glibc, the GCC runtime).
IN_EVERY_BASE = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
    "libstdc++.so.6",
    "libgcc_s.so.1",
}
# The Amazon Linux 2023 package that provides each other library llama.cpp may link.
PACKAGE_OF = {"libgomp.so.1": "libgomp"}


def final_stage(dockerfile: Path) -> Stage:
    return stages(dockerfile)[-1]


def materialize(stage: Stage, root: Path) -> None:
    """Lay out under `root` the context files the stage copies, where it copies them."""
    for sources, destination in context_copies(stage.instructions):
        target = root / destination.lstrip("/")
        for source in sources:
            path = ROOT / source
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                into = target / path.name if destination.endswith("/") else target
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, into)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_adapter_module_imports_from_what_the_image_copies(dockerfile, tmp_path):
    stage = final_stage(dockerfile)
    materialize(stage, tmp_path)
    program = tmp_path / stage.env()["PYTHONPATH"].lstrip("/")
    # Only the copied tree and the installed packages: not this repository.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(program)
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pkgutil, importlib, decision_adapter as p\n"
            "names = [m.name for m in pkgutil.walk_packages(p.__path__, 'decision_adapter.')]\n"
            "for name in names: importlib.import_module(name)\n"
            "print(len(names), p.__file__)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr
    count, location = imported.stdout.split()
    assert int(count) > 10 and location.startswith(str(program))


def needed_libraries() -> set[str]:
    """Sonames llama-cpp-python's shared objects need from outside the wheel."""
    import llama_cpp

    libs = sorted((Path(llama_cpp.__file__).parent / "lib").glob("*.so"))
    own = {path.name for path in libs} | {path.name for path in libs[0].parent.glob("*.so.*")}
    needed = set()
    for lib in libs:
        dynamic = subprocess.run(
            ["readelf", "-d", str(lib)], capture_output=True, text=True, check=True
        ).stdout
        for line in dynamic.splitlines():
            if "(NEEDED)" in line:
                needed.add(line.split("[", 1)[1].rstrip("]"))
    return needed - own


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_runtime_installs_every_library_llama_cpp_links(dockerfile):
    installs = " ".join(
        value for value in final_stage(dockerfile).values("RUN") if "dnf install" in value
    ).split()
    missing = []
    for soname in sorted(needed_libraries() - IN_EVERY_BASE):
        assert soname in PACKAGE_OF, f"{soname}: which package provides it? add it above"
        if PACKAGE_OF[soname] not in installs:
            missing.append(f"{soname} ({PACKAGE_OF[soname]})")
    assert not missing, f"{dockerfile.name} final stage does not install {missing}"
