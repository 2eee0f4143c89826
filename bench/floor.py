"""The floor: llama.cpp alone (llama-cpp-python's own Llama.eval) prefilling the same tokens
with the same threads and batch size, no HTTP, no adapter."""

from __future__ import annotations

import time
from pathlib import Path

from bench.workloads import THREADS


class Floor:
    def __init__(self, gguf: Path, n_ctx: int = 8192, n_batch: int = 512) -> None:
        from llama_cpp import Llama

        # flash_attn: the adapter's context keeps llama.cpp's default (auto, which is on for the
        # CPU backend); Llama's own default (off) is ~20% slower at 2,048 tokens here.
        self.llm = Llama(
            model_path=str(gguf),
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_threads=THREADS,
            n_threads_batch=THREADS,
            flash_attn=True,
            verbose=False,
        )

    def prefill(self, tokens: list[int]) -> float:
        self.llm.reset()
        started = time.perf_counter()
        self.llm.eval(tokens)
        return time.perf_counter() - started

    def close(self) -> None:
        self.llm.close()

    def __enter__(self) -> Floor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
