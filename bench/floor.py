"""The floor: llama.cpp alone (llama-cpp-python's own Llama.eval) prefilling the same tokens
with the same threads and batch size, no HTTP, no adapter."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from bench.workloads import THREADS


@contextlib.contextmanager
def _model_params(**fields) -> Iterator[None]:
    """Llama takes no argument for some llama_model_params fields (use_extra_bufts): its
    defaults are amended while it is constructed."""
    import llama_cpp.llama_cpp as bindings

    defaults = bindings.llama_model_default_params

    def amended():
        params = defaults()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    bindings.llama_model_default_params = amended
    try:
        yield
    finally:
        bindings.llama_model_default_params = defaults


class Floor:
    def __init__(
        self, gguf: Path, n_ctx: int = 8192, n_batch: int = 512, *, extra_buffer_types=True
    ) -> None:
        from llama_cpp import Llama

        # flash_attn: the adapter's context keeps llama.cpp's default (auto, which is on for the
        # CPU backend); Llama's own default (off) is ~20% slower at 2,048 tokens here.
        with _model_params(use_extra_bufts=extra_buffer_types):
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
