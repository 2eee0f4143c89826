"""Deploy rehearsal against a moto server, with the pinned CDK CLI as an operator runs it:
bootstrap, deploy the stateful stack, run the builds against what it created, deploy the
endpoints with what the builds produced, `ops status`, destroy, and check what is left.

Where moto 5.2.5 differs from AWS, the rehearsal adapts and says so (README, "Rehearsed
offline"): `--method=direct` (moto's change-set execution drops stack outputs), an explicit
image repository name (moto rejects the generated one), c5 instance types (moto's SageMaker
knows no c6i), no GPU endpoint (moto's SageMaker has no InstancePools), endpoints found by the
stack outputs (moto ignores EndpointName). moto's CloudFormation skips some resource types; the
test pins that list so a change in either direction is noticed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import boto3
import pytest

from tests.cdk_templates import first_deployment_capacity
from tests.codebuild_rehearsal import (
    ACCOUNT,
    REGION,
    Resolver,
    aws_environment,
    docker_standin_bin,
    moto_server,
    project_environment,
    run_build,
)
from tests.codebuild_view import build_projects, staged_source

pytestmark = [pytest.mark.rehearsal, pytest.mark.timeout(480)]

ROOT = Path(__file__).resolve().parents[1]
CDK = ROOT / "node_modules/.bin/cdk"
STATEFUL, ENDPOINTS = "DecisionModels-Stateful", "DecisionModels-Endpoints"
REPOSITORY = "decision-models"
# What this rehearsal changes in cdk.json's configuration, each for a reason in the docstring.
REHEARSAL_CONTEXT = {
    "imageRepositoryName": REPOSITORY,
    "builds": {"modelSpec": "gemma3-270m"},
    "textGenerationEndpoint": {"instanceType": "ml.c5.2xlarge"},
    # No measurement of the small model on it (stacks/measurements/): a first deployment's
    # values, as README's "First deployment" gives them.
    "decisionCpuEndpoint": {"instanceType": "ml.c5.2xlarge", **first_deployment_capacity()},
    "decisionGpuEndpoint": {"enabled": False},
}
# Resource types moto's CloudFormation does not implement: created by AWS, skipped by moto.
SKIPPED_BY_MOTO = {
    "AWS::CDK::Metadata",
    "AWS::S3::BucketPolicy",
    "AWS::CodeBuild::Project",
    "AWS::ApplicationAutoScaling::ScalableTarget",
    "AWS::ApplicationAutoScaling::ScalingPolicy",
    "AWS::CloudWatch::Alarm",
}


def jsii_package_cache() -> str:
    """Where jsii keeps this user's unpacked packages: the variable, else its default root."""
    if root := os.environ.get("JSII_RUNTIME_PACKAGE_CACHE_ROOT"):
        return root
    if sys.platform == "darwin":
        return str(Path.home() / "Library/Caches/com.amazonaws.jsii/package-cache")
    return str(Path.home() / ".cache/aws/jsii/package-cache")


class Cdk:
    """The pinned CDK CLI against the moto endpoint, each call with the rehearsal's context."""

    def __init__(self, aws: dict[str, str], outdir: Path) -> None:
        self.outdir = outdir
        self.env = {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(outdir),
            # jsii's unpacked packages stay where the user's are: under the HOME above, the
            # first synthesis would unpack aws-cdk-lib again (about 10 CPU-seconds).
            "JSII_RUNTIME_PACKAGE_CACHE_ROOT": jsii_package_cache(),
            "CDK_DISABLE_CLI_TELEMETRY": "true",
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
            # CDK's built-in template validation costs each synthesis about 11 CPU-seconds (its
            # engine loads in every new process) and changes nothing deployed; test_cdk_app
            # runs it on the whole app and asserts it finds nothing.
            "CDK_VALIDATION": "false",
            **aws,
        }

    def __call__(self, *arguments: str, context: dict | None = None, cwd: Path = ROOT) -> str:
        flags = []
        for key, value in (context or {}).items():
            flags += ["-c", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
        result = subprocess.run(
            [str(CDK), *arguments, "--no-notices", "-o", str(self.outdir), *flags],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"cdk {arguments[0]}:\n{result.stderr[-4000:]}"
        return result.stdout + result.stderr


def physical_ids(cloudformation, stack: str) -> dict[str, str]:
    resources = cloudformation.list_stack_resources(StackName=stack)["StackResourceSummaries"]
    return {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in resources
        if r.get("LogicalResourceId")
    }


def deploy(cdk: Cdk, outputs: Path, context: dict) -> dict:
    cdk(
        "deploy",
        "--all",
        "--require-approval",
        "never",
        "--method=direct",
        "--outputs-file",
        str(outputs),
        context=context,
    )
    return json.loads(outputs.read_text())


def inventory(client) -> dict[str, set[str]]:
    """What exists in the account, by kind, as an operator would list it."""
    sagemaker, iam = client("sagemaker"), client("iam")
    return {
        "buckets": {b["Name"] for b in client("s3").list_buckets()["Buckets"]},
        "repositories": {
            r["repositoryName"] for r in client("ecr").describe_repositories()["repositories"]
        },
        "log groups": {
            g["logGroupName"] for g in client("logs").describe_log_groups()["logGroups"]
        },
        "roles": {r["RoleName"] for r in iam.list_roles()["Roles"]},
        "endpoints": {e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]},
        "endpoint configs": {
            c["EndpointConfigName"] for c in sagemaker.list_endpoint_configs()["EndpointConfigs"]
        },
        "models": {m["ModelName"] for m in sagemaker.list_models()["Models"]},
    }


def test_bootstrap_deploy_build_release_status_and_destroy(tmp_path):
    assert CDK.exists(), "the pinned CDK CLI is missing: run `npm ci` (make test does)"
    with warnings.catch_warnings(record=True) as caught, moto_server() as endpoint:
        warnings.simplefilter("always")
        aws = aws_environment(endpoint)
        session = boto3.Session(
            region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
        )

        def client(service: str):
            return session.client(service, endpoint_url=endpoint)

        cloudformation = client("cloudformation")
        cdk = Cdk(aws, tmp_path / "cdk.out")

        # Bootstrap from outside the app directory: the environment is explicit, nothing to synth.
        assert "bootstrapped" in cdk("bootstrap", f"aws://{ACCOUNT}/{REGION}", cwd=tmp_path)
        before = inventory(client)

        # 1. The stateful stack (no model yet: the app holds only this stack).
        stateful = deploy(cdk, tmp_path / "stateful.json", REHEARSAL_CONTEXT)[STATEFUL]
        assert stateful["ImageRepositoryUri"] == (
            f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/{REPOSITORY}"
        )
        assert stateful["ModelArtifactsUri"] == f"s3://{stateful['ArtifactBucketName']}/models/"

        # 2. The builds, as CodeBuild would run them on the deployed resources (moto's
        # CloudFormation creates no CodeBuild project and moto's CodeBuild runs no buildspec).
        template = json.loads((cdk.outdir / f"{STATEFUL}.template.json").read_text())
        ids = physical_ids(cloudformation, STATEFUL)
        (repository_id,) = [
            logical_id
            for logical_id, r in template["Resources"].items()
            if r["Type"] == "AWS::ECR::Repository"
        ]
        repository_arn = client("ecr").describe_repositories(repositoryNames=[ids[repository_id]])[
            "repositories"
        ][0]["repositoryArn"]
        resolve = Resolver(template, ids, {(repository_id, "Arn"): repository_arn})
        produced = {}
        for project in build_projects(cdk.outdir, STATEFUL):
            if project.environment.get("DOCKERFILE") == "container/Dockerfile.gpu":
                continue  # no GPU endpoint in moto; the GPU build is rehearsed elsewhere
            source = Path(
                shutil.copytree(
                    staged_source(cdk.outdir, STATEFUL, project), tmp_path / project.logical_id
                )
            )
            result = run_build(
                project.buildspec,
                source=source,
                project_variables=project_environment(template, project.logical_id, resolve),
                extra_environment={**aws, "DOCKER_STANDIN_LOG": str(tmp_path / "docker.jsonl")},
                path_prefix=[docker_standin_bin(tmp_path / "bin")],
            )
            assert result.returncode == 0, result.output[-4000:]
            produced.update(result.exported)
        assert produced["MODEL_URI"].startswith(stateful["ModelArtifactsUri"])
        assert produced["IMAGE_URI"].startswith(stateful["ImageRepositoryUri"] + "@sha256:")

        # 3. The release: endpoints on what the builds produced.
        release = {
            **REHEARSAL_CONTEXT,
            "modelDataUri": produced["MODEL_URI"],
            "decisionCpuImage": produced["IMAGE_URI"],
        }
        outputs = deploy(cdk, tmp_path / "release.json", release)[ENDPOINTS]
        sagemaker = client("sagemaker")
        cpu_endpoint = outputs["DecisionCpuEndpointName"]
        config = sagemaker.describe_endpoint(EndpointName=cpu_endpoint)["EndpointConfigName"]
        variant = sagemaker.describe_endpoint_config(EndpointConfigName=config)[
            "ProductionVariants"
        ][0]
        container = sagemaker.describe_model(ModelName=variant["ModelName"])["PrimaryContainer"]
        assert container["Image"] == produced["IMAGE_URI"]
        assert container["ModelDataUrl"] == produced["MODEL_URI"]

        status = subprocess.run(
            [sys.executable, "-m", "ops", "status", "--endpoint", cpu_endpoint],
            cwd=ROOT,
            env={**cdk.env, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        assert f"endpoint {cpu_endpoint}: InService" in status.stdout
        assert "on ml.c5.2xlarge" in status.stdout

        # Destroy has something to remove: roles, log groups and the release's SageMaker side.
        deployed = {kind: names - before[kind] for kind, names in inventory(client).items()}
        assert deployed["endpoints"] == set(outputs.values())
        assert len(deployed["models"]) == len(deployed["endpoint configs"]) == 2
        assert deployed["roles"] and deployed["log groups"]

        # 4. Destroy: what is left is what the templates retain, and bootstrap's resources.
        retained = {
            ids[logical_id]
            for logical_id, resource in template["Resources"].items()
            if resource.get("DeletionPolicy") == "Retain" and logical_id in ids
        }
        cdk("destroy", "--all", "--force", context=release)
        left = inventory(client)
        stacks = {
            s["StackName"]: s["StackStatus"]
            for s in cloudformation.list_stacks()["StackSummaries"]
            if s["StackName"] != "CDKToolkit"
        }
        assert stacks == {STATEFUL: "DELETE_COMPLETE", ENDPOINTS: "DELETE_COMPLETE"}
        new = {kind: names - before[kind] for kind, names in left.items()}
        assert {name for names in new.values() for name in names} == retained
        assert stateful["ArtifactBucketName"] in new["buckets"]
        assert new["repositories"] == {REPOSITORY}

    skipped = {
        str(w.message).split(" but ")[0].removeprefix("Tried to parse ")
        for w in caught
        if "not supported by moto's CloudFormation" in str(w.message)
    }
    assert skipped == SKIPPED_BY_MOTO
