"""Model spec files over local GGUFs, so packaging runs without a download, and model
directories as an archive extracts them (a GGUF and its manifest)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from model_manifest import MANIFEST_FILENAME
from tests.support.gguf_files import gguf_bytes


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
    """A spec over a small GGUF (no tensors) written into `directory`, pinned to its checksum."""
    gguf = directory / "tiny.gguf"
    gguf.write_bytes(gguf_bytes())
    return local_spec_file(directory, gguf, hashlib.sha256(gguf.read_bytes()).hexdigest())


def manifest_dict(gguf_bytes: bytes = b"GGUF-weights") -> dict:
    """A valid manifest (as JSON data) of one GGUF holding `gguf_bytes`."""
    return {
        "manifest_version": 1,
        "tool": {"name": "model_packaging", "version": "1.0.0"},
        "spec": "tiny",
        "model": {"name": "Tiny", "gguf": "tiny.gguf"},
        "files": [
            {
                "path": "tiny.gguf",
                "role": "gguf",
                "bytes": len(gguf_bytes),
                "sha256": hashlib.sha256(gguf_bytes).hexdigest(),
                "source": {"kind": "local", "repo": None, "revision": None, "file": "/x/tiny.gguf"},
            }
        ],
        "created_at": "2026-01-02T03:04:05Z",
    }


def write_model_dir(directory: Path, gguf_bytes: bytes = b"GGUF-weights") -> Path:
    """An extracted model directory: `tiny.gguf` and its manifest."""
    (directory / "tiny.gguf").write_bytes(gguf_bytes)
    (directory / MANIFEST_FILENAME).write_text(json.dumps(manifest_dict(gguf_bytes)))
    return directory
