"""The one llama.cpp context: tokens, sequences and logits, nothing about decisions or HTTP.

Built on llama-cpp-python's low-level API because branching needs a context with several
sequences (`n_seq_max`), which the high-level `Llama` class does not expose. Not thread-safe:
callers serialise access through the admission slot.

A model answered through its hidden states rather than its logits gets an embeddings context
instead (`Engine(..., embeddings=...)`): every token of a batch outputs its row, unpooled, and
there are no logits, so such an engine decodes and reads rows but cannot generate.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, TypeAlias, TypedDict, TypeVar, overload

import numpy as np

from ..deadline import Deadline
from ..errors import EngineError
from .prefix_tree import Node
from .tokenizer import UserTextTokenizer, cuttable

# llama.cpp's CPU threads meet at an OpenMP barrier after every operation, where libgomp spins
# 300,000 rounds before it sleeps. On shared cores (the event loop, the tokenizing threads) a
# thread spinning for a descheduled partner burns the core that partner needs. Measured with 16
# clients against 2 cores (tests/adapter/service/test_overload.py's load, 3 runs each): 300,000
# rounds, 5,000 requests in 21 s, 2.0 decisions/s; 3,000 rounds, 16 s and 2.5/s, with a quarter less
# server CPU; an idle decode the same ms per token, a whole decision within the runs' spread
# (+0-6%).
# libgomp reads this when it loads, with llama_cpp below; a value set by the operator wins.
os.environ.setdefault("GOMP_SPINCOUNT", "3000")
import llama_cpp  # noqa: E402

# A llama.cpp sampler chain (a `struct llama_sampler *`).
Sampler: TypeAlias = "ctypes._Pointer[llama_cpp.llama_sampler]"


class Sampling(TypedDict):
    """How a chat's tokens are drawn: `Engine.sampler`'s arguments."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: int


class DeadlinePassed(EngineError):
    """A batch was due after the deadline of the work in progress (Engine.deadline)."""


@dataclass(frozen=True)
class EngineConfig:
    n_ctx: int
    n_batch: int
    n_threads: int
    n_gpu_layers: int
    n_seq_max: int
    extra_buffer_types: bool = True
    # What tests/adapter/model/test_batch_exactness.py varies; the adapter serves the defaults.
    n_ubatch: int | None = None  # None: n_batch, one micro-batch per batch
    kv_unified: bool = True
    flash_attention: bool | None = None  # None: llama.cpp's choice (on for the CPU)
    swa_full: bool = True  # llama.cpp's default: sliding-window layers keep every cell


@dataclass(frozen=True)
class Branch:
    """Tokens decoded on a new sequence copied from `parent` (None: a fresh sequence).

    `logit_positions` are indexes into `tokens` whose next-token logits the caller needs.
    """

    tokens: Sequence[int]
    parent: int | None
    logit_positions: Sequence[int]


# What a caller keeps of one position's logits, read while llama.cpp still holds them: a full
# row is n_vocab floats (1 MiB on Gemma's 262k vocabulary), and a question's branches may want
# thousands of rows, so a caller that needs a few numbers per row should not keep the rows.
# Arguments: the branch's index (decode_branches; 0 in decode_sequence), the position in its
# tokens, and a view of the logits that is valid only during the call.
LogitsReader = Callable[[int, int, np.ndarray], object]
Read = TypeVar("Read")


def copy_logits(branch: int, position: int, logits: np.ndarray) -> np.ndarray:
    return logits.copy()


# One float64 row per thread, reused: readouts take the log-softmax of thousands of 262k-wide
# logit rows per request, and a fresh 2 MiB array per row (page faults, a buffered cast in exp)
# was a third of a 255-option question's time.
_scratch = threading.local()


def log_partition(logits: np.ndarray) -> float:
    """log(sum(exp(logits))) of one whole row, in float64: summed in float32, 262k terms are
    off by ~1e-6."""
    row = getattr(_scratch, "row", None)
    if row is None or row.shape != logits.shape:
        row = _scratch.row = np.empty(logits.shape, dtype=np.float64)
    peak = float(logits.max())
    np.subtract(logits, peak, out=row, dtype=np.float64)  # exact for float32 logits
    return peak + float(np.log(np.exp(row, out=row).sum()))


def token_log_probs(
    logits: np.ndarray, token: int, top: int
) -> tuple[float, list[tuple[int, float]]]:
    """The full-vocabulary log-probability of `token` in one logits row, and the `top` likeliest
    tokens with theirs."""
    log_total = log_partition(logits)  # log-probabilities order as the logits do
    best = np.argpartition(-logits, top)[:top] if top else np.array([], dtype=int)
    best = best[np.argsort(-logits[best], kind="stable")]
    return float(logits[token]) - log_total, [(int(t), float(logits[t]) - log_total) for t in best]


@dataclass
class DecodeStats:
    decode_calls: int = 0
    tokens_decoded: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "decode_calls": self.decode_calls,
            "tokens_decoded": self.tokens_decoded,
            "decode_seconds": round(self.seconds, 3),
        }


# llama.cpp names the buffer type of each part of the loaded weights in one log line each
# ("load_tensors:   CPU_REPACK model buffer size =  52.50 MiB"): the only place it tells
# whether weights went to an extra buffer type (repacked, AMX) rather than the plain mapping.
_MODEL_BUFFER = re.compile(rb"(\S+) model buffer size\s*=\s*([0-9.]+) MiB")
_model_buffers: dict[str, float] = {}
# Its log alone names the layers whose KV cache keeps only a sliding window (window_layers):
# "creating     SWA KV cache, size = 8192 cells", then "llama_kv_cache: size = 960.00 MiB
# (  8192 cells,  15 layers,  1/1 seqs), ...".
_WINDOW_CACHE = re.compile(rb"creating\s+SWA KV cache")
_CACHE_LAYERS = re.compile(rb"\(\s*\d+ cells,\s*(\d+) layers")
_window_layers: list[int] = []
# The log callback handed to llama.cpp: a reference kept, so ctypes does not collect it.
_log_callback: object = None


def silence_llama_logs() -> None:
    """llama.cpp logs every load to stderr; keep our JSON log lines the only output. Its model
    buffer lines are kept (model_buffers) for the start-up line, and its sliding-window KV
    caches' layers (window_layers)."""

    global _log_callback
    window_next = False  # a sliding-window cache is being made: its size line follows

    def keep_buffers(level: int, text: bytes | None, user_data: int | None) -> None:  # noqa: ARG001
        nonlocal window_next
        text = text or b""
        match = _MODEL_BUFFER.search(text)
        if match:
            name = match.group(1).decode("ascii", "replace")
            _model_buffers[name] = _model_buffers.get(name, 0.0) + float(match.group(2))
        if _WINDOW_CACHE.search(text):
            window_next = True
        elif window_next and (layers := _CACHE_LAYERS.search(text)):
            _window_layers.append(int(layers.group(1)))
            window_next = False

    _log_callback = drop = llama_cpp.llama_log_callback(keep_buffers)
    llama_cpp.llama_log_set(drop, ctypes.c_void_p())


# How a model remembers a sequence. A decision copies the state's whole sequence to each branch
# (llama_memory_seq_cp) and drops whole sequences after, never cutting one back, which a
# recurrent state could not undo: attention, sliding-window and hybrid memories all serve it.
MEMORY_KINDS = ("attention", "sliding window", "hybrid")


def memory_kind(model: llama_cpp.llama_model_p) -> str:
    """One of MEMORY_KINDS, as llama.cpp describes the loaded model (after `unservable`)."""
    if llama_cpp.llama_model_is_hybrid(model):
        return "hybrid"
    if llama_cpp.llama_model_n_swa(model) > 0:
        return "sliding window"
    return "attention"


def unservable(model: llama_cpp.llama_model_p, causal: str | None) -> str | None:
    """Why decisions cannot be read from this model, or None. `causal` is its
    `<architecture>.attention.causal` metadata ("false" for a bidirectional encoder)."""
    if llama_cpp.llama_model_is_diffusion(model):
        return (
            "a diffusion model attends both ways, so a state's logits depend on what follows "
            "it and no prefix can be shared"
        )
    if not llama_cpp.llama_model_has_decoder(model) or causal == "false":
        return "an encoder-only model has no causal next-token logits to read"
    if llama_cpp.llama_model_is_recurrent(model):
        # llama.cpp: "sequential split is not supported when there are coupled sequences".
        return (
            "llama.cpp cannot decode a token shared by several sequences of a pure recurrent "
            "memory, which the options' prefix tree needs"
        )
    return None


def tokenize_bytes(
    vocab: llama_cpp.llama_vocab_p, data: bytes, *, special: bool = False
) -> list[int]:
    """llama.cpp's tokens of `data`, without BOS; `special` parses control-token strings."""
    capacity = len(data) + 8
    buffer = (llama_cpp.llama_token * capacity)()
    count = llama_cpp.llama_tokenize(vocab, data, len(data), buffer, capacity, False, special)
    if count < 0:  # never for capacity >= bytes + a few, but keep llama.cpp's contract
        buffer = (llama_cpp.llama_token * -count)()
        count = llama_cpp.llama_tokenize(vocab, data, len(data), buffer, -count, False, special)
    return list(buffer[:count])


def user_text_tokenizer(
    vocab: llama_cpp.llama_vocab_p, tokenize: Callable[[bytes], list[int]] | None = None
) -> UserTextTokenizer:
    """The user-defined tokens llama.cpp cuts plain text at, read from the vocabulary; text is
    tokenized by `tokenize` (bytes -> ids; default: llama.cpp's, uninterruptible)."""
    control = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
    strips = llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP | llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP
    # Two calls into llama.cpp per token of a 262k vocabulary at every start: mapped over
    # the ctypes functions directly, no Python frame per token (0.31 s here, not 0.64).
    tokens = range(llama_cpp.llama_vocab_n_tokens(vocab))
    texts = list(map(llama_cpp.llama_vocab_get_text, repeat(vocab), tokens))
    attributes = list(map(llama_cpp.llama_vocab_get_attr, repeat(vocab), tokens))
    # The bytes one token can cover: a piece is its vocabulary text unescaped (SentencePiece's
    # "\u2581" and byte-level BPE's characters back to bytes, "<0xNN>" to one byte), never
    # longer, so the texts bound it without reading 262k pieces (half a second per start).
    longest = max(map(len, filter(None, texts)), default=1)
    user_defined = [
        (text or b"", attribute)
        for text, attribute in zip(texts, attributes, strict=False)
        if attribute & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED and not attribute & control
    ]
    specials = [text for text, _ in user_defined]
    # Stripping reaches past a cut: then llama.cpp's own tokenizer cuts the text.
    exact = not any(attribute & strips for _, attribute in user_defined) and cuttable(specials)
    tokenize = tokenize or (lambda data: tokenize_bytes(vocab, data))
    return UserTextTokenizer(tokenize, specials if exact else None, longest)


def saved_sequence(ctx: llama_cpp.llama_context_p, seq_id: int) -> bytes:
    """A sequence of a context as llama.cpp saves it (its KV cells, or recurrent state)."""
    size = llama_cpp.llama_state_seq_get_size(ctx, seq_id)
    buffer = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, seq_id)
    return ctypes.string_at(buffer, written)


def restore_saved_sequence(ctx: llama_cpp.llama_context_p, seq_id: int, state: bytes) -> None:
    buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    if llama_cpp.llama_state_seq_set_data(ctx, buffer, len(state), seq_id) == 0:
        raise EngineError(f"llama.cpp could not restore a saved state into sequence {seq_id}")


def sequence_length(memory: llama_cpp.llama_memory_t, seq_id: int) -> int:
    """Tokens a sequence holds (its last position + 1)."""
    last: int = llama_cpp.llama_memory_seq_pos_max(memory, seq_id)  # llama_cpp returns Any
    return last + 1


class Engine:
    """Owns the model and its context; decodes token sequences and returns logits.

    `embeddings`, when given, is asked once the model is loaded (its metadata readable) and
    before the context is made: True makes the embeddings context llama.cpp's own tools make for
    such a model (common/common.cpp): embeddings on, pooling none, at most n_batch outputs per
    batch and one per sequence for backend samplers, and n_batch equal to n_ubatch, since every
    row read must come from one micro-batch.
    """

    def __init__(
        self,
        gguf: Path,
        config: EngineConfig,
        *,
        quiet: bool = True,
        embeddings: Callable[[Engine], bool] | None = None,
    ) -> None:
        if quiet:
            silence_llama_logs()
        llama_cpp.llama_backend_init()
        if config.n_gpu_layers != 0 and not llama_cpp.llama_supports_gpu_offload():
            raise EngineError(
                f"GPU layers requested (n_gpu_layers={config.n_gpu_layers}) but this llama.cpp "
                "build has no GPU backend"
            )
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = 2**31 - 1 if config.n_gpu_layers < 0 else config.n_gpu_layers
        model_params.use_extra_bufts = config.extra_buffer_types
        _model_buffers.clear()
        self.model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), model_params)
        # MiB of weights per buffer type, as llama.cpp logged them (empty when not quiet).
        self.model_buffers = dict(_model_buffers)
        if not self.model:
            raise EngineError(f"llama.cpp could not load {gguf} (corrupt or unsupported GGUF?)")
        self.architecture = self.metadata("general.architecture") or "unknown"
        # Rows are read from the one sequence a prompt is decoded on, from an empty memory:
        # none of the logit readouts' limits apply (an encoder's rows are what is read).
        self.embeddings = embeddings is not None and embeddings(self)
        refusal = (
            None
            if self.embeddings
            else unservable(self.model, self.metadata(f"{self.architecture}.attention.causal"))
        )
        if refusal is not None:
            llama_cpp.llama_model_free(self.model)
            raise EngineError(f"{gguf.name} is a {self.architecture} model: {refusal}")
        self.memory_kind = memory_kind(self.model)
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)

        # The whole budget of one request shares a unified KV cache of n_ctx cells.
        n_seq_max = min(config.n_seq_max, llama_cpp.llama_max_parallel_sequences())
        context_params = llama_cpp.llama_context_default_params()
        context_params.n_ctx = config.n_ctx
        context_params.n_batch = config.n_batch
        # One micro-batch per batch: chunking must not depend on what else shares the batch.
        context_params.n_ubatch = config.n_ubatch or config.n_batch
        if self.embeddings:
            context_params.n_batch = context_params.n_ubatch
            context_params.embeddings = True
            context_params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_NONE
            context_params.n_outputs_max = context_params.n_batch
            context_params.n_outputs_max_per_seq = 1
        context_params.n_seq_max = n_seq_max
        context_params.kv_unified = config.kv_unified
        context_params.swa_full = config.swa_full
        if config.flash_attention is not None:
            context_params.flash_attn_type = (
                llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
                if config.flash_attention
                else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
        context_params.n_threads = config.n_threads
        context_params.n_threads_batch = config.n_threads
        context_params.no_perf = True
        # Reading the vocabulary (0.4 s of Python) overlaps creating the context (0.25 s in
        # llama.cpp, which releases the GIL): both only read the loaded model.
        _window_layers.clear()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="vocabulary") as reader:
            user_text = reader.submit(user_text_tokenizer, self.vocab, self._tokenize_bytes)
            self.ctx = llama_cpp.llama_init_from_model(self.model, context_params)
        # Layers whose KV cache may keep a sliding window's cells only, as llama.cpp logged
        # them making this context (0 when not logged, as when not quiet: every layer whole).
        self.window_layers = _window_layers[0] if _window_layers else 0
        if not self.ctx:  # the reader is done with the model: it may go
            llama_cpp.llama_model_free(self.model)
            raise EngineError(f"llama.cpp could not create a context of {config.n_ctx} tokens")
        self._user_text = user_text.result()
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_ctx = llama_cpp.llama_n_ctx(self.ctx)
        self.n_batch: int = context_params.n_batch
        self.n_seq_max = n_seq_max
        self.config = config
        # The width of an embeddings row (a decision head's outputs; 0 without embeddings).
        self.n_embd_out: int = (
            llama_cpp.llama_model_n_embd_out(self.model) if self.embeddings else 0
        )
        # A token may belong to every sequence of a prefix tree (decode_prefix_tree).
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, n_seq_max)
        self.stats = DecodeStats()
        self._deadline: Deadline | None = None
        self._install_interrupt()

    def close(self) -> None:
        if getattr(self, "ctx", None):
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self.ctx)
            llama_cpp.llama_model_free(self.model)
            self.ctx = None

    # --- model facts -------------------------------------------------------------------
    def metadata(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(4096)
        length = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buffer, len(buffer))
        return buffer.value.decode("utf-8", "replace") if length >= 0 else None

    def metadata_items(self, prefix: str) -> dict[str, str]:
        """Every metadata key that starts with `prefix`, and its value as text."""
        found = {}
        key = ctypes.create_string_buffer(256)
        value = ctypes.create_string_buffer(4096)
        for index in range(llama_cpp.llama_model_meta_count(self.model)):
            if llama_cpp.llama_model_meta_key_by_index(self.model, index, key, len(key)) < 0:
                continue
            name = key.value.decode("utf-8", "replace")
            if not name.startswith(prefix):
                continue
            length = llama_cpp.llama_model_meta_val_str_by_index(
                self.model, index, value, len(value)
            )
            if length >= 0:
                found[name] = value.value.decode("utf-8", "replace")
        return found

    def named_chat_template(self, name: str) -> str | None:
        """A chat template the GGUF names (`tokenizer.chat_template.<name>`)."""
        template = llama_cpp.llama_model_chat_template(self.model, name.encode())
        return template.decode("utf-8") if template else None

    @property
    def description(self) -> str:
        buffer = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.model, buffer, len(buffer))
        return buffer.value.decode("utf-8", "replace")

    @property
    def chat_template(self) -> str | None:
        template = llama_cpp.llama_model_chat_template(self.model, None)
        return template.decode("utf-8") if template else None

    @property
    def gpu_offload(self) -> bool:
        return bool(llama_cpp.llama_supports_gpu_offload())

    @property
    def adds_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    @property
    def bos_token(self) -> int:
        token: int = llama_cpp.llama_vocab_bos(self.vocab)  # llama_cpp's functions return Any
        return token

    @property
    def mask_token(self) -> int | None:
        return self._special(llama_cpp.llama_vocab_mask(self.vocab))

    @property
    def separator_token(self) -> int | None:
        return self._special(llama_cpp.llama_vocab_sep(self.vocab))

    @staticmethod
    def _special(token: int) -> int | None:
        return None if token == llama_cpp.LLAMA_TOKEN_NULL else token

    def is_end_of_generation(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    # --- text <-> tokens ---------------------------------------------------------------
    def tokenize(self, text: str, *, special: bool, limit: int | None = None) -> list[int]:
        """Tokens of `text` without BOS; `special=False` keeps control-token strings as text.

        User text (special=False) goes through UserTextTokenizer: linear time, and
        TokenLimitExceeded without tokenizing when a cheap bound proves it over `limit`.
        """
        if not special:
            return self._user_text.tokenize(text, limit)
        return self._tokenize_bytes(text.encode("utf-8"), special=True)

    def _tokenize_bytes(self, data: bytes, *, special: bool = False) -> list[int]:
        if self._interrupt_flag[0] != b"\0":  # shutting down: long texts go in many calls
            raise EngineError("tokenizing interrupted: the server is shutting down")
        return tokenize_bytes(self.vocab, data, special=special)

    def piece(self, token: int, *, special: bool = True) -> bytes:
        buffer = ctypes.create_string_buffer(128)
        length = self._piece_into(buffer, token, special=special)
        if length > len(buffer):
            buffer = ctypes.create_string_buffer(length)
            self._piece_into(buffer, token, special=special)
        return buffer.raw[:length]

    def _piece_into(self, buffer: ctypes.Array[ctypes.c_char], token: int, *, special: bool) -> int:
        """The piece's length in bytes; its bytes are in `buffer` when they fit (llama.cpp
        returns the length it needs, negated, when they do not)."""
        length: int = llama_cpp.llama_token_to_piece(  # llama_cpp's functions return Any
            self.vocab, token, buffer, len(buffer), 0, special
        )
        return -length if length < 0 else length

    def is_control(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_control(self.vocab, token))

    # --- decoding ----------------------------------------------------------------------
    def reset(self) -> None:
        # Metadata only: zeroing the KV buffers (data=True) costs milliseconds per request,
        # and empty cells are masked out of attention whatever they hold.
        llama_cpp.llama_memory_clear(self.memory, False)

    def drop_sequence(self, seq_id: int) -> None:
        # Removing a whole sequence is allowed for every memory type, hybrid ones included.
        llama_cpp.llama_memory_seq_rm(self.memory, seq_id, -1, -1)

    def copy_sequence(self, source: int, target: int) -> None:
        llama_cpp.llama_memory_seq_cp(self.memory, source, target, -1, -1)

    def save_sequence(self, seq_id: int) -> bytes:
        """The sequence's whole memory (KV cells, or recurrent state for hybrid models)."""
        return saved_sequence(self.ctx, seq_id)

    def restore_sequence(self, seq_id: int, state: bytes) -> None:
        restore_saved_sequence(self.ctx, seq_id, state)

    def sequence_length(self, seq_id: int) -> int:
        return sequence_length(self.memory, seq_id)

    def _decode(self, entries: list[tuple[int, int, Sequence[int], bool]]) -> None:
        """Decode (token, position, sequences, wants_logits) entries as exactly one batch."""
        batch = self._batch
        for i, (token, position, seq_ids, wants_logits) in enumerate(entries):
            batch.token[i] = token
            batch.pos[i] = position
            batch.n_seq_id[i] = len(seq_ids)
            for k, seq_id in enumerate(seq_ids):
                batch.seq_id[i][k] = seq_id
            batch.logits[i] = wants_logits
        batch.n_tokens = len(entries)
        started = time.perf_counter()
        if self._deadline is not None and self._deadline.passed():
            raise DeadlinePassed(f"the deadline passed before a batch of {len(entries)} tokens")
        status = llama_cpp.llama_decode(self.ctx, batch)
        self.stats.seconds += time.perf_counter() - started
        self.stats.decode_calls += 1
        self.stats.tokens_decoded += len(entries)
        if status != 0:
            raise EngineError(f"llama_decode failed with status {status} for {len(entries)} tokens")

    def decode_embeddings(
        self, tokens: Sequence[int], start: int, rows: Sequence[int] = ()
    ) -> np.ndarray:
        """Append `tokens` to sequence 0 at `start` as exactly one batch (at most n_batch) of an
        embeddings engine; a copy of the rows of `rows` (indexes into `tokens`), n_embd_out
        floats each. Every token is an output: llama.cpp outputs them all in this mode."""
        if not self.embeddings:
            raise EngineError("this engine reads logits, not embeddings")
        if len(tokens) > self.n_batch:
            raise EngineError(f"{len(tokens)} tokens in one batch of at most {self.n_batch}")
        self._decode([(token, start + i, (0,), True) for i, token in enumerate(tokens)])
        found = np.empty((len(rows), self.n_embd_out), dtype=np.float32)
        for k, row in enumerate(rows):
            pointer = llama_cpp.llama_get_embeddings_ith(self.ctx, row)
            if not pointer:
                raise EngineError(f"llama.cpp has no embeddings row for batch index {row}")
            found[k] = np.ctypeslib.as_array(pointer, shape=(self.n_embd_out,))
        return found

    def _logits(self, batch_index: int) -> np.ndarray:
        """A view of llama.cpp's logits for one output of the last batch (valid until the next)."""
        pointer = llama_cpp.llama_get_logits_ith(self.ctx, batch_index)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def decode_sequence(
        self,
        seq_id: int,
        tokens: Sequence[int],
        start: int,
        logit_positions: Sequence[int] = (),
        read: LogitsReader = copy_logits,
        branch: int = 0,
    ) -> dict[int, object]:
        """Append `tokens` to one sequence at `start`, in fixed chunks of n_batch tokens; what
        `read` returns for each of `logit_positions`, by position.

        The chunking depends only on the tokens, so the same prefix always gives the same state.
        """
        wanted = set(logit_positions)
        results: dict[int, object] = {}
        for chunk_start in range(0, len(tokens), self.n_batch):
            chunk = range(chunk_start, min(chunk_start + self.n_batch, len(tokens)))
            self._decode([(tokens[i], start + i, (seq_id,), i in wanted) for i in chunk])
            for batch_index, i in enumerate(chunk):
                if i in wanted:
                    results[i] = read(branch, i, self._logits(batch_index))
        return results

    @overload
    def decode_branches(
        self, branches: Sequence[Branch], first_seq_id: int
    ) -> list[dict[int, np.ndarray]]: ...

    @overload
    def decode_branches(
        self,
        branches: Sequence[Branch],
        first_seq_id: int,
        read: Callable[[int, int, np.ndarray], Read],
    ) -> list[dict[int, Read]]: ...

    def decode_branches(
        self, branches: Sequence[Branch], first_seq_id: int, read: LogitsReader = copy_logits
    ) -> list[dict[int, Any]]:
        """Decode each branch on its own sequence (first_seq_id, first_seq_id + 1, ...); per
        branch, what `read` returns for each of its logit positions, by position.

        Branches that fit go into one batch together; a branch never straddles two batches
        unless it alone exceeds n_batch, so each branch's numbers do not depend on the others.
        """
        if first_seq_id + len(branches) > self.n_seq_max:
            raise EngineError("more branches than sequences in the context")
        results: list[dict[int, object]] = [{} for _ in branches]
        pending: list[tuple[int, Branch, int]] = []  # (branch index, branch, start position)
        for index, branch in enumerate(branches):
            seq_id = first_seq_id + index
            start = 0
            if branch.parent is not None:
                self.copy_sequence(branch.parent, seq_id)
                start = self.sequence_length(branch.parent)
            pending.append((index, branch, start))

        group: list[tuple[int, Branch, int]] = []
        group_tokens = 0
        for item in pending + [None]:  # None flushes the last group
            if item is None or group_tokens + len(item[1].tokens) > self.n_batch:
                self._decode_group(group, first_seq_id, results, read)
                group, group_tokens = [], 0
            if item is None:
                break
            index, branch, start = item
            if len(branch.tokens) > self.n_batch:
                results[index] = self.decode_sequence(
                    first_seq_id + index, branch.tokens, start, branch.logit_positions, read, index
                )
            else:
                group.append(item)
                group_tokens += len(branch.tokens)
        return results

    def decode_prefix_tree(
        self,
        nodes: Sequence[Node],
        n_paths: int,
        parent: int,
        first_seq_id: int,
        read: Callable[[int, np.ndarray], Read],
    ) -> list[Read]:
        """Decode `n_paths` token paths that continue sequence `parent` as one prefix tree
        (prefix_tree.tree_nodes), path k on sequence first_seq_id + k; what `read` returns for
        the logits after each node, by node index.

        A prefix that several paths share is decoded once, as one token of all their sequences
        (llama.cpp masks attention by sequence, so each path still reads only its own tokens).
        The batch is the nodes in order, so it depends on the set of paths only when the caller
        gives them sorted. A tree wider than n_batch must be a single path: it is decoded in
        n_batch chunks, as decode_sequence does.
        """
        if first_seq_id + n_paths > self.n_seq_max:
            raise EngineError("more branches than sequences in the context")
        start = self.sequence_length(parent)
        for offset in range(n_paths):
            self.copy_sequence(parent, first_seq_id + offset)
        if len(nodes) > self.n_batch:
            if n_paths != 1:
                raise EngineError("a prefix tree of several paths wider than a batch")
            tokens = [node.token for node in nodes]
            by_position: dict[int, Read] = {}

            def keep(_branch: int, position: int, logits: np.ndarray) -> None:
                by_position[position] = read(position, logits)

            self.decode_sequence(first_seq_id, tokens, start, range(len(tokens)), keep)
            return [by_position[position] for position in range(len(tokens))]
        self._decode(
            [
                (node.token, start + node.depth - 1, [first_seq_id + k for k in node.paths], True)
                for node in nodes
            ]
        )
        return [read(index, self._logits(index)) for index in range(len(nodes))]

    def _decode_group(
        self,
        group: list[tuple[int, Branch, int]],
        first_seq_id: int,
        results: list[dict[int, object]],
        read: LogitsReader,
    ) -> None:
        if not group:
            return
        entries: list[tuple[int, int, Sequence[int], bool]] = []
        wanted_at: list[tuple[int, int, int]] = []  # (batch index, branch index, position)
        for index, branch, start in group:
            wanted = set(branch.logit_positions)
            for i, token in enumerate(branch.tokens):
                if i in wanted:
                    wanted_at.append((len(entries), index, i))
                entries.append((token, start + i, (first_seq_id + index,), i in wanted))
        self._decode(entries)
        for batch_index, index, position in wanted_at:
            results[index][position] = read(index, position, self._logits(batch_index))

    # --- stopping at shutdown ----------------------------------------------------------
    def _install_interrupt(self) -> None:
        """Let interrupt() abort a decode between graph nodes. llama.cpp calls the check at every
        node, so it must not be Python (that would take the GIL per node): it is libc's strlen
        on a flag byte, which returns 0 until interrupt() writes the byte."""
        self._interrupt_flag = ctypes.create_string_buffer(2)
        self._abort_check = ctypes.cast(ctypes.CDLL(None).strlen, llama_cpp.ggml_abort_callback)
        llama_cpp.llama_set_abort_callback(
            self.ctx, self._abort_check, ctypes.cast(self._interrupt_flag, ctypes.c_void_p)
        )

    @contextlib.contextmanager
    def deadline(self, until: Deadline) -> Iterator[None]:
        """Inside the block no batch starts past `until`: DeadlinePassed instead. Checked
        between batches, so a batch already running ends first."""
        self._deadline = until
        try:
            yield
        finally:
            self._deadline = None

    def interrupt(self) -> None:
        """Abort the decode in progress and every later one (shutdown): they raise EngineError."""
        self._interrupt_flag[0] = b"!"

    # --- generation --------------------------------------------------------------------
    def sampled_log_probs(self, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
        """The full-vocabulary log-probability of `token`, just sampled by `generate`, and the
        `top` likeliest tokens with theirs, from the logits it was sampled from (raw, before
        temperature and truncation, as llama-server and OpenAI report them). Call it before
        `generate` resumes: the next decode replaces those logits."""
        return token_log_probs(self._logits(-1), token, top)

    @staticmethod
    def free_sampler(sampler: Sampler) -> None:
        llama_cpp.llama_sampler_free(sampler)

    def sampler(
        self, *, temperature: float, top_p: float, top_k: int, min_p: float, seed: int
    ) -> Sampler:
        """A new llama.cpp sampler chain, llama-server's order: top_k, top_p, min_p,
        temperature, draw (sampling.py); greedy at temperature 0. Free it with free_sampler."""
        sampler: Sampler = llama_cpp.llama_sampler_chain_init(  # llama_cpp's functions: Any
            llama_cpp.llama_sampler_chain_default_params()
        )
        if temperature <= 0:
            llama_cpp.llama_sampler_chain_add(sampler, llama_cpp.llama_sampler_init_greedy())
            return sampler
        if top_k > 0:
            # Any k from the vocabulary's size up keeps every token; a k past 32 bits
            # would reach llama.cpp wrapped (2**32 + 1 as 1, greedy).
            llama_cpp.llama_sampler_chain_add(
                sampler, llama_cpp.llama_sampler_init_top_k(min(top_k, self.n_vocab))
            )
        llama_cpp.llama_sampler_chain_add(sampler, llama_cpp.llama_sampler_init_top_p(top_p, 1))
        if min_p > 0:
            llama_cpp.llama_sampler_chain_add(sampler, llama_cpp.llama_sampler_init_min_p(min_p, 1))
        llama_cpp.llama_sampler_chain_add(sampler, llama_cpp.llama_sampler_init_temp(temperature))
        llama_cpp.llama_sampler_chain_add(sampler, llama_cpp.llama_sampler_init_dist(seed))
        return sampler

    def generate(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int,
        temperature: float,
        top_p: float,
        top_k: int,
        seed: int,
        min_p: float = 0.0,
    ) -> Iterator[int]:
        """Sample tokens after `prompt` on sequence 0 until end-of-generation or max_tokens,
        through llama-server's chain: top_k, top_p, min_p, temperature, draw (sampling.py)."""
        if self.embeddings:
            raise EngineError("an embeddings context has no logits to sample from")
        self.reset()
        sampler = self.sampler(
            temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, seed=seed
        )
        try:
            position = 0
            for chunk_start in range(0, len(prompt), self.n_batch):
                chunk = prompt[chunk_start : chunk_start + self.n_batch]
                last = chunk_start + len(chunk) == len(prompt)
                self._decode(
                    [
                        (t, position + i, (0,), last and i == len(chunk) - 1)
                        for i, t in enumerate(chunk)
                    ]
                )
                position += len(chunk)
            for step in range(max_tokens):
                token = llama_cpp.llama_sampler_sample(sampler, self.ctx, -1)
                if self.is_end_of_generation(token):
                    return
                yield token
                if step + 1 == max_tokens or position >= self.n_ctx:
                    return  # the last token needs no decode: nothing will follow it
                self._decode([(token, position, (0,), True)])
                position += 1
        finally:
            llama_cpp.llama_sampler_free(sampler)
            self.reset()
