"""Resolve a spec to readable local files, each with the pin it must match."""

from __future__ import annotations

import fnmatch
import importlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Literal, Protocol

from model_manifest import CALIBRATION_FILENAME, FileSource
from model_packaging.errors import PackagingError
from model_packaging.spec import (
    HuggingFaceGguf,
    HuggingFaceTokenizer,
    LocalGguf,
    ModelSpec,
    ReadoutFile,
)


@dataclass(frozen=True)
class SourceFile:
    archive_name: str
    path: Path
    role: Literal["gguf", "tokenizer", "calibration"]
    source: FileSource
    expected_sha256: str | None = None
    expected_bytes: int | None = None


class HubFetcher(Protocol):
    """The two hub operations packaging needs; tests substitute a local directory."""

    def list_files(self, repo: str, revision: str) -> list[str]: ...

    def download(self, repo: str, revision: str, filename: str) -> Path: ...


class HuggingFaceHubFetcher:
    """Downloads through huggingface_hub, imported only when a Hugging Face spec is used."""

    @staticmethod
    def _hub() -> ModuleType:
        try:
            import huggingface_hub
        except ImportError as exc:
            raise PackagingError(
                "huggingface_hub is not installed; install model_packaging/requirements.txt"
            ) from exc
        return huggingface_hub

    def list_files(self, repo: str, revision: str) -> list[str]:
        return list(self._hub().HfApi().list_repo_files(repo, revision=revision))

    def download(self, repo: str, revision: str, filename: str) -> Path:
        return Path(self._hub().hf_hub_download(repo_id=repo, filename=filename, revision=revision))


def resolve_sources(spec: ModelSpec, fetcher: HubFetcher | None = None) -> list[SourceFile]:
    hub = fetcher if fetcher is not None else HuggingFaceHubFetcher()
    if isinstance(spec.gguf, HuggingFaceGguf):
        files = [_hub_gguf(spec.gguf, hub)]
    else:
        files = [_local_gguf(spec.gguf)]
    if spec.tokenizer is not None:
        files.extend(_hub_tokenizer(spec.tokenizer, hub))
    if spec.calibration is not None:
        files.append(_calibration(spec.calibration))
    return files


def _calibration(calibration: ReadoutFile) -> SourceFile:
    path = calibration.resolved
    if not path.is_file():
        raise PackagingError(f"calibration file not found: {path}")
    return SourceFile(
        archive_name=CALIBRATION_FILENAME,  # the name the adapter looks for beside the GGUF
        path=path,
        role="calibration",
        source=FileSource(kind="local", file=calibration.path),
        expected_sha256=calibration.sha256,
    )


def _hub_gguf(gguf: HuggingFaceGguf, hub: HubFetcher) -> SourceFile:
    path = hub.download(gguf.repo, gguf.revision, gguf.file)
    return SourceFile(
        archive_name=PurePosixPath(gguf.file).name,
        path=path,
        role="gguf",
        source=FileSource(
            kind="huggingface", repo=gguf.repo, revision=gguf.revision, file=gguf.file
        ),
        expected_sha256=gguf.sha256,
        expected_bytes=gguf.bytes,
    )


def _local_gguf(gguf: LocalGguf) -> SourceFile:
    if gguf.package is not None:
        path, repo, revision = _gguf_from_package(gguf.package)
    else:
        assert gguf.path is not None  # a LocalGguf has a path or a package
        path, repo, revision = Path(gguf.path), None, None
    if not path.is_file():
        raise PackagingError(f"gguf file not found: {path}")
    return SourceFile(
        archive_name=path.name,
        path=path,
        role="gguf",
        source=FileSource(kind="local", repo=repo, revision=revision, file=str(path)),
        expected_sha256=gguf.sha256,
        expected_bytes=gguf.bytes,
    )


def _gguf_from_package(module_name: str) -> tuple[Path, str, str | None]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PackagingError(f"model package {module_name!r} is not installed") from exc
    path = Path(module.assemble())
    distributions = importlib.metadata.packages_distributions().get(module_name.split(".")[0], [])
    version = importlib.metadata.version(distributions[0]) if distributions else None
    return path, module_name, version


def _hub_tokenizer(tokenizer: HuggingFaceTokenizer, hub: HubFetcher) -> list[SourceFile]:
    # Hidden entries (.gitattributes, .cache/...) never belong in a model archive.
    available = sorted(
        name
        for name in hub.list_files(tokenizer.repo, tokenizer.revision)
        if not any(part.startswith(".") for part in PurePosixPath(name).parts)
    )
    selected: list[str] = []
    for pattern in tokenizer.files:
        matches = [name for name in available if fnmatch.fnmatchcase(name, pattern)]
        if not matches:
            raise PackagingError(
                f"tokenizer pattern {pattern!r} matched no file in "
                f"{tokenizer.repo}@{tokenizer.revision}"
            )
        selected.extend(name for name in matches if name not in selected)
    return [
        SourceFile(
            archive_name=PurePosixPath(name).name,
            path=hub.download(tokenizer.repo, tokenizer.revision, name),
            role="tokenizer",
            source=FileSource(
                kind="huggingface", repo=tokenizer.repo, revision=tokenizer.revision, file=name
            ),
        )
        for name in selected
    ]
