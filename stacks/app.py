"""The whole app from one validated config: the stateful stack, and the endpoints once built."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import App, Environment, Tags, Validations
from cdk_nag import AwsSolutionsChecks

from stacks.config import AppConfig
from stacks.endpoint_stack import EndpointStack
from stacks.stateful_stack import StatefulStack


def compose(
    app: App, *, config: AppConfig, repository_root: Path
) -> tuple[StatefulStack, EndpointStack | None]:
    """Add the stacks to `app`. Both are account-agnostic and do no lookups; they are also
    region-agnostic unless `region` is configured."""
    Tags.of(app).add("project", "decision-models")
    env = Environment(region=config.region) if config.region else None
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))

    stateful = StatefulStack(
        app,
        f"{config.stack_prefix}-Stateful",
        config=config,
        repository_root=repository_root,
        env=env,
        description="Decision models: artifact bucket, image repository, build projects",
    )
    endpoints = None
    if config.deploys_endpoints:
        endpoints = EndpointStack(
            app,
            f"{config.stack_prefix}-Endpoints",
            config=config,
            env=env,
            description="Decision models: SageMaker endpoints of one model and image release",
        )
    return stateful, endpoints
