"""boto3 clients as the operator CLI and the evaluation command use them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

# A boto3 client. boto3 ships no type information (and no stubs are installed), so a client's
# methods and answers are untyped: Any, named for what it is.
Client: TypeAlias = Any
ClientFactory = Callable[[str], Client]


def boto3_clients(region: str | None) -> ClientFactory:
    """service name -> client in `region`; SageMaker Runtime with one retry layer only (the
    caller's, for 503) and a read timeout past the 60 s invocation limit."""

    def make(service: str) -> Client:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import NoRegionError

        config = (
            Config(retries={"total_max_attempts": 1}, read_timeout=70)
            if service == "sagemaker-runtime"
            else None
        )
        session = boto3.session.Session(region_name=region)
        if not session.region_name:  # none, or an empty AWS_DEFAULT_REGION: an invalid endpoint
            raise NoRegionError()
        return session.client(service, config=config)

    return make
