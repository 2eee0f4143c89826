"""SHA-256 of model files: the packager hashes them as they stream into the archive, the adapter
hashes the extracted file; both through `HashingReader`, so the two digests are one function's."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO


class HashingReader:
    """Reads through to `stream`, hashing what passes (the packager streams files into tar)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._digest = hashlib.sha256()
        self.bytes_read = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._stream.read(size)
        self._digest.update(chunk)
        self.bytes_read += len(chunk)
        return chunk

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def sha256_of_file(path: str | Path, *, chunk_bytes: int = 1 << 20) -> str:
    """The file's SHA-256, read in chunks (a GGUF may be many GB)."""
    with open(path, "rb") as stream:
        reader = HashingReader(stream)
        while reader.read(chunk_bytes):
            pass
    return reader.hexdigest()


class HashingWriter:
    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._digest = hashlib.sha256()
        self.bytes_written = 0

    def write(self, data: bytes) -> int:
        self._digest.update(data)
        self.bytes_written += len(data)
        return self._stream.write(data)

    def flush(self) -> None:
        self._stream.flush()

    def hexdigest(self) -> str:
        return self._digest.hexdigest()
