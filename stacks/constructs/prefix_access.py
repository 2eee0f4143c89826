"""Read rights on one prefix of a bucket. CDK's `bucket.grant_read(role, "prefix/*")` also
grants `s3:List*` on the whole bucket (every key name in it); here listing is conditioned on
the prefix, which is what tells a missing object from a forbidden one (HeadObject answers 403
for both without s3:ListBucket)."""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3


def grant_read_prefix(grantee: iam.IGrantable, bucket: s3.IBucket, prefix: str) -> iam.Grant:
    """Get the objects under `<prefix>/` and list keys under it, nothing else of the bucket."""
    objects = iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["s3:GetObject"],
        resource_arns=[bucket.arn_for_objects(f"{prefix}/*")],
    )
    listing = iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["s3:ListBucket"],
        resource_arns=[bucket.bucket_arn],
        conditions={"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
    )
    return objects.combine(listing)
