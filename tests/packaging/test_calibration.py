"""The per-model file (calibration.json: readout and temperature) travels in model.tar.gz: a
spec names it, the manifest records its checksum, and the adapter checks it at start."""

import hashlib
import json
import tarfile

import pytest
from decision_adapter.calibration import load_calibration
from decision_adapter.errors import ModelFileError
from decision_adapter.model.files import load_model_file
from decision_adapter.settings import Settings

from model_manifest import CALIBRATION_FILENAME, Manifest, read_manifest
from model_packaging.catalog import GEMMA3_270M
from model_packaging.cli import main
from tests.support.gguf_files import gguf_bytes
from tests.support.model_specs import manifest_dict

GGUF = gguf_bytes(filler=bytes(range(256)) * 8)
PROFILE = {"readout": "calibrated", "temperature": 8.0}


def _spec(tmp_path, pinned: str | None = None):
    gguf = tmp_path / "src" / "tiny.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(GGUF)
    profile = tmp_path / "src" / "tiny-calibration.json"
    profile.write_text(json.dumps(PROFILE))
    digest = hashlib.sha256(profile.read_bytes()).hexdigest()
    spec = {
        "name": "tiny-local",
        "model_name": "Tiny-Local",
        "gguf": {"kind": "local", "path": str(gguf), "sha256": hashlib.sha256(GGUF).hexdigest()},
        "calibration": {"path": str(profile), "sha256": pinned or digest},
    }
    path = tmp_path / "tiny.spec.json"
    path.write_text(json.dumps(spec))
    return path, profile


def _package(tmp_path):
    spec, profile = _spec(tmp_path)
    archive = tmp_path / "out" / "model.tar.gz"
    assert main(["--spec", str(spec), "--output", str(archive)]) == 0
    model_dir = tmp_path / "opt-ml-model"
    with tarfile.open(archive) as tar:
        tar.extractall(model_dir, filter="data")
    return model_dir, profile


def test_a_spec_puts_its_calibration_file_into_the_archive_with_its_checksum(tmp_path, capsys):
    model_dir, profile = _package(tmp_path)
    manifest = read_manifest(model_dir)
    entry = manifest.calibration_file
    assert entry is not None and entry.path == CALIBRATION_FILENAME
    assert (entry.source.kind, entry.source.file) == ("local", str(profile))
    assert entry.sha256 == hashlib.sha256(profile.read_bytes()).hexdigest()
    assert (model_dir / CALIBRATION_FILENAME).read_bytes() == profile.read_bytes()
    # The adapter finds it beside the GGUF and serves its readout by default.
    loaded = load_model_file(Settings(model_dir=str(model_dir), allow_bundled_model=False))
    calibration = load_calibration(None, loaded.path, loaded.sha256)
    assert (calibration.readout, calibration.temperature) == ("calibrated", 8.0)


def test_a_calibration_file_that_differs_from_its_pin_is_refused(tmp_path, capsys):
    spec, _ = _spec(tmp_path, pinned="0" * 64)
    assert main(["--spec", str(spec), "--output", str(tmp_path / "m.tar.gz")]) != 0
    assert "calibration.json" in capsys.readouterr().err
    assert not (tmp_path / "m.tar.gz").exists()


def test_a_spec_naming_a_missing_calibration_file_is_refused_naming_it(tmp_path, capsys):
    spec, profile = _spec(tmp_path)
    profile.unlink()
    assert main(["--spec", str(spec), "--output", str(tmp_path / "m.tar.gz")]) != 0
    assert f"calibration file not found: {profile}" in capsys.readouterr().err
    assert not (tmp_path / "m.tar.gz").exists()


def test_the_adapter_refuses_a_packaged_calibration_file_changed_after_packaging(tmp_path, capsys):
    model_dir, _ = _package(tmp_path)
    (model_dir / CALIBRATION_FILENAME).write_text(json.dumps({**PROFILE, "temperature": 1.0}))
    with pytest.raises(ModelFileError, match="checksum mismatch for .*calibration.json"):
        load_model_file(Settings(model_dir=str(model_dir), allow_bundled_model=False))
    (model_dir / CALIBRATION_FILENAME).unlink()
    with pytest.raises(ModelFileError, match="lists calibration.json"):
        load_model_file(Settings(model_dir=str(model_dir), allow_bundled_model=False))


def test_the_manifest_names_the_calibration_file_as_the_adapter_looks_for_it():
    raw = manifest_dict()
    entry = {**raw["files"][0], "path": "profile.json", "role": "calibration"}
    with pytest.raises(ValueError, match="calibration.json"):
        Manifest.model_validate({**raw, "files": [*raw["files"], entry]})


def test_the_bundled_models_spec_packages_its_chosen_readout():
    assert GEMMA3_270M.calibration is not None
    profile = GEMMA3_270M.calibration.resolved
    assert hashlib.sha256(profile.read_bytes()).hexdigest() == GEMMA3_270M.calibration.sha256
    chosen = json.loads(profile.read_text())
    assert chosen["gguf_sha256"] == GEMMA3_270M.gguf.sha256
    assert chosen["readout"] in ("option_text", "option_text_desc", "calibrated", "letters")
