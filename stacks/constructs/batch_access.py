"""What a SageMaker model's role needs for batch transform jobs that `python -m ops batch`
starts: SageMaker reads a job's input and writes its output with the model's execution role."""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from stacks.constructs import nag


def grant_batch_transform(role: iam.IRole, bucket: s3.IBucket, prefix: str) -> None:
    """Read `<prefix>/*` (each job's input), write `<prefix>/*/output/*` only."""
    reads, writes = f"{prefix}/*", f"{prefix}/*/output/*"
    bucket.grant_read(role, reads)
    bucket.grant_put(role, writes)
    for pattern in (reads, writes):
        nag.acknowledge_wildcard_resource(
            role,
            bucket.arn_for_objects(pattern),
            "Batch transform jobs name their objects per job under this prefix; the model "
            "reads job inputs and writes job outputs there only.",
        )
    nag.acknowledge_wildcard_actions(
        role,
        ["s3:GetObject*", "s3:GetBucket*", "s3:List*", "s3:Abort*"],
        "CDK's S3 read and put grants, limited to the batch transform prefix of the bucket.",
    )
