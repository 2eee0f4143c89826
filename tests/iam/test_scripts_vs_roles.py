"""What each build role may do vs what each script it runs calls.

Each buildspec runs as its CodeBuild project's role. Its calls are taken from the real path:
the `aws` commands the buildspec names (mapped to IAM actions through botocore's service
models), their arguments as a run of its commands records them, the docker pushes and pulls,
and the boto3 calls the packaging CLI makes against moto's S3. Each call must be allowed by the
synthesized policy of that role on the resource it touches. The operator CLI's calls are the
actions docs/operate.md lists for the operator. The execution roles and parliament's lint of every
policy: tests/iam/test_execution_roles.py.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import boto3
import pytest
from boto3.s3.transfer import TransferConfig

from tests.support.buildspec_recorders import commands_text, load_buildspec, recorders_bin
from tests.support.cdk_templates import STATEFUL, synthesize
from tests.support.iam_actions import (
    DOCKER_PULL,
    DOCKER_PUSH,
    boto3_operation,
    cli_actions,
    operation_action,
)
from tests.support.iam_policy import KNOWN_STANDINS, Rendered, Request, Standins, allows
from tests.support.model_specs import tiny_spec

ROOT = Path(__file__).resolve().parents[2]
_ECR_IMAGE = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com/([^:@]+)")


@pytest.fixture(scope="module")
def stateful(tmp_path_factory) -> Rendered:
    assembly = synthesize(tmp_path_factory.mktemp("iam"))
    return Rendered(json.loads((assembly / f"{STATEFUL}.template.json").read_text()))


def project(rendered: Rendered, buildspec: str, dockerfile: str | None = None) -> dict:
    found = [
        p
        for p in rendered.resources.values()
        if p["Type"] == "AWS::CodeBuild::Project"
        and p["Properties"]["Source"]["BuildSpec"] == buildspec
        and (dockerfile is None or environment(rendered, p)["DOCKERFILE"] == dockerfile)
    ]
    assert len(found) == 1
    return found[0]


def environment(rendered: Rendered, project_resource: dict) -> dict[str, str]:
    variables = project_resource["Properties"]["Environment"]["EnvironmentVariables"]
    return {v["Name"]: rendered.text(v["Value"]) for v in variables}


def denied(rendered: Rendered, project_resource: dict, requests: list[Request]) -> list[str]:
    statements = rendered.statements_of_role(rendered.project_role(project_resource))
    return [str(r) for r in requests if not allows(statements, r, rendered)]


def aws_commands(buildspec: str) -> set[tuple[str, str]]:
    """Every `aws <service> <command>` the buildspec's commands contain."""
    commands = commands_text(load_buildspec(buildspec))
    return set(re.findall(r"\baws\s+([a-z0-9-]+)\s+([a-z0-9-]+)", commands))


# --- the image builds: container/buildspec.yml ----------------------------------------------


def ecr_repository_arn(image: str) -> str:
    account, region, name = _ECR_IMAGE.match(image).groups()
    return f"arn:aws:ecr:{region}:{account}:repository/{name}"


def run_image_buildspec(tmp_path: Path, env: dict[str, str]) -> list[list[str]]:
    """The buildspec's commands in bash, `aws` and `docker` replaced by recorders."""
    bin_dir = recorders_bin(tmp_path)
    spec = load_buildspec("container/buildspec.yml")
    completed = subprocess.run(
        ["bash", "-c", "set -e\n" + commands_text(spec)],
        cwd=tmp_path,
        env={
            **os.environ,
            **{k: str(v) for k, v in spec["env"]["variables"].items()},
            **env,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "CALLS": str(tmp_path / "calls"),
            "CODEBUILD_BUILD_NUMBER": "1",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    return [shlex.split(line) for line in (tmp_path / "calls").read_text().splitlines()]


def option(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


def image_build_requests(calls: list[list[str]], region: str) -> list[Request]:
    requests = []
    for words in calls:
        if words[0] == "aws":
            service, command = words[1], words[2]
            for action in cli_actions(service, command):
                if action == "ecr:DescribeImages":
                    arn = (
                        f"arn:aws:ecr:{option(words, '--region') or region}:"
                        f"{option(words, '--registry-id')}:repository/"
                        f"{option(words, '--repository-name')}"
                    )
                else:  # the login tokens: no resource-level permissions exist
                    assert action.endswith("GetAuthorizationToken"), action
                    arn = "*"
                requests.append(Request(action, arn))
        elif words[:2] == ["docker", "push"]:
            arn = ecr_repository_arn(words[2])
            requests += [Request(a, arn) for a in DOCKER_PUSH]
        elif words[:2] == ["docker", "build"]:
            base = next(w.split("=", 1)[1] for w in words if w.startswith("BASE_IMAGE="))
            requests += [Request(a, ecr_repository_arn(base)) for a in DOCKER_PULL]
    return requests


@pytest.mark.parametrize("dockerfile", ["container/Dockerfile", "container/Dockerfile.gpu"])
def test_image_build_role_allows_every_call_of_its_buildspec(stateful, tmp_path, dockerfile):
    built = project(stateful, "container/buildspec.yml", dockerfile)
    standins = Standins()
    env = {k: standins.value(v) for k, v in environment(stateful, built).items()}
    region = KNOWN_STANDINS["<AWS.Region>"]
    calls = run_image_buildspec(tmp_path, {**env, "AWS_REGION": region})

    requests = [
        Request(r.action, standins.back(r.resource)) for r in image_build_requests(calls, region)
    ]
    recorded = {(w[1], w[2]) for w in calls if w[0] == "aws"}
    # Every `aws` command of the buildspec ran (so each was checked with its real arguments).
    assert recorded == aws_commands("container/buildspec.yml")
    assert {r.action for r in requests} >= {"ecr:DescribeImages", "ecr:PutImage"}
    assert denied(stateful, built, requests) == []


# --- the model build: model_packaging/buildspec.yml -----------------------------------------


def recorded_s3_calls(client) -> list[tuple[str, dict]]:
    calls: list[tuple[str, dict]] = []
    client.meta.events.register(
        "before-parameter-build.s3.*",
        lambda model, params, **_: calls.append((model.name, dict(params))),
    )
    return calls


def s3_requests(calls: list[tuple[str, dict]]) -> list[Request]:
    requests = []
    for operation, params in calls:
        action = operation_action("s3", operation)
        bucket = params["Bucket"]
        if "Key" in params:
            requests.append(Request(action, f"arn:aws:s3:::{bucket}/{params['Key']}"))
        else:
            context = (("s3:prefix", params["Prefix"]),) if "Prefix" in params else ()
            requests.append(Request(action, f"arn:aws:s3:::{bucket}", context))
    return requests


def upload_destination(env: dict[str, str]) -> str:
    """The --upload argument of the buildspec's packaging command, its variables expanded."""
    commands = commands_text(load_buildspec("model_packaging/buildspec.yml"))
    (template,) = re.findall(r'--upload "([^"]+)"', commands)
    return re.sub(r"\$\{(\w+)\}", lambda m: env[m[1]], template)


def test_model_build_role_allows_every_call_the_packaging_cli_makes(stateful, tmp_path):
    from moto import mock_aws

    from model_packaging.cli import main
    from model_packaging.upload import upload_archive

    # The buildspec calls no `aws` command: its AWS calls are the packaging CLI's boto3 calls.
    assert aws_commands("model_packaging/buildspec.yml") == set()
    built = project(stateful, "model_packaging/buildspec.yml")
    standins = Standins()
    env = {k: standins.value(v) for k, v in environment(stateful, built).items()}
    destination = upload_destination(env)
    bucket = destination.removeprefix("s3://").split("/")[0]

    with mock_aws():
        client = boto3.client("s3", region_name="eu-west-1")
        client.create_bucket(
            Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
        )
        calls = recorded_s3_calls(client)
        spec = tiny_spec(tmp_path)
        archive = tmp_path / "model.tar.gz"
        argv = ["--spec", str(spec), "--output", str(archive), "--upload", destination]
        assert main(argv, s3_client=client) == 0
        # The same archive again: found by its key, not uploaded twice.
        sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()
        upload_archive(client, archive, sha256, destination, spec_name="gemma3-270m")
        # A real model archive is GBs: boto3 uploads it in parts.
        big = tmp_path / "big.tar.gz"
        big.write_bytes(os.urandom(6 * 1024 * 1024))
        config = TransferConfig(multipart_threshold=5 * 1024 * 1024, use_threads=False)
        upload_archive(client, big, "ef" * 32, destination, config, spec_name="gemma3-270m")

    operations = {operation for operation, _ in calls}
    assert {
        "ListObjectsV2",
        "PutObject",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
    } <= operations
    requests = [
        Request(
            r.action, standins.back(r.resource), tuple((k, standins.back(v)) for k, v in r.context)
        )
        for r in s3_requests(calls)
    ]
    assert denied(stateful, built, requests) == []


def test_the_evaluator_denies_what_the_policy_does_not_grant(stateful):
    """The check above can fail: a read, a write outside the prefix and an unconditioned list."""
    built = project(stateful, "model_packaging/buildspec.yml")
    bucket = environment(stateful, built)["ARTIFACT_BUCKET"]
    outside = [
        Request("s3:GetObject", f"arn:aws:s3:::{bucket}/models/x/model.tar.gz"),
        Request("s3:PutObject", f"arn:aws:s3:::{bucket}/other/model.tar.gz"),
        Request("s3:ListBucket", f"arn:aws:s3:::{bucket}"),
        Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", (("s3:prefix", "other/"),)),
    ]
    assert denied(stateful, built, outside) == [str(r) for r in outside]
    inside = Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", (("s3:prefix", "models/a"),))
    assert denied(stateful, built, [inside]) == []


def test_cli_commands_map_to_their_iam_actions():
    assert cli_actions("ecr", "describe-images") == ("ecr:DescribeImages",)
    assert cli_actions("ecr", "get-login-password") == ("ecr:GetAuthorizationToken",)
    assert cli_actions("ecr-public", "get-login-password") == (
        "ecr-public:GetAuthorizationToken",
        "sts:GetServiceBearerToken",
    )
    assert cli_actions("sagemaker-runtime", "invoke-endpoint") == ("sagemaker:InvokeEndpoint",)
    assert operation_action("s3", "ListObjectsV2") == "s3:ListBucket"
    with pytest.raises(AssertionError, match="no operation"):
        cli_actions("ecr", "describe-image")


# --- the operator CLI -----------------------------------------------------------------------


def operator_actions() -> set[str]:
    """The actions of every boto3 call in ops/ (its subcommands' modules too), from the client
    services it names."""
    sources = [ast.parse(path.read_text()) for path in sorted((ROOT / "ops").rglob("*.py"))]
    nodes = [node for tree in sources for node in ast.walk(tree)]
    services = {
        node.args[0].value
        for node in nodes
        if isinstance(node, ast.Call)
        and isinstance(node.func, (ast.Name, ast.Attribute))
        and getattr(node.func, "id", getattr(node.func, "attr", None))
        in ("client", "make_client", "clients")
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    actions = set()
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            for service in services:
                operation = boto3_operation(service, node.func.attr)
                if operation:
                    actions.add(operation_action(service, operation))
    return actions


def test_the_docs_list_exactly_the_actions_the_operator_cli_calls():
    readme = (ROOT / "docs" / "operate.md").read_text()
    (listed,) = re.findall(r"The operator's credentials need:\s+([^.]+)\.", readme)
    assert set(re.findall(r"`([a-z0-9-]+:[A-Za-z]+)`", listed)) == operator_actions()


def test_ops_status_reads_the_start_up_lines_with_filter_log_events_only():
    """The one logs action of the CLI (ops/startup_log.py), seen through its boto3 call."""
    assert {a for a in operator_actions() if a.startswith("logs:")} == {"logs:FilterLogEvents"}
