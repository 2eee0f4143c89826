"""CodeBuild projects that run the repository's own buildspecs on an uploaded copy of its source."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from aws_cdk import ArnFormat, Duration, IgnoreMode, RemovalPolicy, Stack
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from stacks.constructs import nag

# What the builds read: the buildspecs, Dockerfiles, adapter and packaging code, and their pins.
# Everything else stays out, so that editing docs or tests does not change the build source.
DEFAULT_SOURCE_PATHS = ("container", "model_manifest", "model_packaging")
# Never part of a build, wherever they sit inside the paths above.
_NEVER = ("__pycache__/", "*.pyc", ".*")

# The CodeBuild image is pinned to a versioned curated image (Ubuntu 22.04, Docker 23),
# never a moving "latest".
BUILD_IMAGE = codebuild.LinuxBuildImage.STANDARD_7_0
DEFAULT_TIMEOUT = Duration.hours(2)


class BuildSource(Construct):
    """A zip of selected repository paths, uploaded as a CDK asset for the projects to build."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        repository_root: Path,
        paths: Sequence[str] = DEFAULT_SOURCE_PATHS,
    ) -> None:
        super().__init__(scope, construct_id)
        # .gitignore semantics: "/*" drops only the top level, so "!/container/" brings the
        # directory back with all it holds. (With CDK's default glob mode a bare "*" matches
        # every path at every depth, and the zip kept none of the files.)
        exclude = ["/*", *(f"!/{path.strip('/')}" for path in paths), *_NEVER]
        self.asset = s3_assets.Asset(
            self,
            "Asset",
            path=str(repository_root),
            exclude=exclude,
            ignore_mode=IgnoreMode.GIT,
        )


class BuildProject(Construct):
    """One CodeBuild project: pinned build image, buildspec from the source, its own log group."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        source: BuildSource,
        buildspec: str,
        description: str,
        environment_variables: Mapping[str, str],
        docker: bool = False,
        compute_type: codebuild.ComputeType = codebuild.ComputeType.MEDIUM,
        timeout: Duration = DEFAULT_TIMEOUT,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(
            self, "Logs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        asset = source.asset
        self.project = codebuild.Project(
            self,
            "Project",
            description=description,
            source=codebuild.Source.s3(bucket=asset.bucket, path=asset.s3_object_key),
            build_spec=codebuild.BuildSpec.from_source_filename(buildspec),
            environment=codebuild.BuildEnvironment(
                build_image=BUILD_IMAGE, compute_type=compute_type, privileged=docker
            ),
            environment_variables={
                name: codebuild.BuildEnvironmentVariable(value=value)
                for name, value in environment_variables.items()
            },
            timeout=timeout,
            logging=codebuild.LoggingOptions(
                cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=self.log_group)
            ),
        )
        self._acknowledge_findings()

    def _acknowledge_findings(self) -> None:
        project = self.project
        nag.acknowledge(
            project,
            "CB4",
            "The project stores no CodeBuild artifacts (NO_ARTIFACTS); what it produces goes to "
            "the encrypted artifact bucket or the ECR repository, so there is nothing for a "
            "customer-managed key to protect.",
        )
        role = project.role
        assert role is not None
        nag.acknowledge_wildcard_actions(
            role,
            ["s3:GetObject*", "s3:GetBucket*", "s3:List*"],
            "CDK's read grant on the one source zip in the bootstrap asset bucket: the wildcards "
            "are in read-only action families, the resources name the bucket and that object.",
        )
        # CodeBuild's own grants: its default log group and the report groups of this project.
        stack = Stack.of(self)
        nag.acknowledge_wildcard_resource(
            role,
            stack.format_arn(
                service="logs",
                resource="log-group",
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
                resource_name=f"/aws/codebuild/{project.project_name}:*",
            ),
            "CodeBuild's grant on the log streams of this project's default log group; stream "
            "names are generated per build.",
        )
        nag.acknowledge_wildcard_resource(
            role,
            stack.format_arn(
                service="codebuild",
                resource="report-group",
                resource_name=f"{project.project_name}-*",
            ),
            "CodeBuild's grant on the test report groups named after this project.",
        )
