"""Which IAM action an `aws` CLI command or a boto3 call needs, from botocore's service models.

An API operation `Op` of a service is the action `<prefix>:Op`, the prefix being the model's
signing name (else its endpoint prefix). The exceptions are written down here, each from the
Service Authorization Reference: CLI commands that are no API operation, and S3, whose actions
are named after permissions rather than operations.
"""

from __future__ import annotations

from functools import cache

import botocore.session
from botocore import xform_name

# CLI customizations that call other operations than their name says.
CLI_COMMANDS = {
    ("ecr", "get-login-password"): ("ecr:GetAuthorizationToken",),
    # The public gallery's token is a bearer token minted by STS.
    ("ecr-public", "get-login-password"): (
        "ecr-public:GetAuthorizationToken",
        "sts:GetServiceBearerToken",
    ),
}
# S3 operations whose permission has another name (all others: s3:<Operation>).
S3_PERMISSIONS = {
    "ListObjectsV2": "ListBucket",
    "ListObjects": "ListBucket",
    "HeadObject": "GetObject",
    "HeadBucket": "ListBucket",
    "CreateMultipartUpload": "PutObject",
    "UploadPart": "PutObject",
    "CompleteMultipartUpload": "PutObject",
    "ListParts": "ListMultipartUploadParts",
}


@cache
def _model(service: str):
    return botocore.session.get_session().get_service_model(service)


def action_prefix(service: str) -> str:
    metadata = _model(service).metadata
    return metadata.get("signingName") or metadata["endpointPrefix"]


def operation_action(service: str, operation: str) -> str:
    """The IAM action of one API operation, e.g. ('s3', 'ListObjectsV2') -> s3:ListBucket."""
    assert operation in _model(service).operation_names, (service, operation)
    if service == "s3":
        return f"s3:{S3_PERMISSIONS.get(operation, operation)}"
    return f"{action_prefix(service)}:{operation}"


def cli_actions(service: str, command: str) -> tuple[str, ...]:
    """The IAM actions of `aws <service> <command>`."""
    if (service, command) in CLI_COMMANDS:
        return CLI_COMMANDS[service, command]
    operations = {xform_name(op, "-"): op for op in _model(service).operation_names}
    assert command in operations, f"`aws {service} {command}` is no operation of {service}"
    return (operation_action(service, operations[command]),)


def boto3_operation(service: str, method: str) -> str | None:
    """The operation a boto3 client method calls (`describe_stacks` -> DescribeStacks)."""
    operations = {xform_name(op): op for op in _model(service).operation_names}
    return operations.get(method)


# What docker does against ECR (ECR's documentation of the permissions a push and a pull need).
DOCKER_PUSH = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:InitiateLayerUpload",
    "ecr:UploadLayerPart",
    "ecr:CompleteLayerUpload",
    "ecr:PutImage",
)
DOCKER_PULL = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")
