"""The StatefulStack alone (no app around it), built from the config's default values."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from ops.released_images import released_tag
from stacks.config import (
    DEFAULT_DLC_CPU_DIGEST,
    DEFAULT_DLC_CUDA_DIGEST,
    Builds,
    DecisionGpuEndpoint,
    DlcImages,
)
from stacks.stateful_stack import StatefulStack
from tests.support.cdk_templates import (
    ROOT,
    STATEFUL,
    cdk_json_context,
    grants,
    one,
    policy_statements,
    resources,
    synthesize,
    template,
    text,
)


def bare(**overrides) -> Template:
    props = {
        "repository_root": ROOT,
        "builds": Builds(),
        "dlc": DlcImages(),
        "cuda_architectures": DecisionGpuEndpoint().cuda_architectures,
        "retain_artifacts": True,
        "image_repository_name": None,
    }
    app = cdk.App(context=cdk_json_context())
    return Template.from_stack(StatefulStack(app, STATEFUL, **{**props, **overrides}))


@pytest.fixture(scope="module")
def stateful() -> Template:
    return bare()


def test_stateful_stack_resource_counts(stateful):
    for resource_type, count in {
        "AWS::S3::Bucket": 2,  # artifacts and their access logs
        "AWS::S3::BucketPolicy": 2,
        "AWS::ECR::Repository": 1,
        "AWS::CodeBuild::Project": 3,
        "AWS::Logs::LogGroup": 3,
        "AWS::IAM::Role": 3,
        "AWS::IAM::Policy": 3,
        "AWS::SageMaker::Endpoint": 0,
        "AWS::Lambda::Function": 0,
    }.items():
        stateful.resource_count_is(resource_type, count)


def test_build_projects_take_the_configured_timeout_and_log_retention(stateful):
    """The GPU image's compile has a margin over its 3-hour worst case; the others take minutes."""
    timeouts = {
        "model": project(stateful, "model_packaging/buildspec.yml")[1]["TimeoutInMinutes"],
        "cpu": project(stateful, "container/buildspec.yml", "container/Dockerfile")[1][
            "TimeoutInMinutes"
        ],
        "gpu": project(stateful, "container/buildspec.yml", "container/Dockerfile.gpu")[1][
            "TimeoutInMinutes"
        ],
    }
    assert timeouts == {"model": 60, "cpu": 60, "gpu": 240}
    assert timeouts["gpu"] > 180  # docs/deploy.md's worst case for the CUDA build
    given = bare(builds=Builds(timeoutMinutes=90, gpuImageTimeoutMinutes=300))
    assert sorted(
        p["Properties"]["TimeoutInMinutes"]
        for p in resources(given, "AWS::CodeBuild::Project").values()
    ) == [90, 90, 300]
    for group in resources(stateful, "AWS::Logs::LogGroup").values():
        assert group["Properties"]["RetentionInDays"] == 30


def test_image_repository_is_immutable_scanned_pruned_and_retained(stateful):
    _, repository = one(stateful, "AWS::ECR::Repository")
    props = repository["Properties"]
    assert props["ImageTagMutability"] == "IMMUTABLE"
    assert props["ImageScanningConfiguration"] == {"ScanOnPush": True}
    # AES256 is ECR's default encryption, which CloudFormation leaves implicit.
    assert props.get("EncryptionConfiguration", {"EncryptionType": "AES256"}) == {
        "EncryptionType": "AES256"
    }
    rules = json.loads(props["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    assert [r["selection"]["tagStatus"] for r in rules] == ["untagged", "tagged", "any"]
    assert rules[2]["selection"]["countType"] == "imageCountMoreThan"
    assert repository["DeletionPolicy"] == "Retain"
    assert props["EmptyOnDelete"] is False


def project(stateful: Template, buildspec: str, dockerfile: str | None = None) -> tuple[str, dict]:
    matches = [
        (logical_id, p["Properties"])
        for logical_id, p in resources(stateful, "AWS::CodeBuild::Project").items()
        if p["Properties"]["Source"]["BuildSpec"] == buildspec
        and (
            dockerfile is None
            or {"Name": "DOCKERFILE", "Type": "PLAINTEXT", "Value": dockerfile}
            in p["Properties"]["Environment"]["EnvironmentVariables"]
        )
    ]
    assert len(matches) == 1
    return matches[0]


def variables(props: dict) -> dict[str, str]:
    return {v["Name"]: text(v["Value"]) for v in props["Environment"]["EnvironmentVariables"]}


def test_model_build_project(stateful):
    _, props = project(stateful, "model_packaging/buildspec.yml")
    assert props["Environment"]["PrivilegedMode"] is False
    assert props["Environment"]["ComputeType"] == "BUILD_GENERAL1_MEDIUM"
    env = variables(props)
    assert env == {
        "ARTIFACT_BUCKET": env["ARTIFACT_BUCKET"],
        "ARTIFACT_PREFIX": "models",
        "MODEL_SPEC": "qwen3.5-4b-q4_k_m",
    }
    assert re.fullmatch(r"<ArtifactsBucket[0-9A-F]{8}>", env["ARTIFACT_BUCKET"])


@pytest.mark.parametrize(
    "dockerfile, digest, build_args",
    [
        ("container/Dockerfile", DEFAULT_DLC_CPU_DIGEST, {}),
        # The CUDA kernels are compiled for the default pool's GPUs: T4, A10G, L4 and L40S.
        ("container/Dockerfile.gpu", DEFAULT_DLC_CUDA_DIGEST, {"CUDA_ARCHITECTURES": "75;86;89"}),
    ],
)
def test_image_build_projects_build_from_the_dlc_pinned_by_digest(
    stateful, dockerfile, digest, build_args
):
    _, props = project(stateful, "container/buildspec.yml", dockerfile)
    assert props["Environment"]["PrivilegedMode"] is True  # docker build
    assert props["Environment"]["ComputeType"] == "BUILD_GENERAL1_LARGE"
    assert variables(props) == {
        "IMAGE_REPO_URI": variables(props)["IMAGE_REPO_URI"],
        "DOCKERFILE": dockerfile,
        "BASE_IMAGE": (
            f"<DlcRepositoryAccountMap>.dkr.ecr.<AWS::Region>.<AWS::URLSuffix>/llama-cpp@{digest}"
        ),
        **build_args,
        # IMAGE_TAG stays unset: with immutable tags a fixed one would fail the second build.
    }
    assert re.fullmatch(
        r"<(Images[0-9A-F]{8})\.Arn>\[4\]\.dkr\.ecr\.<\1\.Arn>\[3\]\.<AWS::URLSuffix>/<\1>",
        variables(props)["IMAGE_REPO_URI"],
    )


def test_the_gpu_image_build_compiles_for_the_configured_architectures(tmp_path):
    """builds.cudaArchitectures, not the pool of the moment: a pool narrowed to one type to
    measure it leaves the image for every type of the default pool."""
    measuring = {"instancePool": ["ml.g6e.xlarge"]}
    for name, context, expected in (
        ("default", {"decisionGpuEndpoint": measuring}, "75;86;89"),
        ("h100", {"builds": {"cudaArchitectures": "89;90"}}, "89;90"),
    ):
        assembly = synthesize(tmp_path / name, **context)
        _, props = project(
            template(assembly, STATEFUL), "container/buildspec.yml", "container/Dockerfile.gpu"
        )
        assert variables(props)["CUDA_ARCHITECTURES"] == expected


def test_the_dlc_account_mapping_covers_the_regions(stateful):
    accounts = stateful.to_json()["Mappings"]["DlcRepositoryAccountMap"]
    assert accounts["us-east-1"] == accounts["eu-west-1"] == {"account": "763104351884"}
    assert accounts["ap-northeast-3"] == {"account": "364406365360"}
    assert accounts["me-west-1"] == {"account": "124382933778"}
    assert len(accounts) == 37


def role_prefix_of(stateful: Template, buildspec: str, dockerfile: str | None = None) -> str:
    _, props = project(stateful, buildspec, dockerfile)
    return props["ServiceRole"]["Fn::GetAtt"][0]


def test_model_build_may_write_only_under_the_model_prefix(stateful):
    role = role_prefix_of(stateful, "model_packaging/buildspec.yml")
    granted = grants(stateful, role)
    bucket = next(
        k
        for k, b in resources(stateful, "AWS::S3::Bucket").items()
        if "VersioningConfiguration" in b["Properties"]
    )
    # Presence is checked by listing the key (model_packaging/upload.py), never by reading it.
    assert granted[("s3:AbortMultipartUpload", "s3:PutObject")] == [f"<{bucket}.Arn>/models/*"]
    assert granted[("s3:ListBucket",)] == [f"<{bucket}.Arn>"]
    listing = next(s for s in policy_statements(stateful, role) if s["Action"] == "s3:ListBucket")
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["models/*"]}}
    assert not any(a.startswith("ecr:") for actions in granted for a in actions)
    assert not any("s3:Delete" in a or a == "s3:*" for actions in granted for a in actions)


@pytest.mark.parametrize("dockerfile", ["container/Dockerfile", "container/Dockerfile.gpu"])
def test_image_builds_push_to_the_repository_and_pull_only_the_dlc(stateful, dockerfile):
    role = role_prefix_of(stateful, "container/buildspec.yml", dockerfile)
    granted = grants(stateful, role)
    repository = next(iter(resources(stateful, "AWS::ECR::Repository")))
    push = next(resources for actions, resources in granted.items() if "ecr:PutImage" in actions)
    assert push == [f"<{repository}.Arn>"]
    # The buildspec reads the pushed digest back with `aws ecr describe-images`.
    described = [r for actions, r in granted.items() if "ecr:DescribeImages" in actions]
    assert described == [[f"<{repository}.Arn>"]]
    pull = granted[
        ("ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")
    ]
    assert pull == [
        "arn:<AWS::Partition>:ecr:<AWS::Region>:<DlcRepositoryAccountMap>:repository/llama-cpp"
    ]
    assert granted[("ecr:GetAuthorizationToken",)] == ["*"]
    assert not any(a.startswith("s3:Put") for actions in granted for a in actions)


def test_stateful_outputs_name_what_the_operator_cli_needs(stateful):
    outputs = stateful.to_json()["Outputs"]
    assert set(outputs) == {
        "ArtifactBucketName",
        "ModelArtifactsUri",
        "ImageRepositoryUri",
        "ModelBuildProject",
        "CpuImageBuildProject",
        "GpuImageBuildProject",
    }
    assert text(outputs["ModelArtifactsUri"]["Value"]).endswith("/models/")


def test_an_unretained_image_repository_is_emptied_and_deleted_on_destroy():
    _, repository = one(bare(retain_artifacts=False), "AWS::ECR::Repository")
    assert repository["DeletionPolicy"] == "Delete"
    assert repository["Properties"]["EmptyOnDelete"] is True


def expired_by_lifecycle(rules: list[dict], images: list[dict]) -> set[str]:
    """ECR's evaluation of a lifecycle policy, as its documentation states it, for the count
    rules: rules apply by priority; an image that a rule's tag selection matches is never
    expired by a rule of lower priority; a count rule expires the oldest matches beyond its
    count. `images`: {"digest", "tags", "pushed"}."""
    expired, claimed = set(), set()
    for rule in sorted(rules, key=lambda r: r["rulePriority"]):
        selection = rule["selection"]
        status, prefixes = selection["tagStatus"], selection.get("tagPrefixList", [])

        def selects(image, status=status, prefixes=prefixes) -> bool:
            if status == "untagged":
                return not image["tags"]
            if status == "tagged":
                return any(t.startswith(p) for t in image["tags"] for p in prefixes)
            return True

        matched = [i for i in images if i["digest"] not in claimed and selects(i)]
        if selection["countType"] == "imageCountMoreThan":
            newest_first = sorted(matched, key=lambda i: -i["pushed"])
            expired |= {i["digest"] for i in newest_first[selection["countNumber"] :]}
        claimed |= {i["digest"] for i in matched}
    return expired


def test_a_released_image_outlives_any_number_of_later_builds(stateful):
    """The image a deployed release names must stay pullable: SageMaker pulls it again to
    replace or add an instance. `ops mark-released` tags it; the lifecycle rules keep it."""
    _, repository = one(stateful, "AWS::ECR::Repository")
    rules = json.loads(repository["Properties"]["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    released = {"digest": "d0", "tags": ["dockerfile-1", released_tag("d0")], "pushed": 0}
    later = [{"digest": f"d{n}", "tags": [f"dockerfile-{n}"], "pushed": n} for n in range(1, 80)]
    expired = expired_by_lifecycle(rules, [released, *later])
    assert "d0" not in expired
    # The other images are still pruned to the newest 50.
    assert expired == {f"d{n}" for n in range(1, 30)}
    # Without the tag the same image would go first.
    assert "d0" in expired_by_lifecycle(rules, [{**released, "tags": ["dockerfile-1"]}, *later])


@pytest.mark.parametrize("retain", [True, False])
def test_retained_buckets_keep_their_policies(tmp_path, retain):
    """`cdk destroy` deletes what is not retained: a bucket kept without its policy would
    accept plain HTTP and lose its log-delivery grant."""
    from tests.support.cdk_templates import STATEFUL, resources, synthesize, template

    stateful = template(synthesize(tmp_path, retainArtifacts=retain), STATEFUL)
    buckets = resources(stateful, "AWS::S3::Bucket")
    policies = resources(stateful, "AWS::S3::BucketPolicy")
    assert len(buckets) == len(policies) == 2
    expected = "Retain" if retain else "Delete"
    for policy in policies.values():
        assert policy.get("DeletionPolicy", "Delete") == expected
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
                   for s in statements)  # fmt: skip


def test_the_endpoints_work_objects_expire_and_the_model_archives_do_not(tmp_path):
    """Asynchronous requests, answers and failures and batch files are written under prefixes
    of the artifact bucket; they expire after workRetentionDays, the archives never."""
    assembly = synthesize(tmp_path, workRetentionDays=14)
    _, bucket = one(
        template(assembly, STATEFUL), "AWS::S3::Bucket", {"VersioningConfiguration": {}}
    )
    rules = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    expiring = {rule["Prefix"]: rule["ExpirationInDays"] for rule in rules if "Prefix" in rule}
    assert expiring == {
        "async/failure/": 14,
        "async/input/": 14,
        "async/output/": 14,
        "batch/": 14,
    }
    assert all("ExpirationInDays" not in rule for rule in rules if "Prefix" not in rule)
