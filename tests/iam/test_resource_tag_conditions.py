"""Every `aws:ResourceTag/KEY` condition of every policy, the CI role's and each one the app
synthesizes, names a tag that the synthesized resources of the type it acts on declare, with a
value the condition accepts. A condition on a tag the resource lacks never allows: that is how
the CI role lost `mark-released` (CloudFormation puts no `aws:cloudformation:*` tag on ECR
repositories). So `aws:`-prefixed keys, tags AWS may or may not set, are refused outright."""

from __future__ import annotations

import fnmatch
import json

import pytest

from tests.support.cdk_templates import RELEASE_WITH_GPU, STATEFUL, synthesize
from tests.support.cfn_values import listed
from tests.support.iam_policy import Rendered

from .test_ci_role_policy import POLICY

RESOURCE_TAG = "aws:ResourceTag/"
# (ARN service, the resource part's first word): the CloudFormation type of that resource.
ARN_TYPES = {
    ("ecr", "repository"): "AWS::ECR::Repository",
    ("codebuild", "project"): "AWS::CodeBuild::Project",
    ("s3", ""): "AWS::S3::Bucket",
    ("sagemaker", "endpoint"): "AWS::SageMaker::Endpoint",
    ("sagemaker", "model"): "AWS::SageMaker::Model",
    ("logs", "log-group"): "AWS::Logs::LogGroup",
    ("sns", ""): "AWS::SNS::Topic",
    ("kms", "key"): "AWS::KMS::Key",
}


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, dict]:
    assembly = synthesize(tmp_path_factory.mktemp("cdk.out"), **RELEASE_WITH_GPU)
    return {
        path.name.removesuffix(".template.json"): json.loads(path.read_text())
        for path in assembly.glob("*.template.json")
    }


def policy_documents(value) -> list[dict]:
    """Every policy document anywhere in a template (IAM policies, roles' inline policies and
    trust, bucket, topic, key and repository policies): whatever holds a `Statement` list."""
    if isinstance(value, dict):
        found = [value] if isinstance(value.get("Statement"), list) else []
        return found + [d for v in value.values() for d in policy_documents(v)]
    if isinstance(value, list):
        return [d for v in value for d in policy_documents(v)]
    return []


def tag_conditions(statement: dict) -> list[tuple[str, str, list[str]]]:
    """(operator, tag key, values) of each `aws:ResourceTag/...` condition."""
    return [
        (operator, key.removeprefix(RESOURCE_TAG), [str(v) for v in listed(values)])
        for operator, keys in statement.get("Condition", {}).items()
        for key, values in keys.items()
        if key.startswith(RESOURCE_TAG)
    ]


def resource_type(arn: str) -> str:
    _, _, service, _, _, resource = arn.split(":", 5)
    first = resource.split("/")[0].split(":")[0] if "/" in resource or ":" in resource else ""
    assert (service, first) in ARN_TYPES, f"no resource type known for {arn}: add it to ARN_TYPES"
    return ARN_TYPES[(service, first)]


def declared_tags(resource: dict) -> dict[str, str]:
    tags = resource.get("Properties", {}).get("Tags", [])
    if isinstance(tags, dict):
        return {k: str(v) for k, v in tags.items()}
    return {tag["Key"]: str(tag["Value"]) for tag in tags}


def accepts(operator: str, values: list[str], value: str) -> bool:
    if operator.startswith("StringLike"):
        return any(fnmatch.fnmatchcase(value, pattern) for pattern in values)
    if operator.startswith("StringEquals"):
        return value in values
    raise AssertionError(f"a tag condition with {operator}: teach this test what it accepts")


def tag_checks(templates: dict[str, dict]) -> list[tuple[str, dict, list[str]]]:
    """(where, statement, its resources as text) for every statement of every policy."""
    ci = json.loads(POLICY.read_text())
    found = [(POLICY.name, s, listed(s["Resource"])) for s in ci["Statement"]]
    for stack, body in templates.items():
        rendered = Rendered(body)
        for document in policy_documents(body.get("Resources", {})):
            for statement in document["Statement"]:
                resources = [rendered.text(r) for r in listed(statement.get("Resource", []))]
                found.append((stack, statement, resources))
    return found


def test_every_resource_tag_condition_names_a_tag_its_resources_declare(templates):
    synthesized = [r for body in templates.values() for r in body.get("Resources", {}).values()]
    checked = 0
    for where, statement, arns in tag_checks(templates):
        for operator, key, values in tag_conditions(statement):
            what = f"{where} {statement.get('Sid', statement['Action'])}: {RESOURCE_TAG}{key}"
            assert not key.startswith("aws:"), f"{what}: a tag AWS sets, or not; set one yourself"
            for arn in arns:
                kind = resource_type(arn)
                tagged = [
                    r
                    for r in synthesized
                    if r["Type"] == kind
                    and key in declared_tags(r)
                    and accepts(operator, values, declared_tags(r)[key])
                ]
                assert tagged, f"{what}: no {kind} of the app declares it with {values}"
                checked += 1
    assert checked, "no policy conditions on a resource tag: this test would check nothing"


def test_the_ci_roles_tag_is_on_every_repository_and_build_project_of_the_stateful_stack(
    templates,
):
    """The CI role builds with every project and marks images in the one repository."""
    ci = json.loads(POLICY.read_text())
    for statement in ci["Statement"]:
        for operator, key, values in tag_conditions(statement):
            kind = resource_type(listed(statement["Resource"])[0])
            own = [r for r in templates[STATEFUL]["Resources"].values() if r["Type"] == kind]
            assert own, kind
            for resource in own:
                assert accepts(operator, values, declared_tags(resource).get(key, "")), kind
