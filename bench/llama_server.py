"""llama-server, the stock DLC's server, started on the bundled model with the adapter's
settings, and the one request the side-by-side benchmark sends it (`POST /completion`)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from launcher import RunningServer, free_port, stop, wait_until_healthy

READY_TIMEOUT_S = 120


@dataclass(frozen=True)
class ServerSettings:
    """What the adapter's engine is configured with (decision_adapter.model.engine.Engine): threads
    for prompt and generation, one micro-batch per batch, llama.cpp's default flash attention
    (auto) and full-size sliding-window cache (llama_context_default_params has swa_full on;
    llama-server's own default is off, which would stop it reusing a prefix on Gemma 3)."""

    threads: int
    n_ctx: int = 8192
    n_batch: int = 512
    parallel: int = 1  # slots: llama-server batches the slots' tokens together

    def arguments(self) -> list[str]:
        return [
            "--threads",
            str(self.threads),
            "--threads-batch",
            str(self.threads),
            "--ctx-size",
            str(self.n_ctx),
            "--batch-size",
            str(self.n_batch),
            "--ubatch-size",
            str(self.n_batch),
            "--flash-attn",
            "auto",
            "--swa-full",
            "--parallel",
            str(self.parallel),
            "--no-webui",
        ]


LlamaServer = RunningServer


def cpu_features(text: str) -> str | None:
    """The CPU backend's feature list (`CPU : SSE3 = 1 | ...`) from llama.cpp's system info,
    normalised for comparison."""
    match = re.search(r"CPU : ([^\n]*?)\s*(?:\n|$)", text)
    if not match:
        return None
    return " | ".join(part.strip() for part in match.group(1).split("|") if part.strip())


def built_cpu_features(binary: Path) -> str | None:
    """What the build's own libllama reports (llama-server logs it only at trace verbosity,
    which would slow it down). Asked in a child process: this one has llama-cpp-python's."""
    library = binary.parent / "libllama.so"
    probe = (
        "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
        "lib.llama_print_system_info.restype = ctypes.c_char_p; "
        "print(lib.llama_print_system_info().decode())"
    )
    try:
        finished = subprocess.run(
            [sys.executable, "-c", probe, str(library)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return cpu_features(finished.stdout)


@contextlib.contextmanager
def running_llama_server(
    binary: Path, gguf: Path, settings: ServerSettings, log_dir: Path
) -> Iterator[LlamaServer]:
    port = free_port()
    log_path = log_dir / f"llama-server-{port}.log"
    command = [
        str(binary),
        "--model",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *settings.arguments(),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    server = LlamaServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_until_healthy(
            process, f"{server.url}/health", server.log, READY_TIMEOUT_S, "llama-server"
        )
        yield server
    finally:
        stop(process)


def completion_body(
    tokens: list[int],
    *,
    n_predict: int = 1,
    n_probs: int = 0,
    cache_prompt: bool,
    stream: bool = False,
    stop: list[str] | None = None,
) -> dict:
    """/completion over the very token ids the adapter decodes (a token array is taken as is:
    no BOS added, nothing re-tokenized), greedy like the adapter's temperature 0."""
    body = {
        "prompt": tokens,
        "n_predict": n_predict,
        "temperature": 0,
        "cache_prompt": cache_prompt,
        "stream": stream,
    }
    if n_probs:
        body["n_probs"] = n_probs
    if stop:
        body["stop"] = stop
    return body


def start_beside(
    stack: contextlib.ExitStack, build, gguf: Path, threads: int, log_dir: Path
) -> tuple[LlamaServer | None, dict]:
    """llama-server for the side-by-side run, held open by `stack`; None and the reason when
    it cannot run. Records its arguments and whether it runs the CPU kernels the adapter's
    llama-cpp-python runs (both print llama.cpp's CPU feature list)."""
    info: dict = {"build": build.as_dict()}
    if build.binary is None:
        return None, info | {"skipped_reason": build.reason}
    settings = ServerSettings(threads=threads)
    try:
        server = stack.enter_context(running_llama_server(build.binary, gguf, settings, log_dir))
    except (RuntimeError, OSError) as error:
        return None, info | {"skipped_reason": f"llama-server did not start: {error}"[-2000:]}
    import llama_cpp

    ours = cpu_features(llama_cpp.llama_print_system_info().decode())
    theirs = built_cpu_features(build.binary)
    return server, info | {
        "arguments": settings.arguments(),
        "cpu_features": {"llama_cpp_python": ours, "llama_server": theirs},
        "same_cpu_features": ours is not None and ours == theirs,
    }
