"""The model archive's contract, shared by the packager (model_packaging) and the adapter
(container/decision_adapter): `model-manifest.json`'s schema, and the SHA-256 both compute.

Copied whole into the adapter images, so it depends on the standard library and pydantic only.
"""

from model_manifest.hashing import HashingReader, HashingWriter, sha256_of_file
from model_manifest.manifest import (
    CALIBRATION_FILENAME,
    MANIFEST_FILENAME,
    MANIFEST_VERSION,
    DecisionModel,
    FileSource,
    Manifest,
    ManifestError,
    ManifestFile,
    ModelInfo,
    ToolInfo,
    now_utc,
    read_manifest,
    verify_files,
)

__all__ = [
    "CALIBRATION_FILENAME",
    "MANIFEST_FILENAME",
    "MANIFEST_VERSION",
    "DecisionModel",
    "FileSource",
    "HashingReader",
    "HashingWriter",
    "Manifest",
    "ManifestError",
    "ManifestFile",
    "ModelInfo",
    "ToolInfo",
    "now_utc",
    "read_manifest",
    "sha256_of_file",
    "verify_files",
]
