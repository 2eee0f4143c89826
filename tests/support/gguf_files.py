"""Small real GGUF files (a header and metadata, no tensors) for the tests that package or read a
GGUF's metadata without loading it: written by the `gguf` package, the engine tree's own writer."""

from __future__ import annotations

import tempfile
from pathlib import Path

from gguf import GGUFWriter


def gguf_bytes(metadata: dict[str, str] | None = None, *, filler: bytes = b"") -> bytes:
    """A GGUF of architecture `tiny` with `metadata` as string keys, then `filler` (bytes that
    stand in for weights: checksums and sizes change with them)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "tiny.gguf"
        writer = GGUFWriter(path, arch="tiny")
        for key, value in (metadata or {}).items():
            writer.add_string(key, value)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes() + filler


def decision_gguf_bytes(decision_type: str, **temperatures: str) -> bytes:
    """A GGUF that declares a decision head: its type, `systemone` template and temperatures
    (`choice_3_5="0.7"` is `tiny.decision.temperature.choice.3_5`)."""
    metadata = {
        "tiny.decision.type": decision_type,
        "tokenizer.chat_template.systemone": "{{ state }}",
    }
    for name, value in temperatures.items():
        kind, _, bucket = name.partition("_")
        key = f"tiny.decision.temperature.{kind}" + (f".{bucket}" if bucket else "")
        metadata[key] = value
    return gguf_bytes(metadata)
