"""A llama.cpp context on the engine's model for work decoded together: one KV stream per
sequence (`kv_unified` off), so no sequence reads another's cells (measured:
tests/adapter/model/test_batch_exactness.py). Same bits alone and together also need the same
kernels for each row: llama.cpp puts a run of consecutive streams, as many tokens of each, in
one micro-batch, so scoring_batching.py decodes spans of equal width on streams 0..k-1, padded
to blocks of rows, and chat_batching.py a chat's token alone (unless told to share). Batched
chats and batched decisions each have one (docs/architecture.md, "Batching").

A sequence cannot be copied into another stream cheaply (llama.cpp copies the whole stream,
every cell, 21 ms for 8,192 cells of Gemma 3 270M), so a branch is a saved sequence restored
into a free stream (1 ms for a 300-token state): `save` and `restore`. Tokens, positions and
logits only; the scheduling is the callers'. Not thread-safe: used on the model thread only.
"""

from __future__ import annotations

import contextlib
import ctypes
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from ..errors import EngineError
from .engine import Engine, restore_saved_sequence, saved_sequence, sequence_length

CELL_ROUNDING = 256  # llama.cpp gives each stream n_ctx / n_seq_max cells, rounded up to this


def rounded(cells: int) -> int:
    """`cells` as llama.cpp makes a stream of them (or a sliding window's part of one)."""
    return -(-cells // CELL_ROUNDING) * CELL_ROUNDING


def kv_bytes(
    engine: Engine, n_streams: int, n_ctx_per_stream: int, *, swa_full: bool = False
) -> int:
    """What a StreamContext of these arguments reserves for its KV cache: F16 keys and values of
    every layer for every cell of every stream. Without `swa_full` a sliding-window layer's
    stream keeps its window and a micro-batch, rounded (llama.cpp's llama_kv_cache_iswa)."""
    model = engine.model
    arch = engine.architecture
    n_head = max(1, llama_cpp.llama_model_n_head(model))
    head = llama_cpp.llama_model_n_embd(model) // n_head
    key = int(engine.metadata(f"{arch}.attention.key_length") or head)
    value = int(engine.metadata(f"{arch}.attention.value_length") or head)
    cells = rounded(n_ctx_per_stream)
    window = min(cells, rounded(llama_cpp.llama_model_n_swa(model) + engine.config.n_batch))
    windowed = 0 if swa_full else engine.window_layers
    layers = int(llama_cpp.llama_model_n_layer(model))
    per_cell = int(llama_cpp.llama_model_n_head_kv(model)) * (key + value) * 2
    return n_streams * ((layers - windowed) * cells + windowed * window) * per_cell


# A limit that cannot be read (another OS, no cgroup v2) bounds nothing.
UNREADABLE = (OSError, ValueError, StopIteration)


def memory_left() -> tuple[int, str]:
    """The bytes this process may still allocate, and what bounds them: the host's available
    memory, the container's cgroup limit less its use, or the address-space limit less its
    size, whichever is least."""
    left: list[tuple[int, str]] = []
    with contextlib.suppress(*UNREADABLE):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                left.append((int(line.split()[1]) * 1024, "the host's available memory"))
    with contextlib.suppress(*UNREADABLE):
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            left.append((int(limit) - used, "the container's memory limit (cgroup)"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        with contextlib.suppress(*UNREADABLE):
            status = Path("/proc/self/status").read_text().splitlines()
            size = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
            left.append((soft - size * 1024, "the address-space limit (RLIMIT_AS)"))
    return min(left, default=(2**63, "no known limit"))


class StreamContext:
    """`n_streams` sequences, each in a KV stream of its own of `n_ctx_per_stream` cells."""

    def __init__(
        self,
        engine: Engine,
        n_streams: int,
        n_ctx_per_stream: int,
        *,
        swa_full: bool = False,
        flash_attention: bool | None = False,
    ) -> None:
        config = engine.config
        params = llama_cpp.llama_context_default_params()
        # llama.cpp gives each stream n_ctx / n_seq_max cells, rounded up to 256.
        params.n_ctx = n_streams * rounded(n_ctx_per_stream)
        params.n_batch = config.n_batch
        params.n_ubatch = config.n_batch
        params.n_seq_max = n_streams
        params.kv_unified = False
        # A chat stream is never restored or cut back, so a sliding-window layer can keep only
        # its window (Gemma 3 270M, 8 streams of 8,192: 0.3 GiB of cache instead of 1.2).
        # Decisions keep every cell: a window's cells are reused in an order that follows how
        # llama.cpp splits the batches, which other streams' work changes.
        params.swa_full = swa_full
        # Flash attention's CPU kernel picks its way by the tokens each stream has in the micro-
        # batch and by the streams in it: one token of one stream divides the cells between
        # threads, 64 or more go in tiles. Batched decisions (calls of equal width,
        # scoring_batching.py) and chats taking turns (a chat a call, chat_batching.py)
        # meet the same way alone as together. None: llama.cpp's choice.
        params.flash_attn_type = {
            None: llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
            True: llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            False: llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        }[flash_attention]
        params.n_threads = config.n_threads
        params.n_threads_batch = config.n_threads
        params.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(engine.model, params)
        if not self.ctx:
            raise EngineError(f"llama.cpp could not create a context of {n_streams} KV streams")
        self.engine = engine
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_streams = n_streams
        self.n_ctx_per_stream = llama_cpp.llama_n_ctx_seq(self.ctx)
        self.n_batch = config.n_batch
        self._batch = llama_cpp.llama_batch_init(config.n_batch, 0, 1)
        # The engine's shutdown flag stops these decodes too (Engine.interrupt).
        llama_cpp.llama_set_abort_callback(
            self.ctx, engine._abort_check, ctypes.cast(engine._interrupt_flag, ctypes.c_void_p)
        )

    def close(self) -> None:
        if self.ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None

    def clear(self, stream: int) -> None:
        llama_cpp.llama_memory_seq_rm(self.memory, stream, -1, -1)

    def cut(self, stream: int, position: int) -> None:
        """Drop the stream's cells from `position` on (attention memories only)."""
        if not llama_cpp.llama_memory_seq_rm(self.memory, stream, position, -1):
            raise EngineError(f"llama.cpp could not cut stream {stream} back to {position} cells")

    def length(self, stream: int) -> int:
        return sequence_length(self.memory, stream)

    def save(self, stream: int) -> bytes:
        return saved_sequence(self.ctx, stream)

    def restore(self, stream: int, state: bytes) -> None:
        """`state` (from `save`) into a stream, cleared first: its cells from the first on."""
        self.clear(stream)
        restore_saved_sequence(self.ctx, stream, state)

    def decode(self, entries: Sequence[tuple[int, int, int, bool]]) -> None:
        """One batch of (token, position, stream, wants_logits); entry k's logits, if it wants
        them, at batch index k."""
        self._decode(list(entries))

    def prefill(self, stream: int, prompt: Sequence[int]) -> int:
        """Decode `prompt` on a cleared stream in chunks of n_batch tokens, each chunk its own
        batch (as Engine.generate does); the batch index of the last token's logits."""
        self.clear(stream)
        for start in range(0, len(prompt), self.n_batch):
            chunk = prompt[start : start + self.n_batch]
            last = start + len(chunk) == len(prompt)
            self._decode(
                [(t, start + i, stream, last and i == len(chunk) - 1) for i, t in enumerate(chunk)]
            )
        return len(prompt) - 1 - (len(prompt) - 1) // self.n_batch * self.n_batch

    def step(self, tokens: Sequence[tuple[int, int, int]]) -> None:
        """One batch of (stream, token, position), one token per stream; the logits of the
        k-th are at batch index k."""
        self._decode([(token, position, stream, True) for stream, token, position in tokens])

    def logits(self, index: int) -> np.ndarray:
        """A view of the last batch's logits at `index` (valid until the next decode)."""
        pointer = llama_cpp.llama_get_logits_ith(self.ctx, index)
        return np.ctypeslib.as_array(pointer, shape=(self.engine.n_vocab,))

    def sample(self, sampler: Any, index: int) -> int:
        return int(llama_cpp.llama_sampler_sample(sampler, self.ctx, index))

    def _decode(self, entries: Sequence[tuple[int, int, int, bool]]) -> None:
        batch = self._batch
        for i, (token, position, stream, wants_logits) in enumerate(entries):
            batch.token[i] = token
            batch.pos[i] = position
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = stream
            batch.logits[i] = wants_logits
        batch.n_tokens = len(entries)
        started = time.perf_counter()
        status = llama_cpp.llama_decode(self.ctx, batch)
        stats = self.engine.stats
        stats.seconds += time.perf_counter() - started
        stats.decode_calls += 1
        stats.tokens_decoded += len(entries)
        if status != 0:
            raise EngineError(f"llama_decode failed with status {status} for {len(entries)} tokens")
