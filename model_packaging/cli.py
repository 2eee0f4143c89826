"""python -m model_packaging --spec NAME_OR_FILE --output PATH [--upload s3://BUCKET/PREFIX]"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from model_packaging.catalog import BUILTIN_SPECS, DEFAULT_SPEC_NAME, load_spec
from model_packaging.errors import PackagingError, SpecError
from model_packaging.sources import HubFetcher
from model_packaging.upload import ARCHIVE_NAME, S3Client, parse_s3_destination

if TYPE_CHECKING:
    from model_packaging.archive import ArchiveResult
    from model_packaging.spec import ModelSpec

EXIT_REFUSED = 1
EXIT_USAGE = 2


# Help texts are wording, not behaviour: mutation testing leaves them alone by rule
# (pyproject.toml, [tool.mutation.do_not_mutate]); a test checks that every option has one.
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m model_packaging",
        description="Build a verified SageMaker model archive"
        " (model.tar.gz) from a pinned spec.",
    )
    parser.add_argument(
        "--spec",
        default=DEFAULT_SPEC_NAME,
        help="built-in spec ("
        + ", ".join(sorted(BUILTIN_SPECS))
        + f") or a JSON spec file (default: {DEFAULT_SPEC_NAME})",
    )
    parser.add_argument(
        "--output",
        help=f"archive path, or a directory (existing or ending in '/') for {ARCHIVE_NAME}",
    )
    parser.add_argument(
        "--upload",
        metavar="s3://BUCKET/PREFIX",
        help="upload the archive to S3",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing archive",
    )
    parser.add_argument(
        "--print-spec",
        action="store_true",
        help="print the spec as JSON and exit",
    )
    parser.add_argument(
        "--summary",
        type=Path,
        help="also write a JSON summary (archive, checksums, model URI)",
    )
    return parser


def main(
    argv: list[str] | None = None,
    *,
    fetcher: HubFetcher | None = None,
    s3_client: S3Client | None = None,
) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        return _refuse(exc, EXIT_USAGE)
    if args.print_spec:
        sys.stdout.write(spec.to_json())
        return 0
    if args.output is None:
        parser.error("--output is required unless --print-spec is given")
    output = _archive_path(args.output)
    try:
        # Refuse before any download: a Hugging Face fetch can take minutes.
        if output.exists() and not args.overwrite:
            raise PackagingError(f"{output} already exists; pass --overwrite to replace it")
        if args.upload:
            parse_s3_destination(args.upload)
            s3_client = s3_client or _s3_client_for_upload()
        return _package(spec, output, args, fetcher=fetcher, s3_client=s3_client)
    except PackagingError as exc:
        return _refuse(exc, EXIT_REFUSED)


def _archive_path(output: str) -> Path:
    if output.endswith(("/", os.sep)) or Path(output).is_dir():
        return Path(output) / ARCHIVE_NAME
    return Path(output)


def _package(
    spec: ModelSpec,
    output: Path,
    args: argparse.Namespace,
    *,
    fetcher: HubFetcher | None,
    s3_client: S3Client | None,
) -> int:
    from model_packaging.archive import write_model_archive
    from model_packaging.sources import resolve_sources

    files = resolve_sources(spec, fetcher)
    result = write_model_archive(
        spec_name=spec.name,
        model_name=spec.model_name,
        files=files,
        output=output,
        overwrite=args.overwrite,
    )
    for entry in result.manifest.files:
        _info(f"{entry.role:9} {entry.path}  {entry.bytes} bytes  sha256 {entry.sha256}")
    _info(f"archive   {result.path}  {result.bytes} bytes  sha256 {result.sha256}")
    model_uri = None
    if args.upload:
        model_uri = _upload(result, args.upload, s3_client, spec.name)
        _info(f"uploaded  {model_uri}")
    if args.summary:
        args.summary.write_text(json.dumps(_summary(spec.name, result, model_uri), indent=2) + "\n")
    # stdout carries one line a script can capture: the model URI, or the archive path.
    print(model_uri or str(result.path))
    return 0


def _s3_client_for_upload() -> S3Client:
    import boto3

    session = boto3.session.Session()
    if session.get_credentials() is None:
        raise PackagingError(
            "--upload needs AWS credentials and none were found (environment, shared files, "
            "container or instance role); nothing was packaged"
        )
    if session.region_name == "":  # botocore would build https://s3..amazonaws.com and raise
        raise PackagingError(
            "--upload: the AWS region is set but empty (AWS_DEFAULT_REGION or the config file's "
            "region): unset it or name the bucket's region; nothing was packaged"
        )
    return session.client("s3")


def _upload(result: ArchiveResult, destination: str, s3_client: S3Client, spec_name: str) -> str:
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError

    from model_packaging.upload import upload_archive

    try:
        return upload_archive(
            s3_client, result.path, result.sha256, destination, spec_name=spec_name
        )
    except (BotoCoreError, ClientError, S3UploadFailedError) as exc:
        raise PackagingError(
            f"upload to {destination} failed: {exc}; the archive stays at {result.path}"
        ) from exc


def _summary(spec_name: str, result: ArchiveResult, model_uri: str | None) -> dict[str, Any]:
    gguf = result.manifest.gguf_file
    return {
        "spec": spec_name,
        "archive": str(result.path),
        "archive_bytes": result.bytes,
        "archive_sha256": result.sha256,
        "model_uri": model_uri,
        "gguf": gguf.path,
        "gguf_sha256": gguf.sha256,
    }


def _info(line: str) -> None:
    print(line, file=sys.stderr)


def _refuse(exc: Exception, code: int) -> int:
    # One line: CodeBuild logs and terminals show it whole.
    message = " ".join(str(exc).split())
    print(f"model_packaging: error: {message}", file=sys.stderr)
    return code
