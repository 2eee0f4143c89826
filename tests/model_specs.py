"""Model spec files over local GGUFs, so packaging runs without a download."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def local_spec_file(directory: Path, gguf: Path, pinned_sha256: str, **extra) -> Path:
    """A spec named `tiny-local` whose GGUF is `gguf`, pinned to `pinned_sha256`."""
    spec = {
        "name": "tiny-local",
        "model_name": "Tiny-Local",
        "gguf": {"kind": "local", "path": str(gguf), "sha256": pinned_sha256, **extra},
    }
    path = directory / "tiny.spec.json"
    path.write_text(json.dumps(spec))
    return path


def tiny_spec(directory: Path) -> Path:
    """A spec over a 9-byte GGUF written into `directory`, pinned to its real checksum."""
    gguf = directory / "tiny.gguf"
    gguf.write_bytes(b"GGUF tiny")
    return local_spec_file(directory, gguf, hashlib.sha256(gguf.read_bytes()).hexdigest())
