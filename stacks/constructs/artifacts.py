"""What an endpoint is made of: a container image pinned by digest and a model archive in S3.

Each knows its own location and grants exactly the right to fetch it, so an execution role gets
pull rights on one repository and read rights on one object, nothing wider.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aws_cdk import Aws, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from stacks.constructs import nag
from stacks.dlc_registry import dlc_registry

_PULL_ACTIONS = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:GetDownloadUrlForLayer",
    "ecr:BatchGetImage",
)
_ECR_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?"
    r"/(?P<repository>[^@:]+)@sha256:[0-9a-f]{64}$"
)
_S3_URI = re.compile(r"^s3://(?P<bucket>[^/]+)/(?P<key>.+)$")


@dataclass(frozen=True)
class ContainerImage:
    """An ECR image pinned by digest: its URI and the ARN of the repository it is pulled from."""

    image_uri: str
    repository_arn: str

    @classmethod
    def from_dlc(cls, scope: IConstruct, *, repository_name: str, digest: str) -> ContainerImage:
        """An AWS Deep Learning Container in the stack's region. The registry account differs in a
        few regions (stacks/dlc_registry.py); an unsupported region fails synthesis when the stack
        knows its region, and the deployment's first step otherwise."""
        stack = Stack.of(scope)
        account, domain = dlc_registry(scope)
        return cls(
            image_uri=f"{account}.dkr.ecr.{stack.region}.{domain}/{repository_name}@{digest}",
            repository_arn=stack.format_arn(
                service="ecr", account=account, resource="repository", resource_name=repository_name
            ),
        )

    @classmethod
    def from_ecr_uri(cls, uri: str) -> ContainerImage:
        """An image in a private ECR repository, as `<account>.dkr.ecr.<region>...@sha256:...`."""
        match = _ECR_URI.match(uri)
        if match is None:
            raise ValueError(f"{uri!r} is not a private ECR image URI pinned by digest")
        return cls(
            image_uri=uri,
            repository_arn=(
                f"arn:{Aws.PARTITION}:ecr:{match['region']}:{match['account']}"
                f":repository/{match['repository']}"
            ),
        )

    def grant_pull(self, grantee: iam.IGrantable) -> iam.Grant:
        # GetAuthorizationToken has no resource-level permissions: it must name "*".
        token = iam.Grant.add_to_principal(
            grantee=grantee, actions=["ecr:GetAuthorizationToken"], resource_arns=["*"]
        )
        pull = iam.Grant.add_to_principal(
            grantee=grantee, actions=list(_PULL_ACTIONS), resource_arns=[self.repository_arn]
        )
        principal = grantee.grant_principal
        if isinstance(principal, Construct):
            nag.acknowledge(
                principal,
                "IAM5[Resource::*]",
                "ecr:GetAuthorizationToken supports no resource-level permissions; the pull "
                "rights themselves name the repository.",
            )
        return token.combine(pull)


@dataclass(frozen=True)
class ModelArchive:
    """A `model.tar.gz` in S3, which SageMaker extracts to /opt/ml/model."""

    uri: str
    bucket_name: str
    key: str

    @classmethod
    def from_s3_uri(cls, uri: str) -> ModelArchive:
        match = _S3_URI.match(uri)
        if match is None:
            raise ValueError(f"{uri!r} is not an s3://<bucket>/<key> URI")
        return cls(uri=uri, bucket_name=match["bucket"], key=match["key"])

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:GetObject"],
            resource_arns=[f"arn:{Aws.PARTITION}:s3:::{self.bucket_name}/{self.key}"],
        )
