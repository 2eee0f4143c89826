"""The operator CLI with exactly the permissions docs/operate.md lists: `ops submit --wait` runs to
its answer against S3 answering as AWS answers that policy (tests/support/s3_under_policy.py), and
`ops mark-released` tags an image the lifecycle rules then keep."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY
from decision_adapter.http.openapi import DECISION_EXAMPLE as DECISION
from moto import mock_aws

from ops.cli import main
from ops.released_images import RELEASED_TAG_PREFIX
from tests.support.aws_stubs import stubbed_client
from tests.support.endpoint_descriptions import NOW
from tests.support.s3_under_policy import restrict

ROOT = Path(__file__).resolve().parents[2]
REGION, BUCKET = "eu-west-1", "artifacts-bucket"
ENDPOINT = "decision-models-decision-async"
OUTPUT = f"s3://{BUCKET}/async/output/abc.out"
FAILURE = f"s3://{BUCKET}/async/failure/abc-error.out"
ANSWER = {"result": {"id": "d", "probabilities": [0.75, 0.25]}}


def readme_operator_policy() -> list[dict]:
    """docs/operate.md's list as an identity policy: every action on any resource, except where
    it limits one (s3:ListBucket to its condition, logs:FilterLogEvents to the endpoint's group)."""
    readme = (ROOT / "docs" / "operate.md").read_text()
    (listed,) = re.findall(r"The operator's credentials need:\s+([^.]+)\.", readme)
    actions = set(re.findall(r"`([a-z0-9-]+:[A-Za-z]+)`", listed))
    statements = [
        {"Effect": "Allow", "Action": sorted(actions - {"s3:ListBucket"}), "Resource": "*"}
    ]
    if "s3:ListBucket" in actions:
        (condition,) = re.findall(
            r'limited to [^`]*`(\{"StringLike": \{"s3:prefix": [^`]*\})`', readme
        )
        statements.append(
            {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": "*",
                "Condition": json.loads(condition),
            }
        )
    return statements


def client(service: str):
    return boto3.client(
        service, region_name=REGION, aws_access_key_id="test", aws_secret_access_key="test"
    )


@pytest.fixture
def s3_pair():
    """(a client under the documented policy, an unrestricted one) on one moto account."""
    with mock_aws():
        unrestricted = client("s3")
        unrestricted.create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
        )
        yield client("s3"), unrestricted


def submit_and_wait(s3, unrestricted, tmp_path) -> int:
    body = tmp_path / "decision.json"
    body.write_text(json.dumps(DECISION))
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:  # the endpoint answers while the CLI polls
            key = OUTPUT.removeprefix(f"s3://{BUCKET}/")
            unrestricted.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(ANSWER).encode())

    argv = ["submit", str(body), "--endpoint", ENDPOINT, "--wait"]
    argv += ["--input-location", f"s3://{BUCKET}/async/input"]
    with stubbed_client("sagemaker-runtime") as (runtime, stubber):
        stubber.add_response(
            "invoke_endpoint_async",
            {"InferenceId": "abc", "OutputLocation": OUTPUT, "FailureLocation": FAILURE},
            {
                "EndpointName": ENDPOINT,
                "InputLocation": ANY,
                "ContentType": "application/json",
                "InvocationTimeoutSeconds": 3600,
            },
        )
        clients = {"s3": s3, "sagemaker-runtime": runtime}
        return main(argv, clients=clients.__getitem__, sleep=sleep, clock=lambda: len(slept))


def test_submit_waits_for_its_answer_with_readmes_operator_permissions(s3_pair, tmp_path, capsys):
    s3, unrestricted = s3_pair
    seen = restrict(s3, readme_operator_policy(), unrestricted=unrestricted)
    assert submit_and_wait(s3, unrestricted, tmp_path) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == ANSWER
    # It polled while the answer was missing, under the prefix the documented condition names.
    assert f"s3:ListBucket on arn:aws:s3:::{BUCKET} s3:prefix=async/output/abc.out" in seen


def test_without_listing_a_missing_answer_is_forbidden_and_said_so(s3_pair, tmp_path, capsys):
    """What S3 does to a caller without s3:ListBucket, and the line the operator then reads."""
    s3, unrestricted = s3_pair
    policy = [s for s in readme_operator_policy() if "s3:ListBucket" not in json.dumps(s["Action"])]
    restrict(s3, policy, unrestricted=unrestricted)
    with pytest.raises(s3.exceptions.ClientError, match=r"\(403\).*Forbidden"):
        s3.head_object(Bucket=BUCKET, Key="async/output/missing.out")
    unrestricted.put_object(Bucket=BUCKET, Key="async/output/there.out", Body=b"{}")
    assert s3.head_object(Bucket=BUCKET, Key="async/output/there.out")["ContentLength"] == 2
    assert submit_and_wait(s3, unrestricted, tmp_path) == 1
    assert capsys.readouterr().err.startswith(
        f"ops: error: cannot look for {OUTPUT}: An error occurred (AccessDenied)"
    )


# --- mark-released ---------------------------------------------------------------------------
def push(ecr, repository: str, layer: bytes) -> str:
    """An image manifest put into moto's ECR: its digest."""
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"digest": "sha256:" + hashlib.sha256(layer).hexdigest(), "size": 1},
            "layers": [],
        }
    )
    pushed = ecr.put_image(
        repositoryName=repository, imageManifest=manifest, imageTag="dockerfile-1"
    )
    return pushed["image"]["imageId"]["imageDigest"]


def test_mark_released_tags_each_image_once_and_again_changes_nothing(capsys):
    with mock_aws():
        ecr = client("ecr")
        repository = ecr.create_repository(
            repositoryName="decision-models", imageTagMutability="IMMUTABLE"
        )["repository"]
        digest = push(ecr, "decision-models", b"cpu")
        uri = f"{repository['repositoryUri']}@{digest}"
        for _ in range(2):
            assert main(["mark-released", uri], clients=lambda _: ecr) == 0
        (image,) = ecr.describe_images(repositoryName="decision-models")["imageDetails"]
        assert sorted(image["imageTags"]) == [
            "dockerfile-1",
            RELEASED_TAG_PREFIX + digest.removeprefix("sha256:"),
        ]
        missing = f"{repository['repositoryUri']}@sha256:{'0' * 64}"
        assert main(["mark-released", missing], clients=lambda _: ecr) == 1
    err = capsys.readouterr().err
    assert f"ops: error: no image {missing}" in err
    assert main(["mark-released", "decision-models:latest"], clients=lambda _: None) == 2


# --- prune-released ----------------------------------------------------------------------------
def built(ecr, layer: bytes, tag: str) -> str:
    """An image of one layer pushed to moto's ECR with its build tag (moto's digest is the
    layers'): its digest."""
    digest = "sha256:" + hashlib.sha256(layer).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "digest": digest,
            "size": 1,
            "mediaType": "application/vnd.docker.container.image.v1+json",
        },
        "layers": [
            {
                "digest": digest,
                "size": 1,
                "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
            }
        ],
    }
    pushed = ecr.put_image(
        repositoryName="decision-models", imageManifest=json.dumps(manifest), imageTag=tag
    )
    return pushed["image"]["imageId"]["imageDigest"]


def described(stubber, name: str, status: str, images: list[str]) -> None:
    """describe_endpoint of an endpoint whose one variant runs `images` (as SageMaker resolved
    them)."""
    deployed = [{"SpecifiedImage": image, "ResolvedImage": image} for image in images]
    stubber.add_response(
        "describe_endpoint",
        {
            "EndpointName": name,
            "EndpointArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/{name}",
            "EndpointConfigName": f"{name}-config",
            "EndpointStatus": status,
            "CreationTime": NOW,
            "LastModifiedTime": NOW,
            "ProductionVariants": [{"VariantName": "AllTraffic", "DeployedImages": deployed}],
        },
        expected_params={"EndpointName": name},
    )


def listed(stubber, *names: str) -> None:
    summaries = [
        {
            "EndpointName": name,
            "EndpointArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/{name}",
            "CreationTime": NOW,
            "LastModifiedTime": NOW,
            "EndpointStatus": "InService",
        }
        for name in names
    ]
    stubber.add_response("list_endpoints", {"Endpoints": summaries}, {"MaxResults": 100})


def test_prune_released_untags_the_images_no_endpoint_runs_and_keeps_the_others(capsys):
    with mock_aws(), stubbed_client("sagemaker", REGION) as (sagemaker, stubber):
        ecr = client("ecr")
        repository = ecr.create_repository(
            repositoryName="decision-models", imageTagMutability="IMMUTABLE"
        )["repository"]
        old, new = built(ecr, b"old", "dockerfile-1"), built(ecr, b"new", "dockerfile-2")
        uris = {d: f"{repository['repositoryUri']}@{d}" for d in (old, new)}
        by_service = {"ecr": ecr, "sagemaker": sagemaker}.__getitem__
        assert main(["mark-released", *uris.values()], clients=by_service) == 0
        # The newer release runs on both endpoints; the older one on none any more.
        listed(stubber, "cpu", "async")
        described(stubber, "cpu", "InService", [uris[new]])
        described(stubber, "async", "InService", [uris[new]])
        assert main(["prune-released", repository["repositoryUri"]], clients=by_service) == 0
        tags = {
            detail["imageDigest"]: sorted(detail.get("imageTags", []))
            for detail in ecr.describe_images(repositoryName="decision-models")["imageDetails"]
        }
    assert tags[new] == sorted(["dockerfile-2", RELEASED_TAG_PREFIX + new.removeprefix("sha256:")])
    assert tags[old] == ["dockerfile-1"]  # the lifecycle rules' to expire now
    err = capsys.readouterr().err
    assert f"unmarked {RELEASED_TAG_PREFIX}{old.removeprefix('sha256:')}" in err


def test_prune_released_changes_nothing_while_an_endpoint_is_updating(capsys):
    with stubbed_client("sagemaker", REGION) as (sagemaker, stubber):
        listed(stubber, "cpu")
        described(stubber, "cpu", "Updating", [])
        uri = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-models"
        assert main(["prune-released", uri], clients={"sagemaker": sagemaker}.__getitem__) == 1
    assert "endpoints changing: cpu (Updating)" in capsys.readouterr().err
