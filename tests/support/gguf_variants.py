"""Copies of the bundled GGUF with another chat template (weights unchanged, copied as bytes)."""

from __future__ import annotations

import mmap
import shutil
import struct
from pathlib import Path

import numpy as np
from gguf import GGUF_DEFAULT_ALIGNMENT, GGUFReader, GGUFValueType, Keys

DATA = Path(__file__).parent / "data"
# The chat template Google ships with Gemma 3 instruction-tuned models (tokenizer_config.json).
GEMMA3_CHAT_TEMPLATE = (DATA / "gemma3_chat_template.jinja").read_text()

_SCALAR_BYTES = {
    kind: np.dtype(dtype).itemsize for kind, dtype in GGUFReader.gguf_scalar_to_np.items()
}


class _Cursor:
    """Reads a little-endian GGUF header (spec: ggml/docs/gguf.md) from a buffer."""

    def __init__(self, buffer, offset: int = 0) -> None:
        self.buffer, self.offset = buffer, offset

    def take(self, layout: str) -> tuple:
        values = struct.unpack_from("<" + layout, self.buffer, self.offset)
        self.offset += struct.calcsize("<" + layout)
        return values

    def string(self) -> bytes:
        (length,) = self.take("Q")
        self.offset += length
        return bytes(self.buffer[self.offset - length : self.offset])

    def skip_value(self, kind: int) -> None:
        if kind == GGUFValueType.STRING:
            self.string()
        elif kind == GGUFValueType.ARRAY:
            item_kind, count = self.take("IQ")
            if item_kind == GGUFValueType.STRING:
                for _ in range(count):
                    self.string()
            else:
                self.offset += count * _SCALAR_BYTES[GGUFValueType(item_kind)]
        else:
            self.offset += _SCALAR_BYTES[GGUFValueType(kind)]


def _string(text: str) -> bytes:
    encoded = text.encode()
    return struct.pack("<Q", len(encoded)) + encoded


def with_chat_template(source: Path, directory: Path, template: str) -> Path:
    """Write `directory/model.gguf`: `source` with `tokenizer.chat_template` set to `template`.

    Only the header, the metadata and the tensor index are rewritten; the weights are copied as
    bytes. (gguf-py's own rewriter, gguf_new_metadata, parses all 262k vocabulary entries into
    Python objects and takes 12 s per copy on this model.)
    """
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "model.gguf"
    with source.open("rb") as src, mmap.mmap(src.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cursor = _Cursor(buf)
        magic, version, n_tensors, n_kv = cursor.take("IIQQ")
        kept, alignment = [], GGUF_DEFAULT_ALIGNMENT
        for _ in range(n_kv):
            start = cursor.offset
            key = cursor.string().decode()
            (kind,) = cursor.take("I")
            if key == Keys.General.ALIGNMENT:
                (alignment,) = cursor.take("I")
            else:
                cursor.skip_value(kind)
            if key != Keys.Tokenizer.CHAT_TEMPLATE:
                kept.append(buf[start : cursor.offset])
        index_start = cursor.offset
        for _ in range(n_tensors):  # name, dimensions, type, offset into the data
            cursor.string()
            (n_dims,) = cursor.take("I")
            cursor.offset += 8 * n_dims + 4 + 8
        index = buf[index_start : cursor.offset]
        data_start = -(-cursor.offset // alignment) * alignment

        chat_template = (
            _string(Keys.Tokenizer.CHAT_TEMPLATE)
            + struct.pack("<I", GGUFValueType.STRING)
            + _string(template)
        )
        with target.open("wb") as out:
            out.write(struct.pack("<IIQQ", magic, version, n_tensors, len(kept) + 1))
            out.writelines([*kept, chat_template, index])
            out.write(b"\0" * (-out.tell() % alignment))
            src.seek(data_start)
            shutil.copyfileobj(src, out, 16 << 20)
    return target
