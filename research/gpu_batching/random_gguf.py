"""A random-weight llama-architecture GGUF of a realistic size with a real vocabulary: what the
GPU batching benchmark serves (gpu_batching.py), written where it runs because a model of
that size is too large to carry to the device.

The shape defaults to Llama 3.2 1B's (hidden 2048, 16 layers, 32 query and 8 key-value heads,
FFN 8192, tied embeddings, 1.24 B parameters, 2.5 GB in F16); the vocabulary and tokenizer
(`tokenizer.*` keys: Llama 3's 128,256 tokens, BPE merges, BOS/EOS) are copied from one of
llama.cpp's vocabulary GGUFs, so prompts tokenize as they would for the real model and the
output layer has the real width. Weights are small seeded normal values (std 0.02, norms 1):
what a forward pass costs does not depend on them. To write 1.2 B values in seconds, each
tensor is a window of one seeded pool of random values, at a random offset, tiled.

gguf-py is imported from the llama.cpp source tree given (the kit's copy on the device) or,
failing that, from the environment.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

POOL_VALUES = (1 << 24) + 4099  # not a multiple of any row width: tiled rows differ
WEIGHT_STD = 0.02
# A Llama 3 instruct template, for runs that want the adapter's chat-template prompt mode.
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)


@dataclass(frozen=True)
class Shape:
    hidden: int = 2048
    layers: int = 16
    heads: int = 32
    kv_heads: int = 8
    ffn: int = 8192
    context: int = 131072
    rope_theta: float = 500000.0
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def tensors(self, vocab: int) -> list[tuple[str, tuple[int, ...], str]]:
        """(name, numpy shape, dtype) in file order; numpy shapes are ggml's reversed (rows =
        outputs). No output.weight: tied to token_embd, as in Llama 3.2 1B."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        found: list[tuple[str, tuple[int, ...], str]] = [
            ("token_embd.weight", (vocab, h), "f16"),
            ("output_norm.weight", (h,), "f32"),
        ]
        for i in range(self.layers):
            found += [
                (f"blk.{i}.attn_norm.weight", (h,), "f32"),
                (f"blk.{i}.attn_q.weight", (self.heads * self.head_dim, h), "f16"),
                (f"blk.{i}.attn_k.weight", (kv, h), "f16"),
                (f"blk.{i}.attn_v.weight", (kv, h), "f16"),
                (f"blk.{i}.attn_output.weight", (h, self.heads * self.head_dim), "f16"),
                (f"blk.{i}.ffn_norm.weight", (h,), "f32"),
                (f"blk.{i}.ffn_gate.weight", (self.ffn, h), "f16"),
                (f"blk.{i}.ffn_up.weight", (self.ffn, h), "f16"),
                (f"blk.{i}.ffn_down.weight", (h, self.ffn), "f16"),
            ]
        return found

    def parameters(self, vocab: int) -> int:
        return sum(int(np.prod(shape)) for _, shape, _ in self.tensors(vocab))

    def file_bytes(self, vocab: int) -> int:
        """The tensor data's size (the file adds its metadata, a few MB for a real vocabulary)."""
        size = {"f16": 2, "f32": 4}
        return sum(int(np.prod(shape)) * size[kind] for _, shape, kind in self.tensors(vocab))


LLAMA_3_2_1B = Shape()
TINY = Shape(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, context=4096)


def import_gguf(llama_cpp_source: Path | None) -> Any:
    if llama_cpp_source is not None and (llama_cpp_source / "gguf-py").is_dir():
        sys.path.insert(0, str(llama_cpp_source / "gguf-py"))
    import gguf

    return gguf


def vocabulary_fields(gguf: Any, vocab_gguf: Path) -> list[tuple[str, Any, Any, Any]]:
    """(key, value, type, array item type) of each `tokenizer.*` key of a vocabulary GGUF."""
    reader = gguf.GGUFReader(vocab_gguf)
    fields = []
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        main = field.types[0]
        sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
        fields.append((field.name, field.contents(), main, sub))
    return fields


def write_model(
    path: Path,
    vocab_gguf: Path,
    shape: Shape = LLAMA_3_2_1B,
    *,
    seed: int = 0,
    chat_template: str | None = None,
    llama_cpp_source: Path | None = None,
) -> dict[str, Any]:
    """Write the model; returns what it is (shape, vocabulary, parameters, bytes, seconds)."""
    started = time.perf_counter()
    gguf = import_gguf(llama_cpp_source)
    fields = vocabulary_fields(gguf, vocab_gguf)
    tokens = next(value for key, value, _, _ in fields if key == "tokenizer.ggml.tokens")
    vocab = len(tokens)

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(f"random-llama-{shape.parameters(vocab) / 1e9:.2f}B")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, value, main, sub in fields:
        writer.add_key_value(key, value, main, sub_type=sub)
    if chat_template:
        writer.add_chat_template(chat_template)

    rng = np.random.default_rng(seed)
    pool = (rng.standard_normal(POOL_VALUES, dtype=np.float32) * WEIGHT_STD).astype(np.float16)
    layout = shape.tensors(vocab)
    for name, dims, kind in layout:
        dtype = np.float16 if kind == "f16" else np.float32
        nbytes = int(np.prod(dims)) * np.dtype(dtype).itemsize
        writer.add_tensor_info(name, dims, np.dtype(dtype), nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, dims, kind in layout:
        if kind == "f32":  # the RMS norms' gains
            writer.write_tensor_data(np.ones(dims, dtype=np.float32))
            continue
        count = int(np.prod(dims))
        window = np.roll(pool, -int(rng.integers(POOL_VALUES)))
        writer.write_tensor_data(np.resize(window, count).reshape(dims))
    writer.close()
    return {
        "architecture": "llama",
        "shape": asdict(shape),
        "vocabulary": vocab_gguf.name,
        "vocab_size": vocab,
        "tied_embeddings": True,
        "type": "F16",
        "parameters": shape.parameters(vocab),
        "file_bytes": path.stat().st_size,
        "chat_template": bool(chat_template),
        "seed": seed,
        "seconds": round(time.perf_counter() - started, 2),
    }
