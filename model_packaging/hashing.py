"""File-object wrappers that hash bytes as they pass, so nothing is read twice."""

from __future__ import annotations

import hashlib
from typing import BinaryIO


class HashingReader:
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
