"""The whole app from one validated config: the stateful stack, and the endpoints once built."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import App, Tags, Validations
from cdk_nag import AwsSolutionsChecks

from stacks.config import AppConfig
from stacks.endpoint_stack import EndpointStack
from stacks.stateful_stack import StatefulStack


def compose(
    app: App, *, config: AppConfig, repository_root: Path
) -> tuple[StatefulStack, EndpointStack | None]:
    """Add the stacks to `app`. Both are environment-agnostic: no account, region or lookups."""
    Tags.of(app).add("project", "decision-models")
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))

    stateful = StatefulStack(
        app,
        f"{config.stack_prefix}-Stateful",
        config=config,
        repository_root=repository_root,
        description="Decision models: artifact bucket, image repository, build projects",
    )
    endpoints = None
    if config.deploys_endpoints:
        endpoints = EndpointStack(
            app,
            f"{config.stack_prefix}-Endpoints",
            config=config,
            description="Decision models: SageMaker endpoints of one model and image release",
        )
    return stateful, endpoints
