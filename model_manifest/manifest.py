"""`model-manifest.json` at the archive's top level: its schema, reading and verifying it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from model_manifest.hashing import sha256_of_file
from model_manifest.small_files import SmallFileError, read_small_file

MANIFEST_FILENAME = "model-manifest.json"
# The model's readout and temperature (the adapter's calibration.json), when packaged.
CALIBRATION_FILENAME = "calibration.json"
MANIFEST_VERSION = 1
# A manifest lists a handful of files: kilobytes. Read whole, a 1 GB one took 2 GB at start-up.
MAX_MANIFEST_BYTES = 1 << 20

Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class ManifestError(Exception):
    """The manifest is missing, malformed, or does not describe the files next to it."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileSource(_Strict):
    """Where a packaged file came from.

    For `huggingface`: the repository, the pinned commit and the file's path in the repository.
    For `local`: `file` is the path that was read; when a Python package provided the file
    (such as the bundled Gemma model), `repo` names the package and `revision` its version.
    """

    kind: Literal["huggingface", "local"]
    repo: str | None = None
    revision: str | None = None
    file: str


class ToolInfo(_Strict):
    name: str
    version: str


class DecisionModel(_Strict):
    """A trained decision model's head, as its GGUF declares it (`<arch>.decision.*`)."""

    type: str
    # `<kind>` or `<kind>.<bucket>` (the option-count bucket), as the GGUF names them.
    temperatures: dict[str, float] = Field(default_factory=dict)


class ModelInfo(_Strict):
    name: str
    gguf: str
    decision: DecisionModel | None = None  # None: a generic language model


class ManifestFile(_Strict):
    path: str
    role: Literal["gguf", "tokenizer", "calibration"]
    bytes: int = Field(ge=0)
    sha256: Sha256Hex
    source: FileSource

    @model_validator(mode="after")
    def _path_is_plain_top_level_name(self) -> ManifestFile:
        # Extraction puts every file straight into the model directory; anything else could
        # escape it or hide from a directory listing.
        parts = PurePosixPath(self.path).parts
        if len(parts) != 1 or self.path.startswith(".") or "\\" in self.path:
            raise ValueError(f"file path must be a plain top-level name, got {self.path!r}")
        return self


class Manifest(_Strict):
    manifest_version: Literal[1]
    tool: ToolInfo
    spec: str
    model: ModelInfo
    files: list[ManifestFile] = Field(min_length=1)
    created_at: AwareDatetime

    @model_validator(mode="after")
    def _exactly_one_gguf_named_by_model(self) -> Manifest:
        paths = [f.path for f in self.files]
        if len(set(paths)) != len(paths):
            raise ValueError("file paths must be unique")
        if MANIFEST_FILENAME in paths:
            raise ValueError(f"{MANIFEST_FILENAME} must not list itself")
        ggufs = [f for f in self.files if f.role == "gguf"]
        if len(ggufs) != 1:
            raise ValueError(f"expected exactly one gguf file, found {len(ggufs)}")
        for entry in self.files:
            if entry.role == "calibration" and entry.path != CALIBRATION_FILENAME:
                raise ValueError(f"the calibration file must be named {CALIBRATION_FILENAME}")
        if ggufs[0].path != self.model.gguf:
            raise ValueError(
                f"model.gguf {self.model.gguf!r} does not name the gguf file {ggufs[0].path!r}"
            )
        return self

    @property
    def gguf_file(self) -> ManifestFile:
        return next(f for f in self.files if f.role == "gguf")

    @property
    def calibration_file(self) -> ManifestFile | None:
        return next((f for f in self.files if f.role == "calibration"), None)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


def read_manifest(path: str | Path) -> Manifest:
    """Read and validate a manifest; `path` is the manifest file or the model directory."""
    manifest_path = Path(path)
    if manifest_path.is_dir():
        manifest_path = manifest_path / MANIFEST_FILENAME
    try:
        data = read_small_file(manifest_path, MAX_MANIFEST_BYTES, "a model manifest")
        raw = json.loads(data.decode("utf-8"))
    except FileNotFoundError as exc:
        raise ManifestError(f"no model manifest at {manifest_path}") from exc
    except SmallFileError as exc:
        raise ManifestError(f"cannot read model manifest: {exc}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"cannot read model manifest {manifest_path}: {exc}") from exc
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        raise ManifestError(f"invalid model manifest {manifest_path}: {exc}") from exc


def verify_files(manifest: Manifest, model_dir: str | Path) -> None:
    """Check that every listed file exists in `model_dir` with the recorded size and SHA-256."""
    directory = Path(model_dir)
    for entry in manifest.files:
        file_path = directory / entry.path
        if not file_path.is_file():
            raise ManifestError(f"{entry.path} is listed in the manifest but missing")
        size = file_path.stat().st_size
        if size != entry.bytes:
            raise ManifestError(f"{entry.path} has {size} bytes, manifest says {entry.bytes}")
        actual = sha256_of_file(file_path)
        if actual != entry.sha256:
            raise ManifestError(f"{entry.path} has sha256 {actual}, manifest says {entry.sha256}")


def now_utc() -> datetime:
    return datetime.now(UTC)
