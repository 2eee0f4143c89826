"""The BuildSource and BuildProject constructs, built alone in a bare stack."""

from __future__ import annotations

import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template

from stacks.constructs.build_project import BuildProject, BuildSource
from tests.support.cdk_templates import ROOT, bare_stack, resources, text


@pytest.fixture(scope="module")
def template() -> Template:
    """Two projects on one source: a plain one and a Docker one, as the stateful stack has."""
    stack = bare_stack()
    source = BuildSource(stack, "Source", repository_root=ROOT)
    common = {"source": source, "environment_variables": {"A": "1"}}
    BuildProject(stack, "Plain", buildspec="a/buildspec.yml", description="plain", **common)
    BuildProject(
        stack,
        "Docker",
        buildspec="b/buildspec.yml",
        description="docker",
        docker=True,
        compute_type=codebuild.ComputeType.LARGE,
        timeout=cdk.Duration.minutes(180),
        log_retention=logs.RetentionDays.TWO_WEEKS,
        **common,
    )
    return Template.from_stack(stack)


def test_build_projects_run_their_buildspec_from_the_source_asset(template):
    projects = resources(template, "AWS::CodeBuild::Project")
    assert {p["Properties"]["Source"]["BuildSpec"] for p in projects.values()} == {
        "a/buildspec.yml",
        "b/buildspec.yml",
    }
    for props in (p["Properties"] for p in projects.values()):
        assert props["Environment"]["Image"] == "aws/codebuild/standard:7.0"
        assert props["Environment"]["Type"] == "LINUX_CONTAINER"
        assert props["Source"]["Type"] == "S3"
        assert re.fullmatch(
            r"cdk-[a-z0-9]+-assets-<AWS::AccountId>-<AWS::Region>/[0-9a-f]{64}\.zip",
            text(props["Source"]["Location"]),
        )
        assert props["Artifacts"] == {"Type": "NO_ARTIFACTS"}
        assert props["LogsConfig"]["CloudWatchLogs"]["Status"] == "ENABLED"
        assert "Name" not in props
    # One source zip for all projects.
    assert len({text(p["Properties"]["Source"]["Location"]) for p in projects.values()}) == 1


def test_defaults_and_options_reach_the_project(template):
    by_spec = {
        p["Properties"]["Source"]["BuildSpec"]: p["Properties"]
        for p in resources(template, "AWS::CodeBuild::Project").values()
    }
    plain, docker = by_spec["a/buildspec.yml"], by_spec["b/buildspec.yml"]
    assert plain["Environment"]["PrivilegedMode"] is False
    assert plain["Environment"]["ComputeType"] == "BUILD_GENERAL1_MEDIUM"
    assert plain["TimeoutInMinutes"] == 120
    assert docker["Environment"]["PrivilegedMode"] is True
    assert docker["Environment"]["ComputeType"] == "BUILD_GENERAL1_LARGE"
    assert docker["TimeoutInMinutes"] == 180
    assert plain["Environment"]["EnvironmentVariables"] == [
        {"Name": "A", "Type": "PLAINTEXT", "Value": "1"}
    ]


def test_each_build_logs_to_its_own_log_group_deleted_with_the_stack(template):
    groups = resources(template, "AWS::Logs::LogGroup")
    assert sorted(g["Properties"]["RetentionInDays"] for g in groups.values()) == [14, 30]
    for group in groups.values():
        assert group["DeletionPolicy"] == "Delete"
    used = {
        p["Properties"]["LogsConfig"]["CloudWatchLogs"]["GroupName"]["Ref"]
        for p in resources(template, "AWS::CodeBuild::Project").values()
    }
    assert used == set(groups)


def test_build_roles_are_assumable_by_codebuild_only(template):
    roles = resources(template, "AWS::IAM::Role")
    assert len(roles) == 2
    for role in roles.values():
        assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [
            {
                "Action": "sts:AssumeRole",
                "Effect": "Allow",
                "Principal": {"Service": "codebuild.amazonaws.com"},
            }
        ]
        assert "ManagedPolicyArns" not in role["Properties"]
