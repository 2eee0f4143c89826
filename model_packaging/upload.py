"""Upload an archive under a content-addressed key: PREFIX/<spec>/<archive sha256>/model.tar.gz.

The spec's name in the key (the manifest's `spec`) travels with the URI the build prints: the
release's `modelDataUri` names the model it deploys, which capacity is looked up by
(stacks/config/builds.py, `release_model`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeAlias
from urllib.parse import urlparse

from botocore.exceptions import ClientError

from model_packaging.errors import PackagingError

ARCHIVE_NAME = "model.tar.gz"
# A boto3 S3 client and boto3's TransferConfig: boto3 ships no type information.
S3Client: TypeAlias = Any
TransferConfig: TypeAlias = Any


def parse_s3_destination(url: str) -> tuple[str, str]:
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise PackagingError(f"upload destination must look like s3://BUCKET/PREFIX, got {url!r}")
    return parsed.netloc, parsed.path.strip("/")


def archive_key(prefix: str, spec_name: str, archive_sha256: str) -> str:
    return "/".join(part for part in (prefix, spec_name, archive_sha256, ARCHIVE_NAME) if part)


def upload_archive(
    s3_client: S3Client,
    archive: Path,
    archive_sha256: str,
    destination: str,
    transfer_config: TransferConfig | None = None,
    *,
    spec_name: str,
) -> str:
    bucket, prefix = parse_s3_destination(destination)
    key = archive_key(prefix, spec_name, archive_sha256)
    uri = f"s3://{bucket}/{key}"
    # The key names the content, so an object already there is this very archive.
    if _object_exists(s3_client, bucket, key):
        return uri
    s3_client.upload_file(
        str(archive),
        bucket,
        key,
        ExtraArgs={"ContentType": "application/gzip", "Metadata": {"sha256": archive_sha256}},
        Config=transfer_config,
    )
    return uri


def _object_exists(s3_client: S3Client, bucket: str, key: str) -> bool:
    """Whether `key` exists, asked by listing it as a prefix rather than with HeadObject.

    HeadObject on a missing key answers 403, not 404, to a caller whose s3:ListBucket is
    limited by an s3:prefix condition (the packaging role's), so "absent" and "denied" look the
    same there. A listing with the key as prefix is what that condition allows, and it answers
    both cases apart: no such key, or an AccessDenied that is a real missing permission.
    """
    try:
        listed = s3_client.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    except ClientError as exc:
        # A listing denied has an error body: code AccessDenied and a message (never a bare 403).
        error = exc.response["Error"]
        if error.get("Code") == "AccessDenied":
            raise PackagingError(
                f"not allowed to check for s3://{bucket}/{key}: the uploader needs s3:ListBucket "
                f"on {bucket} for the prefix {key} ({error['Message']})"
            ) from exc
        raise
    # The key itself sorts before any longer key it prefixes, so it comes first when present.
    return any(entry["Key"] == key for entry in listed.get("Contents", []))
