"""A real boto3 client answering from botocore's Stubber (dummy credentials, no network)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import boto3
from botocore.stub import Stubber


@contextlib.contextmanager
def stubbed_client(service: str, region: str = "eu-west-1") -> Iterator[tuple[object, Stubber]]:
    """Yields (client, stubber); every response queued must have been used by the end."""
    client = boto3.client(
        service, region_name=region, aws_access_key_id="test", aws_secret_access_key="test"
    )
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def stack_description(
    name: str, outputs: dict[str, str] | None = None, *, status: str = "CREATE_COMPLETE"
) -> dict:
    """A DescribeStacks response for one stack, with these outputs (None: none at all)."""
    stack: dict = {"StackName": name, "CreationTime": "2026-01-01T00:00:00Z", "StackStatus": status}
    if outputs is not None:
        stack["Outputs"] = [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()]
    return {"Stacks": [stack]}


CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def without_aws_credentials(monkeypatch, tmp_path) -> None:
    """boto3's own credential chain, left to find nothing (and to ask no instance role), so a
    real client fails before any request leaves the machine."""
    for name in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
