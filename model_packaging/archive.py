"""Write `model.tar.gz`: verify each file while streaming it in, publish atomically."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from model_manifest import (
    MANIFEST_FILENAME,
    MANIFEST_VERSION,
    DecisionModel,
    HashingReader,
    HashingWriter,
    Manifest,
    ManifestFile,
    ModelInfo,
    ToolInfo,
    now_utc,
)
from model_packaging import __version__
from model_packaging.decision_model import read_decision_model
from model_packaging.errors import ChecksumMismatch, PackagingError
from model_packaging.sources import SourceFile

# Quantized weights barely compress (Gemma 3 270M Q4_K_M: 6% smaller at level 1, written at
# 48 MB/s). Stored deflate blocks keep the gzip format SageMaker unpacks and write at disk speed,
# here and when the endpoint inflates the archive.
GZIP_LEVEL = 0


@dataclass(frozen=True)
class ArchiveResult:
    path: Path
    sha256: str
    bytes: int
    manifest: Manifest


def write_model_archive(
    *,
    spec_name: str,
    model_name: str,
    files: Sequence[SourceFile],
    output: Path,
    overwrite: bool = False,
    clock: Callable[[], datetime] = now_utc,
) -> ArchiveResult:
    _check_archive_names(files)
    if output.exists() and not overwrite:
        raise PackagingError(f"{output} already exists; pass --overwrite to replace it")
    output.parent.mkdir(parents=True, exist_ok=True)
    created_at = clock()
    # The temporary file lives next to the target so the final rename stays on one filesystem.
    fd, temp_name = tempfile.mkstemp(
        dir=output.parent, prefix=f".{output.name}.", suffix=".partial"
    )
    temp_path = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as raw:
            writer = HashingWriter(raw)
            # What tarfile's "w:gz" does, the gzip stream opened here: tarfile.open's types ask
            # any file object for read, seek and tell, which writing never uses.
            with (
                gzip.GzipFile(None, "wb", GZIP_LEVEL, writer) as compressed,
                tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
            ):
                entries = [_add_verified_file(tar, f, created_at) for f in files]
                manifest = Manifest(
                    manifest_version=MANIFEST_VERSION,
                    tool=ToolInfo(name="model_packaging", version=__version__),
                    spec=spec_name,
                    model=ModelInfo(
                        name=model_name, gguf=_gguf_name(files), decision=_decision_model(files)
                    ),
                    files=entries,
                    created_at=created_at,
                )
                _add_bytes(tar, MANIFEST_FILENAME, manifest.to_json().encode(), created_at)
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(temp_path, 0o644)
        _publish(temp_path, output, overwrite=overwrite)
    finally:
        temp_path.unlink(missing_ok=True)
    return ArchiveResult(output, writer.hexdigest(), writer.bytes_written, manifest)


def _check_archive_names(files: Sequence[SourceFile]) -> None:
    names = [f.archive_name for f in files]
    for name in names:
        if name.startswith(".") or "/" in name or "\\" in name or name == MANIFEST_FILENAME:
            raise PackagingError(f"refusing to package {name!r}: not a plain visible file name")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PackagingError(f"two files would share the archive name {duplicates[0]!r}")


def _decision_model(files: Sequence[SourceFile]) -> DecisionModel | None:
    """A decision GGUF's head (read once the file is verified); such a model answers with its
    head, so a readout file beside it would never be read: refused."""
    gguf = next(f for f in files if f.role == "gguf")
    decision = read_decision_model(gguf.path)
    if decision is not None and any(f.role == "calibration" for f in files):
        raise PackagingError(
            f"{gguf.archive_name}: a {decision.type} decision model answers with its own head; "
            "its spec must not name a calibration file"
        )
    return decision


def _gguf_name(files: Sequence[SourceFile]) -> str:
    ggufs = [f.archive_name for f in files if f.role == "gguf"]
    if len(ggufs) != 1:
        raise PackagingError(f"expected exactly one gguf file, got {len(ggufs)}")
    return ggufs[0]


def _tar_info(name: str, size: int, created_at: datetime) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    info.mtime = int(created_at.timestamp())
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add_verified_file(
    tar: tarfile.TarFile, file: SourceFile, created_at: datetime
) -> ManifestFile:
    size = file.path.stat().st_size
    # A wrong size is known before reading a byte; fail fast on multi-GB files.
    if file.expected_bytes is not None and size != file.expected_bytes:
        raise ChecksumMismatch(
            f"{file.archive_name}: {size} bytes, pinned {file.expected_bytes} ({file.path})"
        )
    with open(file.path, "rb") as stream:
        reader = HashingReader(stream)
        tar.addfile(_tar_info(file.archive_name, size, created_at), reader)
    actual = reader.hexdigest()
    if file.expected_sha256 is not None and actual != file.expected_sha256:
        raise ChecksumMismatch(
            f"{file.archive_name}: sha256 {actual} does not match pinned {file.expected_sha256}"
            f" ({file.path})"
        )
    return ManifestFile(
        path=file.archive_name, role=file.role, bytes=size, sha256=actual, source=file.source
    )


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, created_at: datetime) -> None:
    tar.addfile(_tar_info(name, len(data), created_at), io.BytesIO(data))


def _publish(temp_path: Path, output: Path, *, overwrite: bool) -> None:
    if overwrite:
        os.replace(temp_path, output)
        return
    # link() fails if the target appeared meanwhile, so an archive is never clobbered by a race.
    try:
        os.link(temp_path, output)
    except FileExistsError as exc:
        raise PackagingError(f"{output} already exists; pass --overwrite to replace it") from exc
