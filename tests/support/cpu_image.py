"""The CPU image built by a real Docker engine: container/Dockerfile, from the source CDK stages for
the CPU image's build project, on a stand-in for the DLC parent (tests/support/dlc_standin/), with
the buildspec's `docker build` arguments.

No registry serves base images here, so the stand-in's Debian root comes from debootstrap
(through the Debian mirror apt already uses) and is imported once; the engine's layer cache keeps
it, the stand-in and the compiled llama-cpp-python between runs on one machine, so only the first
build compiles (about 12 minutes on 2 cores) and later ones take seconds unless
container/requirements.txt or the stand-in changes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

DOCKER = os.environ.get("DOCKER", "docker")
DEBIAN_BASE = "local/debian-bookworm"
DLC_STANDIN = "local/dlc-standin"
IMAGE = "decision-adapter:cpu-standin"
STANDIN_DIR = Path(__file__).resolve().parent / "dlc_standin"
APT_SOURCES = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
DEFAULT_MIRROR = "http://deb.debian.org/debian"
HOST_CA_BUNDLES = [
    Path("/etc/ssl/certs/ca-certificates.crt"),
    Path("/etc/pki/tls/certs/ca-bundle.crt"),
]
AS_ROOT = [] if os.geteuid() == 0 else ["sudo"]  # debootstrap and reading its tree need root


def docker(*args: str, **kwargs) -> subprocess.CompletedProcess:
    # BuildKit, as the buildspec sets it: it reads the Dockerfile's own .dockerignore, and its
    # layer cache is the one every build here shares.
    environment = {**os.environ, "DOCKER_BUILDKIT": "1"}
    return subprocess.run([DOCKER, *args], check=True, text=True, env=environment, **kwargs)


def image_exists(name: str) -> bool:
    found = subprocess.run([DOCKER, "image", "inspect", name], capture_output=True)
    return found.returncode == 0


def debian_mirror(sources: list[Path] = APT_SOURCES) -> str:
    """The Debian archive apt on this host uses (one-line or deb822 sources), else Debian's
    redirector: a host that is not Debian reaches deb.debian.org like any other."""
    for path in sources:
        text = path.read_text() if path.is_file() else ""
        for line in text.splitlines():
            one_line = re.match(r"deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", line.strip() + " ")
            if one_line:
                return one_line.group(1)
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.MULTILINE))
            if "bookworm" in fields.get("Suites", "").split() and fields.get("URIs"):
                return fields["URIs"].split()[0]
    return DEFAULT_MIRROR


def ensure_debian_base() -> None:
    """Debian bookworm (minbase) as the image DEBIAN_BASE, made once per engine."""
    if image_exists(DEBIAN_BASE):
        return
    root = Path(tempfile.mkdtemp(prefix="debian-base-"))
    try:
        subprocess.run(
            [*AS_ROOT, "debootstrap", "--variant=minbase", "bookworm", str(root), debian_mirror()],
            check=True,
        )
        archive = subprocess.Popen(
            [*AS_ROOT, "tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE
        )
        docker("import", "-", DEBIAN_BASE, stdin=archive.stdout, stdout=subprocess.DEVNULL)
        assert archive.wait() == 0, "tar of the debootstrap tree failed"
    finally:
        subprocess.run([*AS_ROOT, "rm", "-rf", str(root)], check=True)


def build_dlc_standin() -> None:
    """tests/support/dlc_standin/ with the host's CA bundle beside it (pip in the build then trusts
    what pip on the host trusts)."""
    bundle = next(path for path in HOST_CA_BUNDLES if path.is_file())
    with tempfile.TemporaryDirectory(prefix="dlc-standin-") as context:
        shutil.copytree(STANDIN_DIR, context, dirs_exist_ok=True)
        shutil.copyfile(bundle, Path(context) / "ca-bundle.crt")
        docker("build", "--build-arg", f"DEBIAN_BASE={DEBIAN_BASE}", "-t", DLC_STANDIN, context)


def build_cpu_image(source: Path, dockerfile: str) -> None:
    """`docker build` as container/buildspec.yml runs it in `source` (the staged zip's
    directory), with the stand-in as BASE_IMAGE."""
    ensure_debian_base()
    build_dlc_standin()
    docker(
        "build",
        "-f",
        dockerfile,
        "--build-arg",
        f"BASE_IMAGE={DLC_STANDIN}",
        "-t",
        IMAGE,
        ".",
        cwd=source,
    )
