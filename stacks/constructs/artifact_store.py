"""The S3 bucket that holds model archives, with a second bucket for its access logs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.constructs import nag


class _BucketSettings(TypedDict, total=False):
    """What both buckets are created with (s3.Bucket's keyword arguments)."""

    encryption: s3.BucketEncryption
    block_public_access: s3.BlockPublicAccess
    enforce_ssl: bool
    object_ownership: s3.ObjectOwnership
    removal_policy: RemovalPolicy
    auto_delete_objects: bool


class ArtifactStore(Construct):
    """Encrypted, versioned, TLS-only, never public; model archives live under `model_prefix`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_prefix: str,
        retain: bool,
        work_prefixes: Sequence[str] = (),
        work_retention: Duration = Duration.days(30),
    ) -> None:
        """`work_prefixes`: where the endpoints' requests and answers live (asynchronous and
        batch); unlike model archives they expire after `work_retention`."""
        super().__init__(scope, construct_id)
        self.model_prefix = model_prefix.strip("/")
        removal: _BucketSettings = (
            {"removal_policy": RemovalPolicy.RETAIN}
            if retain
            # Without retention, `cdk destroy` empties the buckets first, so deletion succeeds.
            else {"removal_policy": RemovalPolicy.DESTROY, "auto_delete_objects": True}
        )
        common: _BucketSettings = {
            "encryption": s3.BucketEncryption.S3_MANAGED,
            "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
            "enforce_ssl": True,
            "object_ownership": s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            **removal,
        }
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365))],
            **common,
        )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            versioned=True,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="artifact-bucket/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    noncurrent_version_expiration=Duration.days(90),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                ),
                *(
                    s3.LifecycleRule(prefix=f"{prefix}/", expiration=work_retention)
                    for prefix in work_prefixes
                ),
            ],
            **common,
        )
        if retain:
            # A retained bucket keeps its TLS-only and log-delivery policies: deleted with the
            # stack, they would leave the kept bucket open to plain HTTP.
            for bucket in (self.access_logs, self.bucket):
                assert bucket.policy is not None  # enforce_ssl gives each bucket one
                bucket.policy.apply_removal_policy(RemovalPolicy.RETAIN)

    @property
    def models_uri(self) -> str:
        return f"s3://{self.bucket.bucket_name}/{self.model_prefix}/"

    def grant_publish_models(self, grantee: iam.IGrantable) -> iam.Grant:
        """Write archives under the model prefix, and list keys there; nothing else in the bucket.

        The uploader checks for an archive by listing its key, which this conditioned
        s3:ListBucket allows; it never reads an object back, so no s3:GetObject. (HeadObject
        would answer 403 for a missing key here, since listing is limited to the prefix.)
        """
        objects = self.bucket.arn_for_objects(f"{self.model_prefix}/*")
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:PutObject", "s3:AbortMultipartUpload"],
            resource_arns=[objects],
        ).combine(
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["s3:ListBucket"],
                resource_arns=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{self.model_prefix}/*"]}},
            )
        )
        principal = grantee.grant_principal
        if isinstance(principal, Construct):
            nag.acknowledge_wildcard_resource(
                principal,
                objects,
                f"Model archives have content-addressed keys under {self.model_prefix}/, so the "
                "grant covers that prefix and nothing else in the bucket.",
            )
        return grant
