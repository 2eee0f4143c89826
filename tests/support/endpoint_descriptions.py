"""SageMaker's answers about an endpoint, as ops status and ops measure read them: the endpoint,
its config, variants placed on instance pools, and an endpoint log group (none yet, or stubbed)."""

from datetime import UTC, datetime

import boto3
from botocore.stub import Stubber

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ARN = "arn:aws:sagemaker:eu-west-1:123456789012:endpoint/decisions"
IMAGE = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-adapter@sha256:" + "f" * 64


GROUP = "/aws/sagemaker/Endpoints/decisions"
PATTERN = '{ $.event = "model_loaded" }'
NO_GROUP = (
    "start-up: no log group /aws/sagemaker/Endpoints/decisions: the endpoint stack creates it "
    "before the endpoint, so this endpoint is not one it deployed, or the group was deleted"
)


def no_log_group(stubber: Stubber) -> None:
    stubber.add_client_error(
        "filter_log_events",
        service_error_code="ResourceNotFoundException",
        service_message="The specified log group does not exist.",
        http_status_code=400,
        expected_params={"logGroupName": GROUP, "filterPattern": PATTERN},
    )


def by_service(client, logs=None):
    """Keyed by service name: a command asking for the wrong client fails the test. Without
    `logs`, the endpoint has no log group."""
    if logs is None:
        logs = boto3.client(
            "logs", region_name="eu-west-1", aws_access_key_id="t", aws_secret_access_key="t"
        )
        stubber = Stubber(logs)
        no_log_group(stubber)
        stubber.activate()
    return {"sagemaker": client, "logs": logs}.__getitem__


def endpoint(status="InService", variants=None, **extra):
    return {
        "EndpointName": "decisions",
        "EndpointArn": ARN,
        "EndpointConfigName": "config-1",
        "EndpointStatus": status,
        "CreationTime": NOW,
        "LastModifiedTime": NOW,
        "ProductionVariants": variants or [],
        **extra,
    }


def config(variants):
    return {
        "EndpointConfigName": "config-1",
        "EndpointConfigArn": ARN + "-config",
        "ProductionVariants": variants,
        "CreationTime": NOW,
    }


def pool_variant(name, running: dict[str, int], *, current=1, desired=1, **extra) -> dict:
    """A described variant placed on instance pools: instance type -> instances running."""
    pools = [{"InstanceType": t, "CurrentInstanceCount": n} for t, n in running.items()]
    return {
        "VariantName": name,
        "CurrentInstanceCount": current,
        "DesiredInstanceCount": desired,
        "InstancePools": pools,
        **extra,
    }


def pool_config(name, instance_types: list[str]) -> dict:
    """A configured variant whose pools are `instance_types` in priority order."""
    pools = [{"InstanceType": t, "Priority": p} for p, t in enumerate(instance_types, start=1)]
    return {"VariantName": name, "ModelName": "model-1", "InstancePools": pools}


def stub_pool_endpoint(stubber, status="InService", **extra):
    stubber.add_response(
        "describe_endpoint",
        endpoint(
            status,
            [
                pool_variant(
                    "gpu",
                    {"ml.g5.xlarge": 0, "ml.g6e.xlarge": 1},
                    DeployedImages=[{"SpecifiedImage": "repo:tag", "ResolvedImage": IMAGE}],
                )
            ],
            **extra,
        ),
        expected_params={"EndpointName": "decisions"},
    )
    stubber.add_response(
        "describe_endpoint_config",
        config([pool_config("gpu", ["ml.g6e.xlarge", "ml.g5.xlarge"])]),
        expected_params={"EndpointConfigName": "config-1"},
    )
