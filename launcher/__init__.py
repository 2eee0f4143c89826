"""Start the real adapter (`python -m decision_adapter serve`) as a subprocess on a free port
and wait until it serves: what the tests and the benchmarks both run."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent  # the repository root


def cache_root() -> Path:
    """Where local runs keep what they build or install once per machine (llama-server, the
    model matrix, the evaluation's peer): ~/.cache/decision-bench, or DECISION_BENCH_CACHE."""
    configured = os.environ.get("DECISION_BENCH_CACHE", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "decision-bench"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RunningServer:
    """A server process started here, at `url`, writing to `log_path`."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class Adapter(RunningServer):
    def stats(self, **headers: str) -> dict[str, Any]:
        stats: dict[str, Any] = httpx.get(f"{self.url}/stats", headers=headers, timeout=10).json()
        return stats

    def wait_until_in_flight(self, count: int = 1, *, waiting: int = 0, **headers: str) -> None:
        """Until `count` model jobs run and `waiting` wait (as /stats counts them)."""

        def reached() -> bool:
            admission = self.stats(**headers)["admission"]
            return bool(admission["in_flight"] == count and admission["waiting"] == waiting)

        wait_until(reached, what=f"{count} in flight, {waiting} waiting")


def wait_until(
    condition: Callable[[], object], *, timeout: float = 60, what: str = "condition"
) -> None:
    """Poll `condition` until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not reached within {timeout}s: {what}"
        time.sleep(0.02)


def adapter_environment(**overrides: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DECISION_", "SM_LLAMA_CPP_", "SAGEMAKER_"))
    }
    env.update(
        {
            "PYTHONPATH": f"{REPO / 'container'}{os.pathsep}{REPO}",
            "HOST": "127.0.0.1",
            "DECISION_MODEL_DIR": "/nonexistent-model-dir",  # local run: the bundled model
            # A parallel test run gives each worker's adapters its share of the cores.
            "DECISION_N_THREADS": os.environ.get("LAUNCHER_N_THREADS", "2"),
            "DECISION_N_CTX": "8192",
        }
    )
    env.update(overrides)
    return env


@contextlib.contextmanager
def running_adapter(
    tmp_dir: Path,
    *,
    ready_timeout: float = 180,
    preexec_fn: Callable[[], object] | None = None,
    **env: str,
) -> Iterator[Adapter]:
    port = free_port()
    log_path = tmp_dir / f"adapter-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "decision_adapter", "serve"],
            env=adapter_environment(PORT=str(port), **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec_fn,
        )
    adapter = Adapter(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
    try:
        wait_until_healthy(process, f"{adapter.url}/ping", adapter.log, ready_timeout, "adapter")
        yield adapter
    finally:
        stop(process)


def wait_until_healthy(
    process: subprocess.Popen[bytes],
    health_url: str,
    log: Callable[[], str],
    timeout: float,
    name: str,
) -> None:
    """Until `health_url` answers 200; fail with the server's log if it exits or times out."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{log()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(health_url, timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} not ready after {timeout}s:\n{log()}")
        time.sleep(0.05)  # a test suite starts dozens: each poll costs a millisecond, not more


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 30 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_adapter_until_exit(
    env: dict[str, str], timeout: float = 120, *, preexec_fn: Callable[[], object] | None = None
) -> subprocess.CompletedProcess[str]:
    """Start the adapter expecting it to refuse; returns the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "decision_adapter", "serve"],
        env=adapter_environment(**{"PORT": str(free_port()), **env}),
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=preexec_fn,
    )
