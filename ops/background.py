"""What python -m ops submit (asynchronous endpoint) and python -m ops batch (batch transform)
share, the two ways to send decisions that may take their time, answered through S3: S3
locations from options, the endpoint stack's outputs, and request files checked locally."""

from __future__ import annotations

import json
from pathlib import Path

from ops.clients import ClientFactory
from ops.common import UsageError
from ops.s3_objects import S3Location
from ops.transform import JSON_LINES

JSON_LINES_SUFFIXES = (".jsonl", ".jsonlines")


def s3_location(uri: str, option: str) -> S3Location:
    try:
        return S3Location.parse(uri)
    except ValueError as error:
        raise UsageError(f"{option}: {error}") from None


def stack_outputs(make_client: ClientFactory, stack: str) -> dict[str, str]:
    from botocore.exceptions import ClientError

    try:
        stacks = make_client("cloudformation").describe_stacks(StackName=stack)["Stacks"]
    except ClientError as error:
        raise UsageError(f"cannot read the outputs of stack {stack}: {error}") from None
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}


def read_request(path: str) -> tuple[bytes, str]:
    """The file's bytes and content type, checked locally: a typo is a clear local error."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    json_lines = path.endswith(JSON_LINES_SUFFIXES)
    lines = raw.splitlines() if json_lines else [raw]
    for number, line in enumerate(lines, start=1):
        try:
            json.loads(line)
        except ValueError as error:
            where = f" line {number}" if json_lines else ""
            raise UsageError(f"{path}{where} is not JSON: {error}") from None
    return raw, JSON_LINES if json_lines else "application/json"
