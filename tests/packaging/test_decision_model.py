"""A trained decision GGUF as a model spec: the manifest records the head its GGUF declares, and
what the adapter would refuse at start-up is refused before an archive exists."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest
from decision_adapter.model.decision_head import ENGINE_TYPES, NOT_SERVED

from model_manifest import MANIFEST_FILENAME, Manifest
from model_packaging.cli import main
from model_packaging.decision_model import SERVED_TYPES
from tests.support.decision_models import build
from tests.support.gguf_files import decision_gguf_bytes, gguf_bytes
from tests.support.model_specs import local_spec_file


def package(tmp_path: Path, gguf: Path, **extra) -> tuple[int, Path]:
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    spec = local_spec_file(tmp_path, gguf, digest, **extra)
    output = tmp_path / "out" / "model.tar.gz"
    return main(["--spec", str(spec), "--output", str(output)]), output


def manifest_of(archive: Path) -> Manifest:
    with tarfile.open(archive, "r:gz") as tar:
        member = tar.extractfile(MANIFEST_FILENAME)
        assert member is not None
        return Manifest.model_validate_json(member.read())


def test_the_packager_refuses_what_the_adapter_refuses():
    assert set(SERVED_TYPES) == set(ENGINE_TYPES) - set(NOT_SERVED)


def test_a_decision_gguf_from_the_engines_conversion_is_recorded_with_its_temperatures(tmp_path):
    """A laya model as the engine tree's conversion code writes it: its type and every
    temperature it declares, as llama.cpp reads them (strings, parsed as numbers)."""
    gguf = build("laya", tmp_path / "model")
    code, archive = package(tmp_path, gguf)
    assert code == 0
    decision = manifest_of(archive).model.decision
    assert decision is not None and decision.type == "laya"
    from gguf import GGUFReader

    fields = GGUFReader(gguf).fields
    declared = {
        name.removeprefix("modern-bert.decision.temperature."): float(field.contents())
        for name, field in fields.items()
        if name.startswith("modern-bert.decision.temperature.")
    }
    assert declared and decision.temperatures == declared


def test_a_generic_gguf_records_no_decision_head(tmp_path):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(gguf_bytes(filler=b"weights"))
    code, archive = package(tmp_path, gguf)
    assert code == 0
    assert manifest_of(archive).model.decision is None


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (decision_gguf_bytes("clef"), "decision type 'clef' is not served"),
        (decision_gguf_bytes("lfm2-d1"), "decision type 'lfm2-d1' is not served"),
        (decision_gguf_bytes("kev", choice_3_5="0"), "invalid decision temperature choice.3_5='0'"),
        (decision_gguf_bytes("kev", noul="warm"), "invalid decision temperature noul='warm'"),
        (b"not a gguf at all", "not a readable GGUF file"),
    ],
)
def test_what_the_adapter_would_refuse_leaves_no_archive(tmp_path, capsys, data, says):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(data)
    code, archive = package(tmp_path, gguf)
    assert code == 1
    assert says in capsys.readouterr().err
    assert not archive.exists()


def test_a_calibration_file_beside_a_decision_model_is_refused(tmp_path, capsys):
    """Such a model answers with its own head: a readout profile would never be read."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(decision_gguf_bytes("openjev"))
    profile = tmp_path / "calibration.json"
    profile.write_text('{"readout": "letters"}')
    spec = json.loads(
        local_spec_file(tmp_path, gguf, hashlib.sha256(gguf.read_bytes()).hexdigest()).read_text()
    )
    spec["calibration"] = {
        "path": str(profile),
        "sha256": hashlib.sha256(profile.read_bytes()).hexdigest(),
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    output = tmp_path / "out" / "model.tar.gz"
    assert main(["--spec", str(path), "--output", str(output)]) == 1
    assert "must not name a calibration file" in capsys.readouterr().err
    assert not output.exists()
