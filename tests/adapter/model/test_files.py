"""GGUF discovery order and manifest verification (file logic: small stand-in files suffice)."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from decision_adapter.errors import ModelFileError
from decision_adapter.model import files as model_files
from decision_adapter.model.files import discover_gguf, load_model_file
from decision_adapter.settings import Settings

from model_manifest import sha256_of_file


def _settings(**values) -> Settings:
    return Settings(allow_bundled_model=False, **values)


def _gguf(path: Path, data: bytes = b"GGUF-test") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _manifest(directory: Path, gguf: Path, sha256: str | None = None) -> None:
    entry = {
        "path": gguf.name,
        "role": "gguf",
        "bytes": gguf.stat().st_size,
        "sha256": sha256 or sha256_of_file(gguf),
        "source": {"kind": "local", "file": str(gguf)},
    }
    (directory / "model-manifest.json").write_text(
        json.dumps(
            {
                "manifest_version": 1,
                "tool": {"name": "model_packaging", "version": "1"},
                "spec": "test",
                "model": {"name": "Test", "gguf": gguf.name},
                "files": [entry],
                "created_at": datetime.now(UTC).isoformat(),
            }
        )
    )


def test_explicit_path_comes_first(tmp_path):
    explicit = _gguf(tmp_path / "explicit.gguf")
    _gguf(tmp_path / "dir" / "other.gguf")
    found = discover_gguf(_settings(model_path=explicit, model_dir=tmp_path / "dir"))
    assert found.path == explicit and "MODEL" in found.source
    assert found.verified_sha256 is None  # read and hashed by load_model_file


def test_one_gguf_in_the_directory_or_one_level_down(tmp_path):
    nested = _gguf(tmp_path / "sub" / "model.gguf")
    assert discover_gguf(_settings(model_dir=tmp_path)).path == nested


@pytest.mark.parametrize(
    "files,expected",
    [
        ([], "no \\*.gguf files"),
        (["a.gguf", "sub/b.gguf"], "a.gguf, sub/b.gguf"),
    ],
)
def test_zero_or_several_candidates_refuse_and_name_what_was_found(tmp_path, files, expected):
    for name in files:
        _gguf(tmp_path / name)
    with pytest.raises(ModelFileError, match=expected):
        discover_gguf(_settings(model_dir=tmp_path))


def test_missing_directory_without_bundled_model_is_refused(tmp_path):
    with pytest.raises(ModelFileError, match="does not exist"):
        discover_gguf(_settings(model_dir=tmp_path / "absent"))


def test_manifest_checksum_is_verified(tmp_path):
    gguf = _gguf(tmp_path / "model.gguf")
    _manifest(tmp_path, gguf)
    loaded = load_model_file(_settings(model_dir=tmp_path))
    assert loaded.sha256 == sha256_of_file(gguf) and loaded.manifest.model.name == "Test"
    _manifest(tmp_path, gguf, sha256="0" * 64)
    with pytest.raises(ModelFileError, match="checksum mismatch"):
        load_model_file(_settings(model_dir=tmp_path))


def test_a_corrupt_manifest_is_refused(tmp_path):
    _gguf(tmp_path / "model.gguf")
    (tmp_path / "model-manifest.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="model-manifest.json"):
        load_model_file(_settings(model_dir=tmp_path))


def test_the_bundled_gguf_is_hashed_once_by_its_package_not_again(
    gemma_gguf, tmp_path, monkeypatch
):
    settings = Settings(allow_bundled_model=True, model_dir=tmp_path / "absent")
    found = discover_gguf(settings)
    assert found.path == gemma_gguf and "bundled" in found.source
    assert found.verified_sha256 == sha256_of_file(found.path)  # what its package checked

    def read_again(path, **_):
        raise AssertionError(f"{path} hashed a second time")

    monkeypatch.setattr(model_files, "sha256_of_file", read_again)
    loaded = load_model_file(settings)
    assert loaded.sha256 == found.verified_sha256 and loaded.size_bytes == found.path.stat().st_size


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "link to a fifo"])
def test_a_model_directory_entry_that_is_no_regular_file_is_refused_at_once(tmp_path, kind):
    import os

    entry = tmp_path / "model.gguf"
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "link to /dev/zero":
        entry.symlink_to("/dev/zero")
    else:
        os.mkfifo(tmp_path / "pipe")
        entry.symlink_to(tmp_path / "pipe")
    with pytest.raises(ModelFileError, match="regular files only"):
        discover_gguf(_settings(model_dir=tmp_path))


def test_a_link_to_a_regular_file_is_served(tmp_path):
    real = _gguf(tmp_path / "elsewhere" / "real.bin")
    (tmp_path / "model.gguf").symlink_to(real)
    assert discover_gguf(_settings(model_dir=tmp_path)).path == tmp_path / "model.gguf"


def test_a_size_the_manifest_did_not_promise_is_refused_before_the_file_is_hashed(
    tmp_path, monkeypatch
):
    gguf = _gguf(tmp_path / "model.gguf")
    _manifest(tmp_path, gguf)
    with gguf.open("r+b") as file:  # a 20 GB sparse file: hashing it would take minutes
        file.truncate(20 << 30)

    def hashed(path, **_):
        raise AssertionError(f"{path} hashed before its size was checked")

    monkeypatch.setattr(model_files, "sha256_of_file", hashed)
    with pytest.raises(ModelFileError, match="size mismatch"):
        load_model_file(_settings(model_dir=tmp_path))


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "huge"])
def test_a_manifest_that_is_no_small_regular_file_is_refused_at_once(tmp_path, kind):
    import os

    from model_manifest.manifest import MAX_MANIFEST_BYTES

    _gguf(tmp_path / "model.gguf")
    manifest = tmp_path / "model-manifest.json"
    if kind == "fifo":  # opening it for reading would wait for a writer forever
        os.mkfifo(manifest)
    elif kind == "link to /dev/zero":  # endless zeros
        manifest.symlink_to("/dev/zero")
    else:  # a gigabyte, sparse: read whole it took 2 GB
        with manifest.open("wb") as file:
            file.truncate(1 << 30)
    expected = "not a regular file" if kind != "huge" else f"over {MAX_MANIFEST_BYTES} bytes"
    with pytest.raises(ModelFileError, match=expected):
        load_model_file(_settings(model_dir=tmp_path))
