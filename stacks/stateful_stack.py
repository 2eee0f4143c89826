"""What outlives a release: the artifact bucket, the image repository, the builds filling them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from aws_cdk import CfnOutput, Duration, RemovalPolicy, Stack, Tags
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.config import Builds, DlcImages
from stacks.constructs.artifact_store import ArtifactStore
from stacks.constructs.artifacts import ContainerImage
from stacks.constructs.build_project import BuildProject, BuildSource
from stacks.log_retention import RETENTION

# Images tagged so by `python -m ops mark-released` (ops/released_images.py), each release's;
# the lifecycle rule that selects them counts far more than a repository ever holds.
RELEASED_TAG_PREFIX = "released-"
RELEASED_IMAGES_KEPT = 10_000
# Every resource of the stack carries this tag, the stack's name its value: policies outside the
# stack (the CI role's, .github/ci-role-policy.json) select its repository and build projects by
# it. CloudFormation's own `aws:cloudformation:stack-name` is not on ECR repositories.
STACK_TAG = "decision-models:stack"


class _BuildCommon(TypedDict):
    """What every build project of the stack is created with (BuildProject's arguments)."""

    source: BuildSource
    log_retention: logs.RetentionDays


class StatefulStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        repository_root: Path,
        builds: Builds,
        dlc: DlcImages,
        cuda_architectures: str,
        retain_artifacts: bool,
        image_repository_name: str | None,
        work_prefixes: Sequence[str] = (),
        work_retention_days: int = 30,
        **kwargs: Any,
    ) -> None:
        """`cuda_architectures`: what the GPU image compiles for (`builds.cudaArchitectures`)."""
        super().__init__(scope, construct_id, **kwargs)
        Tags.of(self).add(STACK_TAG, self.stack_name)
        removal = RemovalPolicy.RETAIN if retain_artifacts else RemovalPolicy.DESTROY

        artifacts = ArtifactStore(
            self,
            "Artifacts",
            model_prefix=builds.artifact_prefix,
            retain=retain_artifacts,
            work_prefixes=work_prefixes,
            work_retention=Duration.days(work_retention_days),
        )
        repository = ecr.Repository(
            self,
            "Images",
            repository_name=image_repository_name,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            image_scan_on_push=True,
            encryption=ecr.RepositoryEncryption.AES_256,
            lifecycle_rules=[
                ecr.LifecycleRule(
                    description="Drop untagged layers left by failed or superseded pushes",
                    tag_status=ecr.TagStatus.UNTAGGED,
                    max_image_age=Duration.days(14),
                ),
                # An image a rule's tags select is never expired by a later rule: every image
                # a release deploys (`ops mark-released` tags it) stays, whatever the count.
                ecr.LifecycleRule(
                    description="Keep every released image (tag released-<digest>)",
                    tag_status=ecr.TagStatus.TAGGED,
                    tag_prefix_list=[RELEASED_TAG_PREFIX],
                    max_image_count=RELEASED_IMAGES_KEPT,
                ),
                ecr.LifecycleRule(
                    description="Keep the newest 50 other images; endpoints pin theirs by digest",
                    tag_status=ecr.TagStatus.ANY,
                    max_image_count=50,
                ),
            ],
            removal_policy=removal,
            empty_on_delete=not retain_artifacts,
        )

        source = BuildSource(self, "BuildSource", repository_root=repository_root)
        common: _BuildCommon = {
            "source": source,
            "log_retention": RETENTION[builds.log_retention_days],
        }
        model_build = BuildProject(
            self,
            "ModelBuild",
            description="Packages the pinned model into model.tar.gz and uploads it",
            buildspec="model_packaging/buildspec.yml",
            environment_variables={
                "ARTIFACT_BUCKET": artifacts.bucket.bucket_name,
                "ARTIFACT_PREFIX": artifacts.model_prefix,
                "MODEL_SPEC": builds.model_spec,
            },
            timeout=Duration.minutes(builds.timeout_minutes),
            **common,
        )
        artifacts.grant_publish_models(model_build.project)

        image_builds = {}
        # The CUDA image is compiled for the GPUs of the configured pool and nothing else.
        gpu_build_args = {"CUDA_ARCHITECTURES": cuda_architectures}
        for flavour, dockerfile, digest, build_args, minutes in (
            ("Cpu", "container/Dockerfile", dlc.cpu_digest, {}, builds.timeout_minutes),
            (
                "Gpu",
                "container/Dockerfile.gpu",
                dlc.cuda_digest,
                gpu_build_args,
                builds.gpu_image_timeout_minutes,
            ),
        ):
            base_image = ContainerImage.from_dlc(
                self, repository_name=dlc.repository, digest=digest
            )
            build = BuildProject(
                self,
                f"{flavour}ImageBuild",
                description=f"Builds the {flavour.upper()} decision image FROM the llama.cpp DLC",
                buildspec="container/buildspec.yml",
                environment_variables={
                    "IMAGE_REPO_URI": repository.repository_uri,
                    "DOCKERFILE": dockerfile,
                    "BASE_IMAGE": base_image.image_uri,
                    **build_args,
                    # No IMAGE_TAG: tags are immutable, so the buildspec derives a fresh one per
                    # build unless `ops build --env IMAGE_TAG=...` names it.
                },
                docker=True,
                compute_type=codebuild.ComputeType.LARGE,
                timeout=Duration.minutes(minutes),
                **common,
            )
            repository.grant_pull_push(build.project)
            # The buildspec reads the pushed image's digest back (`aws ecr describe-images`);
            # pull/push grants do not include it.
            repository.grant(build.project, "ecr:DescribeImages")
            base_image.grant_pull(build.project)
            image_builds[flavour] = build

        for name, value in {
            "ArtifactBucketName": artifacts.bucket.bucket_name,
            "ModelArtifactsUri": artifacts.models_uri,
            "ImageRepositoryUri": repository.repository_uri,
            "ModelBuildProject": model_build.project.project_name,
            "CpuImageBuildProject": image_builds["Cpu"].project.project_name,
            "GpuImageBuildProject": image_builds["Gpu"].project.project_name,
        }.items():
            CfnOutput(self, name, value=value)
