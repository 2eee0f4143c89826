"""typed-gguf, a published frozen-model decision server, run on a local GGUF beside the adapter
for `python -m evaluation --peer typed-gguf` (as `make bench` runs llama-server beside it).

typed-gguf is installed once, pinned with its hash (requirements-peer.txt), --no-deps into its
own folder under the bench cache (~/.cache/decision-bench/typed-gguf-<version>/;
DECISION_BENCH_CACHE moves it), never into the project's venv. It runs with its defaults (JSON
answer cue, `{"choice": "` prefill, mean token log-probability, T = 1) on the pinned
llama-cpp-python's own libraries (TYPED_GGUF_RUNTIME_DIR), so it never downloads a runtime; the
GGUF is registered through its Python API in a private data home, and its `serve` answers
`/v1/systemone`, which python -m evaluation posts System One items to.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from launcher import RunningServer, cache_root, free_port, stop, wait_until_healthy

NAME = "typed-gguf"
REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements-peer.txt"
READY_TIMEOUT_S = 60  # /health answers before any model loads: only the interpreter starts
# The first decision loads the model into typed-gguf's resident host (its keep-alive); the
# warm-up pays that once so the measured requests are warm, as the adapter's are.
WARM_UP_TIMEOUT_S = 600
KEEP_ALIVE_S = 3600  # longer than a split takes, so the host never unloads mid-run
STOP_TIMEOUT_S = 60
WARM_UP = {
    "model": "jev-latest",
    "state": {"note": "The printer on floor 2 is out of paper."},
    "questions": {"urgent": {"type": "noul", "instructions": "Is this urgent?"}},
}


class PeerUnavailable(RuntimeError):
    """The peer could not be installed or started; the message says which step and why."""


def pinned_version(requirements: Path = REQUIREMENTS) -> str:
    match = re.search(r"^typed-gguf==(\S+)", requirements.read_text(), re.MULTILINE)
    if not match:
        raise PeerUnavailable(f"{requirements}: no typed-gguf==VERSION pin")
    return match.group(1)


def ensure_installed(root: Path | None = None, requirements: Path = REQUIREMENTS) -> Path:
    """The folder holding the pinned typed-gguf package, installed there on first use."""
    folder = (root or cache_root()) / f"{NAME}-{pinned_version(requirements)}"
    if (folder / "typed_gguf" / "__init__.py").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # Installed beside the final folder and renamed into it: an interrupted install never leaves
    # a half-filled folder that the check above would take for a finished one.
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--require-hashes",
            "--target",
            str(staging),
            "-r",
            str(requirements),
        ]
        finished = subprocess.run(command, capture_output=True, text=True, check=False)
        if finished.returncode != 0:
            raise PeerUnavailable(f"pip could not install {NAME}: {finished.stderr[-2000:]}")
        try:
            os.replace(staging, folder)
        except OSError:
            if not (folder / "typed_gguf" / "__init__.py").is_file():
                raise
            # Another run installed it first: the same pinned wheel, so theirs serves.
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def llama_cpp_libraries() -> Path:
    """The shared libraries of the pinned llama-cpp-python the adapter itself runs on."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        raise PeerUnavailable("llama-cpp-python is not installed (make llama)")
    libraries = Path(spec.origin).parent / "lib"
    if not (libraries / "libllama.so").is_file():
        raise PeerUnavailable(f"{libraries}: no libllama.so")
    return libraries


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def environment(install: Path, home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(install),
        "TYPED_GGUF_HOME": str(home),
        "TYPED_GGUF_RUNTIME_DIR": str(llama_cpp_libraries()),
        "TYPED_GGUF_KEEP_ALIVE": str(KEEP_ALIVE_S),
        "HF_HUB_OFFLINE": "1",  # nothing it runs here may reach a hub
    }


# Run in the peer's interpreter (its package is not importable here): the GGUF as the registry's
# default, with what typed-gguf's own `models pull` records (arch, quantisation, size, sha256).
REGISTER = """
import json, pathlib, sys
from typed_gguf.registry import gguf, store
path, sha256 = pathlib.Path(sys.argv[1]), sys.argv[2]
kv = gguf.parse_gguf_metadata(path)["kv"]
file_type = gguf.file_type_of(kv)
registry, _ = store.load_registry()
entry = store.add_entry(registry, store.Entry(
    alias=store.slugify(path.name), path=str(path), sha256=sha256, arch=gguf.arch_of(kv),
    quant=gguf.quant_label(file_type) if file_type is not None else None,
    size=path.stat().st_size, source="local", file_type=file_type))
registry.current = entry.alias
store.save_registry(registry)
print(json.dumps(entry.to_dict()))
"""


def register(gguf: Path, sha256: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    finished = subprocess.run(
        [sys.executable, "-c", REGISTER, str(gguf), sha256],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if finished.returncode != 0:
        raise PeerUnavailable(f"{NAME} could not register {gguf}: {finished.stderr[-2000:]}")
    entry: dict[str, Any] = json.loads(finished.stdout)
    return entry


def warm_up(url: str) -> None:
    reply = httpx.post(f"{url}/v1/systemone", json=WARM_UP, timeout=WARM_UP_TIMEOUT_S)
    if reply.status_code != 200:
        raise PeerUnavailable(f"{NAME} refused the warm-up: {reply.status_code} {reply.text}")


@contextlib.contextmanager
def running_typed_gguf(
    gguf: Path, log_dir: Path, *, sha256: str | None = None, install: Path | None = None
) -> Iterator[tuple[RunningServer, dict[str, Any]]]:
    """typed-gguf serving `gguf` on a free local port, warmed up; yields the server and what
    was run (version, registry entry, runtime libraries). Its resident host is stopped after."""
    gguf = gguf.resolve()
    install = install or ensure_installed()
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    # A private data home: no user's registry, runtime or calibration table is read or written.
    home = Path(tempfile.mkdtemp(prefix=f"{NAME}-home-", dir=log_dir))
    env = environment(install, home)
    # Its working directory is the data home, so `-m typed_gguf` finds the pinned package and
    # never a same-named file of whatever folder the caller stood in.
    entry = register(gguf, sha256 or sha256_of(gguf), env, home)
    log_path = log_dir / f"{NAME}-{port}.log"
    command = [sys.executable, "-m", "typed_gguf", "serve", "--host", "127.0.0.1"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*command, "--port", str(port)], env=env, cwd=home, stdout=log, stderr=log
        )
    server = RunningServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_until_healthy(process, f"{server.url}/health", server.log, READY_TIMEOUT_S, NAME)
        warm_up(server.url)
        yield (
            server,
            {
                "name": NAME,
                "version": pinned_version(),
                "requirement": REQUIREMENTS.name,
                "runtime_dir": env["TYPED_GGUF_RUNTIME_DIR"],
                "entry": entry,
                "log": str(log_path),
            },
        )
    finally:
        stop(process)
        # The decisions ran in typed-gguf's detached resident host, which outlives `serve`.
        subprocess.run(
            [sys.executable, "-m", "typed_gguf", "keep", "stop"],
            env=env,
            cwd=home,
            capture_output=True,
            timeout=STOP_TIMEOUT_S,
            check=False,
        )


if __name__ == "__main__":  # `make` installs it with the dev tools, so a test never fetches it
    print(ensure_installed())
