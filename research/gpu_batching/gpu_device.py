"""`python3 -m research.gpu_batching.gpu_device`: the one command to run on the GPU host. It
builds the engine with CUDA from the kit, bisects how llama-cpp-python's model load fares on
that build (gpu_bisect.py: each case in a child process with its own timeout), then measures
the adapter against llama-server at 1 to 64 clients (gpu_batching.py), all writing to $OUT.

Before the call, on the working tree: `python -m research.gpu_batching.gpu_kit` (assembles
`.gpukit/`: the engine's trimmed source and the wheels the GPU host's Python lacks). The call
on the GPU host, exactly:

    command:   python3 -m research.gpu_batching.gpu_device
    carry:     [".gpukit"]
    timeout_s: 560

What it does there, in order:
1. installs the kit's wheels into /tmp/site (`pip --no-index`: the GPU host reaches
   no registry) and puts that folder first on PYTHONPATH;
2. writes `nvidia-smi -L` into the log;
3. runs `python3 -m research.gpu_batching.gpu_batching --out $OUT --deadline-s 500` (its
   plan: build about 5 minutes, bisection at most 90 s, the measurement in what is left), its
   output copied into `$OUT/log.txt` as it comes;
4. at 520 s sends it SIGTERM (it stops its servers and writes its report), at 535 s kills
   what is left of its process group, so the call ends before its 560 s, with every file
   written so far: gpu-batching.json, gpu-bisect.json, log.txt and the log tails.

Words after the command go to gpu_batching.py (`python3 -m research.gpu_batching.gpu_device
--bisect-only` builds and bisects only; `--no-bisect` measures only). `GPU_DEADLINE_S` moves
the deadline (the stop and the kill follow it). Standard library only: it runs before the
wheels are in.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[2]  # the repository root
KIT = REPO / ".gpukit"
SITE = Path("/tmp/site")
DEADLINE_S = 500.0
STOP_AFTER_S = 20.0  # past the deadline: SIGTERM, for a run that did not keep it
KILL_AFTER_S = 15.0  # past the SIGTERM: SIGKILL to the process group
LOG = "log.txt"


def wheel_command(kit: Path, site: Path) -> list[str] | None:
    """pip installing the kit's wheels into `site`, or None where the kit holds none."""
    wheels = sorted(str(p) for p in (kit / "whl").glob("*.whl"))
    if not wheels:
        return None
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--target",
        str(site),
        *wheels,
    ]


def batching_command(out: Path, deadline_s: float, extra: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "research.gpu_batching.gpu_batching",
        "--out",
        str(out),
        "--deadline-s",
        f"{deadline_s:g}",
        *extra,
    ]


def child_env(site: Path | None) -> dict[str, str]:
    """The run's environment: the installed wheels and the repository importable, output
    unbuffered (a killed run's last lines reach the log)."""
    path = [str(site)] if site is not None else []
    path += [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONUNBUFFERED": "1"}


def copy_lines(source: IO[bytes], log: IO[bytes]) -> None:
    """Each line to this process's stdout and to the log, as it comes."""
    for line in iter(source.readline, b""):
        sys.stdout.buffer.write(line)
        sys.stdout.flush()
        log.write(line)
        log.flush()


def run_logged(
    command: Sequence[str],
    env: dict[str, str],
    log_path: Path,
    stop_after_s: float,
    kill_after_s: float = KILL_AFTER_S,
) -> int:
    """Run `command` with its output copied into `log_path`; SIGTERM at `stop_after_s`, SIGKILL
    to its process group `kill_after_s` later. Returns its exit status (negative: a signal)."""
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        assert process.stdout is not None
        stopper = threading.Timer(stop_after_s, _stop, (process, kill_after_s, log))
        stopper.daemon = True
        stopper.start()
        try:
            copy_lines(process.stdout, log)
            return process.wait()
        finally:
            stopper.cancel()


def _stop(process: subprocess.Popen[bytes], kill_after_s: float, log: IO[bytes]) -> None:
    """SIGTERM to the run alone (it unwinds: servers stopped, report written), then SIGKILL to
    its whole group if it has not ended."""
    with contextlib.suppress(OSError, ValueError):
        log.write(f"[gpu_device] time is up: SIGTERM to {process.pid}\n".encode())
    with contextlib.suppress(OSError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=kill_after_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)


def gpus() -> str:
    """`nvidia-smi -L`'s answer, or why there is none."""
    try:
        smi = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi: {error}"
    return (smi.stdout or smi.stderr).strip() or "nvidia-smi said nothing"


def note(log_path: Path, text: str) -> None:
    print(text, flush=True)
    with log_path.open("a") as log:
        log.write(text + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m research.gpu_batching.gpu_device", description=__doc__
    )
    parser.add_argument("--kit", type=Path, default=KIT)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")))
    args, extra = parser.parse_known_args(argv)
    began = time.monotonic()
    deadline_s = float(os.environ.get("GPU_DEADLINE_S", DEADLINE_S))
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / LOG
    install = wheel_command(args.kit, SITE)
    if install is not None:
        finished = subprocess.run(install, capture_output=True, text=True, check=False)
        if finished.returncode != 0:
            note(log_path, f"installing the kit's wheels failed:\n{finished.stderr[-3000:]}")
            return finished.returncode
    note(log_path, gpus())
    spent = time.monotonic() - began
    command = batching_command(args.out, deadline_s - spent, extra)
    note(log_path, f"[gpu_device] {' '.join(command)}")
    env = child_env(SITE if install is not None else None)
    return run_logged(command, env, log_path, deadline_s - spent + STOP_AFTER_S)


if __name__ == "__main__":
    sys.exit(main())
