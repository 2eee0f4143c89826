"""Upload an archive under a content-addressed key: PREFIX/<archive sha256>/model.tar.gz."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from botocore.exceptions import ClientError

from model_packaging.errors import PackagingError

ARCHIVE_NAME = "model.tar.gz"


def parse_s3_destination(url: str) -> tuple[str, str]:
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise PackagingError(f"upload destination must look like s3://BUCKET/PREFIX, got {url!r}")
    return parsed.netloc, parsed.path.strip("/")


def archive_key(prefix: str, archive_sha256: str) -> str:
    return "/".join(part for part in (prefix, archive_sha256, ARCHIVE_NAME) if part)


def upload_archive(
    s3_client, archive: Path, archive_sha256: str, destination: str, transfer_config=None
) -> str:
    bucket, prefix = parse_s3_destination(destination)
    key = archive_key(prefix, archive_sha256)
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


def _object_exists(s3_client, bucket: str, key: str) -> bool:
    try:
        s3_client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}:
            return False
        raise
    return True
