"""What the ops submit and ops batch tests share: an artifacts bucket in moto, a fake clock, and
the clients factory the CLI takes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import boto3
from decision_adapter.http.openapi import DECISION_EXAMPLE as DECISION
from moto import mock_aws

BUCKET = "artifacts-bucket"
ENDPOINT = "decision-models-decision-async"
ANSWER = {"result": {"id": "d", "probabilities": [0.75, 0.25]}}
OUTPUT = f"s3://{BUCKET}/async/output/abc.out"
FAILURE = f"s3://{BUCKET}/async/failure/abc-error.out"


@contextmanager
def artifacts_bucket() -> Iterator:
    """An S3 client on moto with BUCKET created (objects really uploaded and fetched)."""
    with mock_aws():
        client = boto3.client(
            "s3", region_name="eu-west-1", aws_access_key_id="test", aws_secret_access_key="test"
        )
        client.create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
        )
        yield client


def factory(**clients):
    return lambda service: clients[service.replace("-", "_")]


def keys(s3, prefix: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return [item["Key"] for item in listed]


def put(s3, uri: str, body: bytes) -> None:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    s3.put_object(Bucket=bucket, Key=key, Body=body)


class Clock:
    """A fake clock that moves only when the CLI sleeps; `on_sleep` acts as AWS would."""

    def __init__(self, on_sleep=None) -> None:
        self.now, self.slept, self.on_sleep = 0.0, 0, on_sleep

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += 1
        if self.on_sleep:
            self.on_sleep(self.slept)

    def __call__(self) -> float:
        return self.now


def request_file(tmp_path, name="decision.json", content=None):
    path = tmp_path / name
    path.write_text(json.dumps(DECISION) if content is None else content)
    return str(path)
