"""The ArtifactStore construct, built alone in a bare stack: retained, and disposable."""

from __future__ import annotations

import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Match, Template

from stacks.constructs.artifact_store import ArtifactStore
from tests.support.cdk_templates import bare_stack, grants, one, policy_statements, resources


def bare(*, retain: bool) -> Template:
    """The store under the `models` prefix, with a publisher role granted its one right."""
    stack = bare_stack()
    store = ArtifactStore(stack, "Artifacts", model_prefix="/models/", retain=retain)
    publisher = iam.Role(
        stack, "Publisher", assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com")
    )
    store.grant_publish_models(publisher)
    return Template.from_stack(stack)


@pytest.fixture(scope="module")
def retained() -> Template:
    return bare(retain=True)


@pytest.fixture(scope="module")
def disposable() -> Template:
    return bare(retain=False)


def test_artifact_bucket_is_encrypted_private_versioned_logged_and_retained(retained):
    logical_id, bucket = one(
        retained, "AWS::S3::Bucket", {"VersioningConfiguration": Match.any_value()}
    )
    props = bucket["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"] == [
        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
    ]
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    logs_bucket = props["LoggingConfiguration"]["DestinationBucketName"]["Ref"]
    assert logs_bucket.startswith("ArtifactsAccessLogs")
    assert bucket["DeletionPolicy"] == bucket["UpdateReplacePolicy"] == "Retain"
    assert resources(retained, "AWS::S3::Bucket")[logs_bucket]["DeletionPolicy"] == "Retain"
    assert "BucketName" not in props


@pytest.mark.parametrize("store", ["retained", "disposable"])
def test_every_bucket_refuses_plain_http(store, request):
    policies = resources(request.getfixturevalue(store), "AWS::S3::BucketPolicy")
    assert len(policies) == 2  # the artifact bucket and its access logs
    for policy in policies.values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        (deny,) = [s for s in statements if s["Effect"] == "Deny"]
        assert deny["Action"] == "s3:*"
        assert deny["Principal"] == {"AWS": "*"}
        assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_publishing_may_write_only_under_the_model_prefix(retained):
    granted = grants(retained, "Publisher")
    bucket = next(
        k
        for k, b in resources(retained, "AWS::S3::Bucket").items()
        if "VersioningConfiguration" in b["Properties"]
    )
    # Presence is checked by listing the key (model_packaging/upload.py), never by reading it.
    assert granted[("s3:AbortMultipartUpload", "s3:PutObject")] == [f"<{bucket}.Arn>/models/*"]
    assert granted[("s3:ListBucket",)] == [f"<{bucket}.Arn>"]
    listing = next(
        s for s in policy_statements(retained, "Publisher") if s["Action"] == "s3:ListBucket"
    )
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["models/*"]}}
    assert not any(a.startswith("ecr:") for actions in granted for a in actions)
    assert not any("s3:Delete" in a or a == "s3:*" for actions in granted for a in actions)


def test_unretained_buckets_are_emptied_and_deleted_on_destroy(disposable):
    for bucket in resources(disposable, "AWS::S3::Bucket").values():
        assert bucket["DeletionPolicy"] == "Delete"
    disposable.resource_count_is("Custom::S3AutoDeleteObjects", 2)
