"""S3 locations as the background commands use them: upload a body, see whether an answer has
appeared, fetch it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ops.clients import Client
from ops.polling import Polling

_S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/(?P<key>.*))?$")


class S3Error(Exception):
    """An S3 call failed: the message names the location and S3's own reason."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    key: str

    @classmethod
    def parse(cls, uri: str) -> S3Location:
        match = _S3_URI.match(uri)
        if match is None:
            raise ValueError(f"{uri!r} is not an s3://<bucket>/<key> location")
        return cls(match["bucket"], match["key"] or "")

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def child(self, name: str) -> S3Location:
        """`name` under this location taken as a prefix ("a/b" + "c" -> "a/b/c")."""
        prefix = self.key.rstrip("/")
        return S3Location(self.bucket, f"{prefix}/{name}" if prefix else name)

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]


def _failed(action: str, location: S3Location, error: Exception) -> S3Error:
    return S3Error(f"cannot {action} {location.uri}: {error}")


def upload(s3: Client, location: S3Location, body: bytes, content_type: str) -> None:
    from botocore.exceptions import ClientError

    try:
        s3.put_object(Bucket=location.bucket, Key=location.key, Body=body, ContentType=content_type)
    except ClientError as error:
        raise _failed("upload to", location, error) from None


def exists(s3: Client, location: S3Location) -> bool:
    """Whether the object is there, asked as a one-key listing under its own key.

    HeadObject answers 403 for a missing key to a caller without s3:ListBucket, the same as
    for a forbidden one; a listing needs only s3:ListBucket conditioned on the prefix
    (docs/operate.md's operator permissions) and tells the two apart: an empty listing, or
    AccessDenied.
    """
    from botocore.exceptions import ClientError

    try:
        listed = s3.list_objects_v2(Bucket=location.bucket, Prefix=location.key, MaxKeys=1)
    except ClientError as error:
        raise _failed("look for", location, error) from None
    # The key itself sorts before every longer key it prefixes: first when present.
    return any(entry["Key"] == location.key for entry in listed.get("Contents", []))


def fetch(s3: Client, location: S3Location) -> bytes:
    from botocore.exceptions import ClientError

    try:
        body: bytes = s3.get_object(Bucket=location.bucket, Key=location.key)["Body"].read()
        return body
    except ClientError as error:
        raise _failed("fetch", location, error) from None


def wait_for_first(s3: Client, locations: list[S3Location], polling: Polling) -> S3Location | None:
    """The first of `locations` to exist, polling; None after the timeout."""
    found, _ = polling.until(
        lambda: next((location for location in locations if exists(s3, location)), None),
        lambda found: found is not None,
    )
    return found
