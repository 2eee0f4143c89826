"""The whole CDK app, synthesized offline: both stacks, cdk-nag, cfn-lint and app.py itself.

Synthesis is slow (jsii), so each configuration is synthesized once per module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from stacks.app import compose
from stacks.config import DEFAULT_DLC_CPU_DIGEST, DEFAULT_DLC_CUDA_DIGEST, AppConfig

ROOT = Path(__file__).resolve().parents[1]
CPU_IMAGE = f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-models@sha256:{'ab' * 32}"
GPU_IMAGE = f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-models@sha256:{'cd' * 32}"
MODEL = "s3://artifacts-bucket/models/3f2a/model.tar.gz"
RELEASE = {"modelDataUri": MODEL, "decisionCpuImage": CPU_IMAGE, "decisionGpuImage": GPU_IMAGE}
STATEFUL, ENDPOINTS = "DecisionModels-Stateful", "DecisionModels-Endpoints"
# Node 20 runs jsii fine; its end-of-life banner only clutters failure output.
ENV = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}


def cdk_json_context() -> dict:
    return json.loads((ROOT / "cdk.json").read_text())["context"]


def synthesize(outdir: Path, **overrides) -> Path:
    """What `cdk synth` does with cdk.json plus `-c` overrides, in this process."""
    context = {**cdk_json_context(), **overrides}
    app = cdk.App(outdir=str(outdir), context=context)
    compose(app, config=AppConfig.from_context(context), repository_root=ROOT)
    app.synth()
    return outdir


def template(assembly: Path, stack: str) -> Template:
    return Template.from_json(json.loads((assembly / f"{stack}.template.json").read_text()))


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """The default configuration with a complete release: all three endpoints."""
    return synthesize(tmp_path_factory.mktemp("release"), **RELEASE)


@pytest.fixture(scope="module")
def disposable(tmp_path_factory) -> Path:
    """Artifacts not retained; only the CPU decision endpoint switched on."""
    return synthesize(
        tmp_path_factory.mktemp("disposable"),
        retainArtifacts=False,
        modelDataUri=MODEL,
        decisionCpuImage=CPU_IMAGE,
        textGenerationEndpoint={"enabled": False},
        decisionGpuEndpoint={"enabled": False},
    )


@pytest.fixture(scope="module")
def stateful(release) -> Template:
    return template(release, STATEFUL)


@pytest.fixture(scope="module")
def endpoints(release) -> Template:
    return template(release, ENDPOINTS)


def resources(template: Template, resource_type: str) -> dict[str, dict]:
    return template.find_resources(resource_type)


def one(template: Template, resource_type: str, props: dict | None = None) -> tuple[str, dict]:
    found = template.find_resources(resource_type, {"Properties": props} if props else None)
    assert len(found) == 1, found
    return next(iter(found.items()))


def text(value) -> str:
    """A CloudFormation value as text, intrinsics written <...>, for readable comparisons."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join(text(v) for v in value)
    ((intrinsic, argument),) = value.items()
    if intrinsic == "Fn::Join":
        return argument[0].join(text(part) for part in argument[1])
    if intrinsic == "Ref":
        return f"<{argument}>"
    if intrinsic == "Fn::GetAtt":
        return f"<{'.'.join(argument)}>"
    if intrinsic == "Fn::FindInMap":
        return f"<{argument[0]}>"
    if intrinsic == "Fn::Sub":
        return re.sub(r"\$\{([^}]+)\}", r"<\1>", argument)
    if intrinsic == "Fn::Select":
        index, (split,) = argument[0], argument[1].values()
        return f"{text(split[1])}[{index}]"
    raise AssertionError(value)


def policy_statements(template: Template, role_prefix: str) -> list[dict]:
    found = [
        policy["Properties"]["PolicyDocument"]["Statement"]
        for policy in resources(template, "AWS::IAM::Policy").values()
        if any(role["Ref"].startswith(role_prefix) for role in policy["Properties"]["Roles"])
    ]
    assert len(found) == 1, role_prefix
    return found[0]


def grants(template: Template, role_prefix: str) -> dict[tuple[str, ...], list[str]]:
    """{sorted actions: sorted resources as text} for one role's policy."""

    def listed(value):
        return value if isinstance(value, list) else [value]

    return {
        tuple(sorted(listed(s["Action"]))): sorted(text(r) for r in listed(s["Resource"]))
        for s in policy_statements(template, role_prefix)
    }


# --- the stateful stack ---------------------------------------------------------------------


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


def test_artifact_bucket_is_encrypted_private_versioned_logged_and_retained(stateful):
    logical_id, bucket = one(
        stateful, "AWS::S3::Bucket", {"VersioningConfiguration": Match.any_value()}
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
    assert resources(stateful, "AWS::S3::Bucket")[logs_bucket]["DeletionPolicy"] == "Retain"
    assert "BucketName" not in props


def test_every_bucket_refuses_plain_http(stateful):
    for policy in resources(stateful, "AWS::S3::BucketPolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        (deny,) = [s for s in statements if s["Effect"] == "Deny"]
        assert deny["Action"] == "s3:*"
        assert deny["Principal"] == {"AWS": "*"}
        assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


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
    assert [r["selection"]["tagStatus"] for r in rules] == ["untagged", "any"]
    assert rules[1]["selection"]["countType"] == "imageCountMoreThan"
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


def test_build_projects_run_the_repository_buildspecs_from_the_source_asset(stateful):
    for props in (p["Properties"] for p in resources(stateful, "AWS::CodeBuild::Project").values()):
        assert props["Environment"]["Image"] == "aws/codebuild/standard:7.0"
        assert props["Environment"]["Type"] == "LINUX_CONTAINER"
        assert props["Source"]["Type"] == "S3"
        assert re.fullmatch(
            r"cdk-[a-z0-9]+-assets-<AWS::AccountId>-<AWS::Region>/[0-9a-f]{64}\.zip",
            text(props["Source"]["Location"]),
        )
        assert props["Artifacts"] == {"Type": "NO_ARTIFACTS"}
        assert props["TimeoutInMinutes"] == 180
        assert props["LogsConfig"]["CloudWatchLogs"]["Status"] == "ENABLED"
        assert "Name" not in props


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


def test_the_gpu_image_build_follows_the_configured_pool(tmp_path):
    assembly = synthesize(
        tmp_path, decisionGpuEndpoint={"instancePool": ["ml.g6e.xlarge", "ml.p5.48xlarge"]}
    )
    _, props = project(
        template(assembly, STATEFUL), "container/buildspec.yml", "container/Dockerfile.gpu"
    )
    assert variables(props)["CUDA_ARCHITECTURES"] == "89;90"


def test_each_build_logs_to_its_own_log_group_kept_30_days(stateful):
    groups = resources(stateful, "AWS::Logs::LogGroup")
    for group in groups.values():
        assert group["Properties"]["RetentionInDays"] == 30
        assert group["DeletionPolicy"] == "Delete"
    used = {
        p["Properties"]["LogsConfig"]["CloudWatchLogs"]["GroupName"]["Ref"]
        for p in resources(stateful, "AWS::CodeBuild::Project").values()
    }
    assert used == set(groups)


def test_build_roles_are_assumable_by_codebuild_only(stateful):
    for role in resources(stateful, "AWS::IAM::Role").values():
        assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [
            {
                "Action": "sts:AssumeRole",
                "Effect": "Allow",
                "Principal": {"Service": "codebuild.amazonaws.com"},
            }
        ]
        assert "ManagedPolicyArns" not in role["Properties"]


def test_the_dlc_account_mapping_covers_the_regions(stateful):
    accounts = stateful.to_json()["Mappings"]["DlcRepositoryAccountMap"]
    assert accounts["us-east-1"] == accounts["eu-west-1"] == {"account": "763104351884"}
    assert accounts["ap-northeast-3"] == {"account": "364406365360"}
    assert len(accounts) == 36


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


def test_wildcard_resources_only_where_no_resource_level_permission_exists(stateful, endpoints):
    for template in (stateful, endpoints):
        for policy in resources(template, "AWS::IAM::Policy").values():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                if statement["Resource"] == "*" or "*" in statement.get("Resource", []):
                    assert statement["Action"] == "ecr:GetAuthorizationToken", statement
                actions = (
                    statement["Action"]
                    if isinstance(statement["Action"], list)
                    else [statement["Action"]]
                )
                assert all(a != "*" and not a.endswith(":*") for a in actions), statement


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


# --- the endpoint stack ---------------------------------------------------------------------


def test_endpoint_stack_resource_counts(endpoints):
    for resource_type, count in {
        "AWS::SageMaker::Model": 3,
        "AWS::SageMaker::EndpointConfig": 3,
        "AWS::SageMaker::Endpoint": 3,
        "AWS::ApplicationAutoScaling::ScalableTarget": 3,
        "AWS::ApplicationAutoScaling::ScalingPolicy": 3,
        "AWS::CloudWatch::Alarm": 6,
        "AWS::IAM::Role": 3,
        "AWS::IAM::Policy": 3,
    }.items():
        endpoints.resource_count_is(resource_type, count)


def test_the_endpoint_stack_stands_alone(endpoints):
    # No exports from the stateful stack: a release can be deployed, rolled or removed freely.
    assert "Fn::ImportValue" not in json.dumps(endpoints.to_json())


def model(endpoints: Template, endpoint_name: str) -> dict:
    _, endpoint = one(endpoints, "AWS::SageMaker::Endpoint", {"EndpointName": endpoint_name})
    config_id = endpoint["Properties"]["EndpointConfigName"]["Fn::GetAtt"][0]
    config = resources(endpoints, "AWS::SageMaker::EndpointConfig")[config_id]["Properties"]
    (variant,) = config["ProductionVariants"]
    return {
        "variant": variant,
        "model": resources(endpoints, "AWS::SageMaker::Model")[
            variant["ModelName"]["Fn::GetAtt"][0]
        ]["Properties"],
    }


def test_every_model_is_isolated_and_every_image_pinned_by_digest(endpoints):
    for props in (m["Properties"] for m in resources(endpoints, "AWS::SageMaker::Model").values()):
        assert props["EnableNetworkIsolation"] is True
        assert props["PrimaryContainer"]["ModelDataUrl"] == MODEL
        assert re.search(r"@sha256:[0-9a-f]{64}$", text(props["PrimaryContainer"]["Image"]))
        assert "ModelName" not in props


def test_text_generation_endpoint_runs_the_dlc_with_llama_cpp_settings(endpoints):
    built = model(endpoints, "decision-models-text-generation")
    container = built["model"]["PrimaryContainer"]
    assert text(container["Image"]) == (
        "<DlcRepositoryAccountMap>.dkr.ecr.<AWS::Region>.<AWS::URLSuffix>/llama-cpp@"
        + DEFAULT_DLC_CPU_DIGEST
    )
    assert container["Environment"] == {
        "SM_LLAMA_CPP_CTX_SIZE": "8192",
        "SM_LLAMA_CPP_THREADS": "8",
        "SM_LLAMA_CPP_PARALLEL": "2",
    }
    assert built["variant"]["InstanceType"] == "ml.c6i.2xlarge"
    assert "InferenceAmiVersion" not in built["variant"]


def test_decision_cpu_endpoint_runs_our_image_on_a_fixed_cpu_type(endpoints):
    built = model(endpoints, "decision-models-decision-cpu")
    assert built["model"]["PrimaryContainer"]["Image"] == CPU_IMAGE
    assert built["model"]["PrimaryContainer"]["Environment"] == {
        "DECISION_N_THREADS": "8",
        "DECISION_N_CTX": "4096",
        "DECISION_N_GPU_LAYERS": "0",
    }
    assert built["variant"]["InstanceType"] == "ml.c6i.2xlarge"
    assert "InstancePools" not in built["variant"]


def test_decision_gpu_endpoint_uses_the_ordered_pool_with_full_offload(endpoints):
    built = model(endpoints, "decision-models-decision-gpu")
    variant = built["variant"]
    assert built["model"]["PrimaryContainer"]["Image"] == GPU_IMAGE
    assert built["model"]["PrimaryContainer"]["Environment"]["DECISION_N_GPU_LAYERS"] == "-1"
    assert "InstanceType" not in variant
    assert variant["InstancePools"] == [
        {"InstanceType": "ml.g6e.xlarge", "Priority": 1},
        {"InstanceType": "ml.g6.2xlarge", "Priority": 2},
        {"InstanceType": "ml.g5.2xlarge", "Priority": 3},
        {"InstanceType": "ml.g4dn.2xlarge", "Priority": 4},
    ]
    assert variant["VariantInstanceProvisionTimeoutInSeconds"] == 900
    assert variant["InferenceAmiVersion"] == "al2023-ami-sagemaker-inference-gpu-4-1"
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}


def test_execution_roles_are_assumable_by_sagemaker_only(endpoints):
    for role in resources(endpoints, "AWS::IAM::Role").values():
        (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Service": "sagemaker.amazonaws.com"}
        assert "ManagedPolicyArns" not in role["Properties"]


def test_every_execution_role_reads_the_one_archive_and_pulls_its_own_image(endpoints):
    dlc = "arn:<AWS::Partition>:ecr:<AWS::Region>:<DlcRepositoryAccountMap>:repository/llama-cpp"
    ours = "arn:<AWS::Partition>:ecr:eu-west-1:123456789012:repository/decision-models"
    pull = ("ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")
    for prefix, repository in {
        "TextGeneration": dlc,
        "DecisionCpu": ours,
        "DecisionGpu": ours,
    }.items():
        granted = grants(endpoints, f"{prefix}ExecutionRole")
        assert granted[("s3:GetObject",)] == [
            "arn:<AWS::Partition>:s3:::artifacts-bucket/models/3f2a/model.tar.gz"
        ]
        assert granted[pull] == [repository]
        assert len(granted) == 4  # plus the ECR token and the endpoint's own log group


def test_default_scaling_and_alarm_settings(endpoints):
    for target in resources(endpoints, "AWS::ApplicationAutoScaling::ScalableTarget").values():
        assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (1, 2)
    for policy in resources(endpoints, "AWS::ApplicationAutoScaling::ScalingPolicy").values():
        tracking = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
        assert tracking["TargetValue"] == 60
        assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == (
            "SageMakerVariantInvocationsPerInstance"
        )
    thresholds = {
        (a["Properties"]["MetricName"], a["Properties"]["Threshold"])
        for a in resources(endpoints, "AWS::CloudWatch::Alarm").values()
    }
    assert thresholds == {("Invocation5XXErrors", 1), ("ModelLatency", 10_000_000)}


def test_every_endpoint_scales_and_alarms(endpoints):
    endpoint_ids = set(resources(endpoints, "AWS::SageMaker::Endpoint"))
    scaled = {
        t["Properties"]["ResourceId"]["Fn::Join"][1][1]["Fn::GetAtt"][0]
        for t in resources(endpoints, "AWS::ApplicationAutoScaling::ScalableTarget").values()
    }
    assert scaled == endpoint_ids
    alarmed: dict[str, set[str]] = {}
    for alarm in resources(endpoints, "AWS::CloudWatch::Alarm").values():
        dimensions = {d["Name"]: d["Value"] for d in alarm["Properties"]["Dimensions"]}
        alarmed.setdefault(dimensions["EndpointName"]["Fn::GetAtt"][0], set()).add(
            alarm["Properties"]["MetricName"]
        )
    assert alarmed == {e: {"Invocation5XXErrors", "ModelLatency"} for e in endpoint_ids}


def test_invoker_roles_get_invoke_on_every_endpoint():
    role = "arn:aws:iam::123456789012:role/decision-client"
    app = cdk.App(context=cdk_json_context())
    config = AppConfig.from_context({**cdk_json_context(), **RELEASE, "invokerRoleArns": [role]})
    _, endpoint_stack = compose(app, config=config, repository_root=ROOT)
    synthesized = Template.from_stack(endpoint_stack)
    _, policy = one(synthesized, "AWS::IAM::Policy", {"Roles": ["decision-client"]})
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == [
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithResponseStream",
    ]
    granted = sorted(resource["Ref"] for resource in statement["Resource"])
    assert granted == sorted(resources(synthesized, "AWS::SageMaker::Endpoint"))
    assert len(granted) == 3


# --- switches -------------------------------------------------------------------------------


def test_switched_off_endpoints_are_absent(disposable):
    endpoint_stack = template(disposable, ENDPOINTS)
    endpoint_stack.resource_count_is("AWS::SageMaker::Endpoint", 1)
    endpoint_stack.resource_count_is("AWS::CloudWatch::Alarm", 2)
    one(
        endpoint_stack, "AWS::SageMaker::Endpoint", {"EndpointName": "decision-models-decision-cpu"}
    )


def test_unretained_artifacts_are_emptied_and_deleted_on_destroy(disposable):
    stateful_stack = template(disposable, STATEFUL)
    for bucket in resources(stateful_stack, "AWS::S3::Bucket").values():
        assert bucket["DeletionPolicy"] == "Delete"
    stateful_stack.resource_count_is("Custom::S3AutoDeleteObjects", 2)
    _, repository = one(stateful_stack, "AWS::ECR::Repository")
    assert repository["DeletionPolicy"] == "Delete"
    assert repository["Properties"]["EmptyOnDelete"] is True


# --- compliance -----------------------------------------------------------------------------


@pytest.mark.parametrize("assembly", ["release", "disposable"])
def test_cdk_nag_finds_nothing_unacknowledged_and_every_acknowledgement_has_a_reason(
    assembly, request
):
    report = json.loads((request.getfixturevalue(assembly) / "validation-report.json").read_text())
    (nag,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success"
    for plugin in report["pluginReports"]:
        assert plugin["violations"] == [], plugin["violations"]
    acknowledged = nag["suppressedViolations"]
    assert acknowledged
    for finding in acknowledged:
        assert len(finding["reason"]) > 40, finding
    rules = {re.sub(r"\[.*", "", f["ruleName"]) for f in acknowledged}
    # Nothing about public access, TLS or encryption at rest is waved through.
    assert rules == {"AwsSolutions-IAM5", "AwsSolutions-CB4"}


def test_an_unacknowledged_cdk_nag_finding_stops_synthesis(tmp_path):
    from aws_cdk import aws_s3 as s3

    context = cdk_json_context()
    app = cdk.App(outdir=str(tmp_path), context=context)
    stateful, _ = compose(app, config=AppConfig.from_context(context), repository_root=ROOT)
    s3.Bucket(stateful, "Careless")  # no access logs, plain HTTP allowed: AwsSolutions-S1, S10
    with pytest.raises(Exception, match="ValidationFailed") as failed:
        app.synth()
    message = str(failed.value)
    assert "Acknowledge with 'AwsSolutions::AwsSolutions-S1'" in message
    assert "Acknowledge with 'AwsSolutions::AwsSolutions-S10'" in message
    named = set(re.findall(r"^\s+(\S+/\S+) aws-cdk-lib", message, re.MULTILINE))
    assert named == {f"{STATEFUL}/Careless/Resource"}, message  # the rest stays compliant
    report = json.loads((tmp_path / "validation-report.json").read_text())
    (nag,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "failure"


def cfn_lint(assembly: Path) -> dict[str, list[str]]:
    from cfnlint.api import lint

    return {
        path.name: [
            f"{m.rule.id} {m.message} ({m.linenumber})"
            for m in lint(path.read_text(), regions=["us-east-1", "eu-west-1", "eu-central-1"])
        ]
        for path in sorted(assembly.glob("*.template.json"))
    }


def test_cfn_lint_reports_nothing_on_the_templates(release):
    findings = cfn_lint(release)
    assert set(findings) == {f"{STATEFUL}.template.json", f"{ENDPOINTS}.template.json"}
    assert findings == {name: [] for name in findings}


def test_cfn_lint_reports_no_errors_on_the_disposable_templates(disposable):
    findings = [f for found in cfn_lint(disposable).values() for f in found]
    # CDK's own auto-delete provider carries a redundant DependsOn (a W3005 warning); ours do not.
    assert all(f.startswith("W3005 'CustomS3AutoDeleteObjects") for f in findings), findings


# --- app.py, as `cdk synth` runs it ---------------------------------------------------------


def run_app(tmp_path: Path, **overrides) -> subprocess.CompletedProcess:
    """Run app.py the way the CDK CLI does: context in CDK_CONTEXT_JSON, output in CDK_OUTDIR."""
    env = {
        **ENV,
        "CDK_CONTEXT_JSON": json.dumps({**cdk_json_context(), **overrides}),
        "CDK_OUTDIR": str(tmp_path),
    }
    for credential in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        env.pop(credential, None)
    return subprocess.run(
        [sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_app_synthesizes_offline_with_cdk_json_alone(tmp_path):
    result = run_app(tmp_path)
    assert result.returncode == 0, result.stderr
    # No build has run: the stateful stack only, ready for the first deploy.
    assert sorted(p.name for p in tmp_path.glob("*.template.json")) == [f"{STATEFUL}.template.json"]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["artifacts"][STATEFUL]["environment"] == "aws://unknown-account/unknown-region"


def test_app_refuses_an_invalid_config_with_a_clear_message(tmp_path):
    result = run_app(
        tmp_path, **{**RELEASE, "decisionCpuImage": CPU_IMAGE.split("@")[0] + ":latest"}
    )
    assert result.returncode != 0
    assert "Invalid configuration" in result.stderr
    assert "aws ecr describe-images" in result.stderr
    assert not list(tmp_path.glob("*.template.json"))


def test_the_pinned_cli_synthesizes_through_cdk_json(tmp_path):
    pinned = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    env = {**ENV, "CDK_DISABLE_CLI_TELEMETRY": "true"}
    # cdk.json runs `python3 app.py`: make that this interpreter.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    version = subprocess.run(
        [ROOT / "node_modules/.bin/cdk", "--version"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.startswith(pinned)
    result = subprocess.run(
        [
            ROOT / "node_modules/.bin/cdk",
            "synth",
            "--quiet",
            "--no-notices",
            "-o",
            str(tmp_path),
            "-c",
            f"modelDataUri={MODEL}",
            "-c",
            f"decisionCpuImage={CPU_IMAGE}",
            "-c",
            'decisionGpuEndpoint={"enabled": false}',
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.glob("*.template.json")) == [
        f"{ENDPOINTS}.template.json",
        f"{STATEFUL}.template.json",
    ]
    synthesized = template(tmp_path, ENDPOINTS)
    synthesized.resource_count_is("AWS::SageMaker::Endpoint", 2)
