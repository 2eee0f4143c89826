"""The manifest contract the adapter relies on."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from model_manifest import (
    MANIFEST_FILENAME,
    Manifest,
    ManifestError,
    read_manifest,
    sha256_of_file,
    verify_files,
)
from tests.support.model_specs import manifest_dict, write_model_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_read_manifest_accepts_directory_or_file(tmp_path):
    write_model_dir(tmp_path)
    from_dir = read_manifest(tmp_path)
    from_file = read_manifest(tmp_path / MANIFEST_FILENAME)
    assert from_dir == from_file
    assert from_dir.gguf_file.path == "tiny.gguf"
    assert from_dir.created_at.utcoffset().total_seconds() == 0


def test_manifest_json_round_trips():
    manifest = Manifest.model_validate(manifest_dict())
    assert Manifest.model_validate_json(manifest.to_json()) == manifest


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda m: m.update(manifest_version=2), "manifest_version"),
        (lambda m: m["model"].update(gguf="other.gguf"), "does not name the gguf"),
        (lambda m: m["files"][0].update(path="../escape.gguf"), "plain top-level name"),
        (lambda m: m["files"][0].update(path=".hidden.gguf"), "plain top-level name"),
        (lambda m: m["files"][0].update(sha256="ABC"), "sha256"),
        (lambda m: m["files"][0].update(role="tokenizer"), "exactly one gguf"),
        (lambda m: m.update(created_at="2026-01-02T03:04:05"), "created_at"),
        (lambda m: m.update(unexpected=True), "unexpected"),
    ],
)
def test_invalid_manifests_are_rejected_with_a_reason(tmp_path, mutate, message):
    raw = manifest_dict()
    mutate(raw)
    (tmp_path / MANIFEST_FILENAME).write_text(json.dumps(raw))
    with pytest.raises(ManifestError, match=message):
        read_manifest(tmp_path)


def test_missing_manifest_is_a_manifest_error(tmp_path):
    with pytest.raises(ManifestError, match="no model manifest"):
        read_manifest(tmp_path)


def test_verify_files_passes_for_intact_directory(tmp_path):
    write_model_dir(tmp_path)
    verify_files(read_manifest(tmp_path), tmp_path)


def test_verify_files_detects_a_flipped_byte(tmp_path):
    write_model_dir(tmp_path)
    gguf = tmp_path / "tiny.gguf"
    data = bytearray(gguf.read_bytes())
    data[3] ^= 0x01
    gguf.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="sha256"):
        verify_files(read_manifest(tmp_path), tmp_path)


def test_verify_files_detects_a_missing_file(tmp_path):
    write_model_dir(tmp_path)
    (tmp_path / "tiny.gguf").unlink()
    with pytest.raises(ManifestError, match="missing"):
        verify_files(read_manifest(tmp_path), tmp_path)


def test_sha256_of_file_matches_hashlib(tmp_path):
    import hashlib

    path = tmp_path / "blob"
    path.write_bytes(b"x" * 3_000_000)
    assert sha256_of_file(path, chunk_bytes=4096) == hashlib.sha256(b"x" * 3_000_000).hexdigest()


def test_manifest_package_imports_without_boto3_or_huggingface_hub():
    # The adapter image ships model_manifest: it must not pull in packaging dependencies.
    code = (
        "import sys\n"
        "for blocked in ('boto3', 'botocore', 'huggingface_hub', 'model_packaging'):\n"
        "    sys.modules[blocked] = None\n"
        "import model_manifest as m\n"
        "print(m.MANIFEST_FILENAME)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == MANIFEST_FILENAME


def test_the_adapter_checks_the_gguf_with_the_packagers_hashing():
    from decision_adapter.model import files as model_files

    assert model_files.sha256_of_file is sha256_of_file
