"""The whole app from one validated config: the stateful stack, and the endpoints once built.

Only this module reads `AppConfig`; each stack gets the few values it needs, by keyword.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import App, Environment, Tags, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

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
        repository_root=repository_root,
        builds=config.builds,
        dlc=config.dlc,
        cuda_architectures=config.builds.cuda_architectures,
        retain_artifacts=config.retain_artifacts,
        work_prefixes=config.work_prefixes,
        work_retention_days=config.work_retention_days,
        image_repository_name=config.image_repository_name,
        env=env,
        description="Decision models: artifact bucket, image repository, build projects",
    )
    endpoints = None
    if config.deploys_endpoints:
        endpoints = endpoint_stack(
            app,
            f"{config.stack_prefix}-Endpoints",
            config=config,
            env=env,
            description="Decision models: SageMaker endpoints of one model and image release",
        )
    return stateful, endpoints


def endpoint_stack(
    scope: Construct, construct_id: str, *, config: AppConfig, **kwargs: Any
) -> EndpointStack:
    """The endpoint stack of the release `config` names (it must have `modelDataUri`)."""
    if config.model_data_uri is None:
        raise ValueError("the endpoint stack needs modelDataUri (`python -m ops build model`)")
    return EndpointStack(
        scope,
        construct_id,
        model_data_uri=config.model_data_uri,
        dlc=config.dlc,
        text_generation=config.text_generation_endpoint,
        decision_cpu=config.decision_cpu_endpoint,
        decision_cpu_image=config.decision_cpu_image,
        decision_gpu=config.decision_gpu_endpoint,
        decision_gpu_image=config.decision_gpu_image,
        invoker_role_arns=config.invoker_role_arns,
        decision_async=config.decision_async_endpoint,
        release_model=config.release_model,
        **kwargs,
    )
