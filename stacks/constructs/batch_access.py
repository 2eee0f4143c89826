"""What a SageMaker model's role needs for batch transform jobs that `python -m ops batch`
starts: SageMaker reads a job's input and writes its output with the model's execution role."""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from stacks.constructs import nag, runtime_grants
from stacks.constructs.prefix_access import grant_read_prefix


def grant_batch_transform(role: iam.Role, bucket: s3.IBucket, prefix: str) -> None:
    """Read and list `<prefix>/*` (each job's input), write `<prefix>/*/output/*` only; the
    jobs' container logs and instance metrics go to the TransformJobs group and namespace."""
    reads, writes = f"{prefix}/*", f"{prefix}/*/output/*"
    grant_read_prefix(role, bucket, prefix)
    bucket.grant_put(role, writes)
    runtime_grants.grant_logs(role, runtime_grants.TRANSFORM_JOB_LOGS)
    runtime_grants.grant_metrics(role, runtime_grants.TRANSFORM_JOB_METRICS)
    for pattern in (reads, writes):
        nag.acknowledge_wildcard_resource(
            role,
            bucket.arn_for_objects(pattern),
            "Batch transform jobs name their objects per job under this prefix; the model "
            "reads job inputs and writes job outputs there only.",
        )
    nag.acknowledge_wildcard_actions(
        role,
        ["s3:Abort*"],
        "CDK's S3 put grant, limited to the batch transform output keys of the bucket.",
    )
