"""write_model_archive and source resolution on their own: real small files in tmp_path."""

import hashlib
import os
import re
import stat
import sys
import tarfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from model_manifest import (
    MANIFEST_FILENAME,
    FileSource,
    HashingReader,
    ManifestError,
    read_manifest,
    verify_files,
)
from model_packaging.archive import write_model_archive
from model_packaging.errors import ChecksumMismatch, PackagingError
from model_packaging.sources import SourceFile, resolve_sources
from model_packaging.spec import parse_spec
from tests.support.gguf_files import gguf_bytes

CREATED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
DATA = gguf_bytes(filler=bytes(range(256)) * 8)


def source(tmp_path: Path, name: str, role: str = "gguf", data: bytes = DATA, **pins) -> SourceFile:
    path = tmp_path / "src" / f"{len(list(tmp_path.glob('src/*')))}-{name.replace('/', '_')}"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return SourceFile(
        archive_name=name,
        path=path,
        role=role,
        source=FileSource(kind="local", file=str(path)),
        **pins,
    )


def write(files, output: Path, **kwargs):
    return write_model_archive(
        spec_name="t", model_name="T", files=files, output=output, clock=lambda: CREATED, **kwargs
    )


def test_members_are_plain_root_owned_files_stamped_with_the_creation_time(tmp_path):
    out = tmp_path / "a" / "b" / "model.tar.gz"  # missing parents are created
    result = write([source(tmp_path, "m.gguf")], out)

    assert result.path == out and result.bytes == out.stat().st_size
    assert result.sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # readable by the serving container's user
    # A gzip stream (what SageMaker unpacks) of stored blocks: DATA (2 KB of repeats) would
    # deflate to under 300 bytes, stored it stays whole inside the archive.
    assert out.read_bytes()[:3] == b"\x1f\x8b\x08"
    assert DATA in out.read_bytes()
    with tarfile.open(out, "r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["m.gguf", MANIFEST_FILENAME]
    for member in members:
        assert member.isfile() and member.mode == 0o644
        assert (member.uid, member.gid, member.uname, member.gname) == (0, 0, "", "")
        assert member.mtime == int(CREATED.timestamp())


def test_manifest_in_the_archive_is_indented_json_ending_in_a_newline(tmp_path):
    out = tmp_path / "model.tar.gz"
    result = write([source(tmp_path, "m.gguf")], out)
    with tarfile.open(out, "r:gz") as tar:
        text = tar.extractfile(MANIFEST_FILENAME).read().decode()
    assert text.startswith('{\n  "manifest_version": 1,\n  "tool": {\n    "name"')
    assert text.endswith("\n}\n")
    assert result.manifest.created_at == CREATED


def test_an_existing_archive_is_kept_by_default(tmp_path):
    out = tmp_path / "model.tar.gz"
    out.write_bytes(b"old")
    with pytest.raises(PackagingError, match=f"^{out} already exists; pass --overwrite"):
        write([source(tmp_path, "m.gguf")], out)
    assert out.read_bytes() == b"old"


def test_an_archive_appearing_during_the_write_is_not_clobbered(tmp_path):
    out = tmp_path / "model.tar.gz"

    def clock():  # called once the up-front check passed: another writer gets there first
        out.write_bytes(b"theirs")
        return CREATED

    with pytest.raises(PackagingError, match=f"^{out} already exists; pass --overwrite"):
        write_model_archive(
            spec_name="t",
            model_name="T",
            files=[source(tmp_path, "m.gguf")],
            output=out,
            clock=clock,
        )
    assert out.read_bytes() == b"theirs"
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["model.tar.gz"]


@pytest.mark.parametrize("name", [".hidden.gguf", "sub/m.gguf", "sub\\m.gguf", MANIFEST_FILENAME])
def test_names_that_are_not_plain_visible_files_are_refused(tmp_path, name):
    files = [source(tmp_path, "m.gguf"), source(tmp_path, name, role="tokenizer")]
    with pytest.raises(PackagingError) as refused:
        write(files, tmp_path / "model.tar.gz")
    assert str(refused.value) == f"refusing to package {name!r}: not a plain visible file name"
    assert not (tmp_path / "model.tar.gz").exists()


def test_names_shared_by_two_files_are_refused_naming_the_first(tmp_path):
    files = [
        source(tmp_path, "m.gguf"),
        source(tmp_path, "b.json", role="tokenizer"),
        source(tmp_path, "a.json", role="tokenizer"),
        source(tmp_path, "b.json", role="tokenizer"),
        source(tmp_path, "a.json", role="tokenizer"),
    ]
    with pytest.raises(PackagingError, match="^two files would share the archive name 'a.json'$"):
        write(files, tmp_path / "model.tar.gz")


@pytest.mark.parametrize("ggufs", [0, 2])
def test_exactly_one_gguf_is_required(tmp_path, ggufs):
    files = [source(tmp_path, f"m{i}.gguf") for i in range(ggufs)]
    files.append(source(tmp_path, "t.json", role="tokenizer"))
    with pytest.raises(PackagingError, match=f"^expected exactly one gguf file, got {ggufs}$"):
        write(files, tmp_path / "model.tar.gz")


def test_size_mismatch_names_file_sizes_and_path(tmp_path):
    gguf = source(tmp_path, "m.gguf", expected_bytes=len(DATA) + 1)
    with pytest.raises(ChecksumMismatch) as refused:
        write([gguf], tmp_path / "model.tar.gz")
    assert str(refused.value) == f"m.gguf: {len(DATA)} bytes, pinned {len(DATA) + 1} ({gguf.path})"


def test_hashing_reader_counts_and_hashes_what_passes(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(DATA)
    with open(path, "rb") as stream:
        reader = HashingReader(stream)
        while reader.read(100):
            pass
    assert reader.bytes_read == len(DATA)
    assert reader.hexdigest() == hashlib.sha256(DATA).hexdigest()


@pytest.mark.parametrize("distributed", [True, False])
def test_a_gguf_from_a_python_package_records_package_and_version(
    tmp_path, monkeypatch, distributed
):
    site = tmp_path / "site"
    package = site / "tinymodel"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tiny.gguf").write_bytes(DATA)
    (package / "weights.py").write_text(
        "from pathlib import Path\n"
        "def assemble():\n"
        "    return str(Path(__file__).with_name('tiny.gguf'))\n"
    )
    if distributed:  # installed as a distribution: its version is recorded
        dist = site / "tinymodel-1.2.3.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinymodel\nVersion: 1.2.3\n")
        (dist / "top_level.txt").write_text("tinymodel\n")
    monkeypatch.syspath_prepend(str(site))
    spec = parse_spec(
        {
            "name": "tiny",
            "model_name": "Tiny",
            "gguf": {
                "kind": "local",
                "package": "tinymodel.weights",
                "sha256": hashlib.sha256(DATA).hexdigest(),
                "bytes": len(DATA),
            },
        },
        origin="test",
    )
    try:
        [gguf] = resolve_sources(spec)
    finally:  # a later run gets its own tmp_path's package
        for name in ("tinymodel", "tinymodel.weights"):
            sys.modules.pop(name, None)
    assert (gguf.archive_name, gguf.path) == ("tiny.gguf", package / "tiny.gguf")
    assert (gguf.source.kind, gguf.source.repo, gguf.source.revision) == (
        "local",
        "tinymodel.weights",
        "1.2.3" if distributed else None,
    )
    assert gguf.source.file == str(package / "tiny.gguf")
    assert (gguf.expected_sha256, gguf.expected_bytes) == (spec.gguf.sha256, len(DATA))


def test_a_package_that_is_not_installed_is_refused_by_name():
    spec = parse_spec(
        {
            "name": "x",
            "model_name": "X",
            "gguf": {"kind": "local", "package": "no_such_model_pkg", "sha256": "0" * 64},
        },
        origin="test",
    )
    message = "^model package 'no_such_model_pkg' is not installed$"
    with pytest.raises(PackagingError, match=message):
        resolve_sources(spec)


def test_a_missing_local_gguf_is_refused_by_path(tmp_path):
    missing = tmp_path / "nowhere.gguf"
    spec = parse_spec(
        {
            "name": "x",
            "model_name": "X",
            "gguf": {"kind": "local", "path": str(missing), "sha256": "0" * 64},
        },
        origin="test",
    )
    with pytest.raises(PackagingError, match=f"^gguf file not found: {missing}$"):
        resolve_sources(spec)


def test_verify_files_names_a_size_difference(tmp_path):
    from tests.support.model_specs import write_model_dir

    write_model_dir(tmp_path)
    (tmp_path / "tiny.gguf").write_bytes(b"GGUF-weights+")
    with pytest.raises(ManifestError, match="^tiny.gguf has 13 bytes, manifest says 12$"):
        verify_files(read_manifest(tmp_path), tmp_path)


def test_an_unreadable_manifest_is_a_manifest_error_naming_the_file(tmp_path):
    (tmp_path / MANIFEST_FILENAME).write_text("{not json")
    with pytest.raises(ManifestError, match=f"^cannot read model manifest {tmp_path}/"):
        read_manifest(tmp_path)


def test_the_archive_is_written_under_a_hidden_partial_name_next_to_the_target(
    tmp_path, monkeypatch
):
    out = tmp_path / "out" / "model.tar.gz"
    seen = []
    real_fsync = os.fsync

    def fsync_and_look(fd):  # the last moment before publishing: the content is complete
        seen.append(sorted(p.name for p in out.parent.iterdir()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_and_look)
    write([source(tmp_path, "m.gguf")], out)
    [names] = seen
    assert len(names) == 1 and re.fullmatch(r"\.model\.tar\.gz\..+\.partial", names[0])
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.tar.gz"]
