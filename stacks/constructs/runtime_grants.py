"""What SageMaker does with a model's execution role while the model runs: write the
container's logs and publish the instance metrics (AWS's "CreateModel API: Execution Role
Permissions"), each scoped to the one log group and metric namespace the role's work uses."""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam

from stacks.constructs import nag

LOG_ACTIONS = (
    "logs:CreateLogGroup",
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "logs:DescribeLogStreams",
)
# The namespaces SageMaker publishes instance metrics (CPU, memory, disk, GPU) under.
ENDPOINT_METRICS = "/aws/sagemaker/Endpoints"
TRANSFORM_JOB_METRICS = "/aws/sagemaker/TransformJobs"
TRANSFORM_JOB_LOGS = "/aws/sagemaker/TransformJobs"


def endpoint_log_group(endpoint_name: str) -> str:
    return f"/aws/sagemaker/Endpoints/{endpoint_name}"


def grant_logs(role: iam.Role, log_group_name: str) -> None:
    """Create the log group and write its streams (SageMaker names them per instance)."""
    log_group_arn = Stack.of(role).format_arn(
        service="logs",
        resource="log-group",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
        resource_name=log_group_name,
    )
    role.add_to_policy(
        iam.PolicyStatement(
            actions=list(LOG_ACTIONS), resources=[log_group_arn, f"{log_group_arn}:*"]
        )
    )
    nag.acknowledge_wildcard_resource(
        role,
        f"{log_group_arn}:*",
        f"Log streams of the log group {log_group_name} only; SageMaker names them per "
        "instance (and per job).",
    )


def grant_metrics(role: iam.Role, namespace: str) -> None:
    """cloudwatch:PutMetricData has no resource-level permissions; the namespace condition
    is the scope IAM offers."""
    role.add_to_policy(
        iam.PolicyStatement(
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": namespace}},
        )
    )
    nag.acknowledge(
        role,
        "IAM5[Resource::*]",
        "ecr:GetAuthorizationToken and cloudwatch:PutMetricData support no resource-level "
        "permissions; the pull rights name the repository, the metrics a namespace condition.",
    )
