"""The operator CLI's fixtures: a stubbed SageMaker Runtime client and a body file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def runtime():
    """A SageMaker Runtime client answering from botocore's Stubber: (client, stubber)."""
    from tests.support.aws_stubs import (
        stubbed_client,
    )  # boto3: not imported by runs that never use it

    with stubbed_client("sagemaker-runtime") as stubbed:
        yield stubbed


@pytest.fixture
def body_file(tmp_path) -> Path:
    """A JSON file holding the OpenAPI document's example decision."""
    from decision_adapter.http.openapi import DECISION_EXAMPLE

    path = tmp_path / "decision.json"
    path.write_text(json.dumps(DECISION_EXAMPLE))
    return path
