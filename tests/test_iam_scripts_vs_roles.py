"""What each role may do vs what each script it runs calls.

Each buildspec runs as its CodeBuild project's role. Its calls are taken from the real path:
the `aws` commands the buildspec names (mapped to IAM actions through botocore's service
models), their arguments as a run of its commands records them, the docker pushes and pulls,
and the boto3 calls the packaging CLI makes against moto's S3. Each call must be allowed by the
synthesized policy of that role on the resource it touches. The execution roles likewise, on
the runtime side: what SageMaker does with each to serve its model (pull, read the archive,
write logs, publish instance metrics) and, for the CPU model, what a transform job of `ops
batch` does. Then parliament lints every policy.
"""

from __future__ import annotations

import ast
import fnmatch
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

from tests.buildspec_recorders import commands_text, load_buildspec, recorders_bin
from tests.cdk_templates import ENDPOINTS, RELEASE_WITH_GPU, STATEFUL, synthesize
from tests.iam_actions import boto3_operation, cli_actions, operation_action
from tests.iam_policy import Rendered, Request, allows
from tests.model_specs import tiny_spec

ROOT = Path(__file__).resolve().parents[1]
# Stand-ins for the template's unknowns when a script runs here; mapped back afterwards.
KNOWN_STANDINS = {
    "<AWS.AccountId>": "123456789012",
    "<AWS.Region>": "eu-west-1",
    "<DlcRepositoryAccountMap>": "763104351884",
}
# What docker does against ECR (ECR's documentation of the permissions a push and a pull need).
DOCKER_PUSH = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:InitiateLayerUpload",
    "ecr:UploadLayerPart",
    "ecr:CompleteLayerUpload",
    "ecr:PutImage",
)
DOCKER_PULL = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")
_ECR_IMAGE = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com/([^:@]+)")


@pytest.fixture(scope="module")
def stateful(tmp_path_factory) -> Rendered:
    assembly = synthesize(tmp_path_factory.mktemp("iam"))
    return Rendered(json.loads((assembly / f"{STATEFUL}.template.json").read_text()))


class Standins:
    """Concrete values for a project's environment, and the way back to template text."""

    def __init__(self) -> None:
        self.to_value = dict(KNOWN_STANDINS)

    def value(self, text: str) -> str:
        for token in re.findall(r"<[^<>]+>", text):
            self.to_value.setdefault(token, f"standin{len(self.to_value):02d}")
            text = text.replace(token, self.to_value[token])
        return text

    def back(self, text: str) -> str:
        for token, value in sorted(self.to_value.items(), key=lambda i: -len(i[1])):
            text = text.replace(value, token)
        return text


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
        upload_archive(client, archive, sha256, destination)
        # A real model archive is GBs: boto3 uploads it in parts.
        big = tmp_path / "big.tar.gz"
        big.write_bytes(os.urandom(6 * 1024 * 1024))
        config = TransferConfig(multipart_threshold=5 * 1024 * 1024, use_threads=False)
        upload_archive(client, big, "ef" * 32, destination, config)

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
    """The actions of every boto3 call in ops/*.py, from the client services it names."""
    sources = [ast.parse(path.read_text()) for path in sorted((ROOT / "ops").glob("*.py"))]
    nodes = [node for tree in sources for node in ast.walk(tree)]
    services = {
        node.args[0].value
        for node in nodes
        if isinstance(node, ast.Call)
        and isinstance(node.func, (ast.Name, ast.Attribute))
        and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("client", "make_client")
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


def test_readme_lists_exactly_the_actions_the_operator_cli_calls():
    readme = (ROOT / "README.md").read_text()
    (listed,) = re.findall(r"The operator's credentials need:\s+([^.]+)\.", readme)
    assert set(re.findall(r"`([a-z0-9-]+:[A-Za-z]+)`", listed)) == operator_actions()


def test_ops_status_reads_the_start_up_lines_with_filter_log_events_only():
    """The one logs action of the CLI (ops/startup_log.py), seen through its boto3 call."""
    assert {a for a in operator_actions() if a.startswith("logs:")} == {"logs:FilterLogEvents"}


# --- parliament -----------------------------------------------------------------------------

# CodeBuild's S3 source: CDK grants each project's role read access to the one source zip with
# the wildcards s3:GetObject*, s3:GetBucket* and s3:List* on that bucket and object (the grant
# cdk-nag's IAM5 acknowledges in stacks/constructs/build_project.py). parliament reports the
# actions in those families whose resource is not a bucket or object (access points, Storage
# Lens, ListAllMyBuckets...) as RESOURCE_MISMATCH: on the bucket and object ARNs named, they
# grant nothing, which is the right outcome. Accepted for exactly those actions.
CDK_ASSET_READ = ("s3:GetObject*", "s3:GetBucket*", "s3:List*")


BUCKET_OR_OBJECT = ("arn:*:s3:::*", "arn:*:s3:::*/*")


def accepted(issue: str, detail) -> bool:
    """Only members of CDK's read families that need neither a bucket nor an object."""
    return issue == "RESOURCE_MISMATCH" and all(
        any(fnmatch.fnmatchcase(entry["action"], w) for w in CDK_ASSET_READ)
        and entry["required_format"] not in BUCKET_OR_OBJECT
        for entry in detail
    )


def concrete(rendered: Rendered, value, standins: Standins):
    """A policy document with every unknown replaced by a plausible concrete value."""
    if isinstance(value, list):
        return [concrete(rendered, v, standins) for v in value]
    if isinstance(value, dict) and not any(k == "Ref" or k.startswith("Fn::") for k in value):
        return {k: concrete(rendered, v, standins) for k, v in value.items()}
    return standins.value(rendered.text(value)) if isinstance(value, (str, dict)) else value


@pytest.fixture(scope="module")
def release_templates(tmp_path_factory) -> dict[str, Rendered]:
    assembly = synthesize(tmp_path_factory.mktemp("iam-release"), **RELEASE_WITH_GPU)
    return {
        stack: Rendered(json.loads((assembly / f"{stack}.template.json").read_text()))
        for stack in (STATEFUL, ENDPOINTS)
    }


# --- the execution roles: what SageMaker does with them while a model runs -------------------
# AWS's "CreateModel API: Execution Role Permissions": with the model's execution role SageMaker
# pulls the image, reads the model archive, writes the container's output to CloudWatch Logs
# (/aws/sagemaker/Endpoints/<endpoint>, streams <variant>/<instance>; batch transform:
# /aws/sagemaker/TransformJobs, streams <job>/<instance>) and publishes the instance metrics
# (namespace /aws/sagemaker/Endpoints or /aws/sagemaker/TransformJobs). A transform job also
# lists and reads its input (S3Prefix) and writes <output>/<input name>.out.
INSTANCE = "i-0123456789abcdef0"
# An image URI as the template renders it, the DLC's account and region as <tokens>.
_IMAGE_TEXT = re.compile(
    r"^(?P<account>[^.]+)\.dkr\.ecr\.(?P<region><[^>]+>|[a-z0-9-]+)\.[^/]+/(?P<name>[^@:]+)@"
)


def _logs(group: str, stream: str) -> list[Request]:
    arn = f"arn:aws:logs:<AWS.Region>:<AWS.AccountId>:log-group:{group}"
    return [
        Request("logs:CreateLogGroup", arn),
        Request("logs:DescribeLogStreams", arn),
        Request("logs:CreateLogStream", f"{arn}:log-stream:{stream}"),
        Request("logs:PutLogEvents", f"{arn}:log-stream:{stream}"),
    ]


def _metrics(namespace: str) -> Request:
    return Request("cloudwatch:PutMetricData", "*", (("cloudwatch:namespace", namespace),))


def serving_requests(rendered: Rendered) -> dict[str, list[Request]]:
    """Per execution role (logical id): what SageMaker does with it to run its endpoint."""
    found = {}
    for endpoint in rendered.resources.values():
        if endpoint["Type"] != "AWS::SageMaker::Endpoint":
            continue
        name = endpoint["Properties"]["EndpointName"]
        config = rendered.resources[endpoint["Properties"]["EndpointConfigName"]["Fn::GetAtt"][0]]
        (variant,) = config["Properties"]["ProductionVariants"]
        model = rendered.resources[variant["ModelName"]["Fn::GetAtt"][0]]["Properties"]
        container = model["PrimaryContainer"]
        image = _IMAGE_TEXT.match(rendered.text(container["Image"]))
        repository = f"arn:aws:ecr:{image['region']}:{image['account']}:repository/{image['name']}"
        requests = [
            Request("ecr:GetAuthorizationToken", "*"),
            *(Request(a, repository) for a in DOCKER_PULL + ("ecr:BatchCheckLayerAvailability",)),
            *_logs(f"/aws/sagemaker/Endpoints/{name}", f"AllTraffic/{INSTANCE}"),
            _metrics("/aws/sagemaker/Endpoints"),
        ]
        if "ModelDataUrl" in container:
            bucket, _, key = container["ModelDataUrl"].removeprefix("s3://").partition("/")
            requests.append(Request("s3:GetObject", f"arn:aws:s3:::{bucket}/{key}"))
        found[model["ExecutionRoleArn"]["Fn::GetAtt"][0]] = requests
    return found


def transform_requests(bucket: str, job: str) -> list[Request]:
    """A transform job that `ops batch` starts, at the locations it names them."""
    from ops.s3_objects import S3Location
    from ops.transform import result_location

    location = S3Location(bucket, "batch").child(job)
    source, output = location.child("input/day.jsonl"), location.child("output")
    answers = result_location(source, output)
    return [
        Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", (("s3:prefix", source.key),)),
        Request("s3:GetObject", f"arn:aws:s3:::{bucket}/{source.key}"),
        Request("s3:PutObject", f"arn:aws:s3:::{bucket}/{answers.key}"),
        *_logs("/aws/sagemaker/TransformJobs", f"{job}/{INSTANCE}-1700000000"),
        _metrics("/aws/sagemaker/TransformJobs"),
    ]


def test_each_execution_role_allows_what_sagemaker_does_to_serve_its_model(release_templates):
    rendered = release_templates[ENDPOINTS]
    roles = serving_requests(rendered)
    assert len(roles) == 3  # text generation, CPU and GPU decisions
    for role, requests in roles.items():
        statements = rendered.statements_of_role(role)
        assert [str(r) for r in requests if not allows(statements, r, rendered)] == [], role


def test_the_cpu_models_role_allows_what_a_transform_job_of_ops_batch_does(release_templates):
    rendered = release_templates[ENDPOINTS]
    (role,) = [r for r in serving_requests(rendered) if r.startswith("DecisionCpu")]
    statements = rendered.statements_of_role(role)
    requests = transform_requests("artifacts-bucket", "decisions-20260101-000000")
    assert [str(r) for r in requests if not allows(statements, r, rendered)] == []
    # The GPU model runs no transform job (ops batch refuses it): no such rights.
    (gpu,) = [r for r in serving_requests(rendered) if r.startswith("DecisionGpu")]
    gpu_statements = rendered.statements_of_role(gpu)
    assert not any(allows(gpu_statements, r, rendered) for r in requests)


def test_the_runtime_grants_stay_scoped(release_templates):
    """Metrics only in SageMaker's namespaces, logs only in the role's own log groups."""
    rendered = release_templates[ENDPOINTS]
    for role in serving_requests(rendered):
        statements = rendered.statements_of_role(role)
        assert not allows(statements, _metrics("DecisionAdapter"), rendered)
        assert not allows(statements, _metrics("AWS/SageMaker"), rendered)
        for request in _logs("/aws/sagemaker/Endpoints/someone-else", f"AllTraffic/{INSTANCE}"):
            assert not allows(statements, request, rendered)


def test_the_container_itself_calls_no_aws_api():
    """The adapter's metrics are log lines (embedded metric format), written by SageMaker with
    the role above; it imports no AWS SDK, so the role needs nothing for the container."""
    sources = (ROOT / "container" / "decision_adapter").glob("*.py")
    assert not [
        p.name
        for p in sources
        if re.search(r"^\s*(import|from) (boto3|botocore)", p.read_text(), re.M)
    ]


def test_parliament_finds_nothing_unexplained_in_any_policy(release_templates):
    from parliament import analyze_policy_string

    found, linted = [], 0  # found: what no reason above explains
    for stack, rendered in release_templates.items():
        for logical_id, resource in rendered.resources.items():
            # Identity and bucket policies. Role trust policies are not linted: parliament
            # reads every statement as one that needs a Resource, which trust policies lack.
            if resource["Type"] not in ("AWS::IAM::Policy", "AWS::S3::BucketPolicy"):
                continue
            document = concrete(rendered, resource["Properties"]["PolicyDocument"], Standins())
            policy = analyze_policy_string(json.dumps(document))
            linted += 1
            for finding in policy.findings:
                if not accepted(finding.issue, finding.detail):
                    found.append((stack, logical_id, finding.issue, finding.detail))
    assert linted == 8  # three build roles, three execution roles, two buckets
    assert found == []


def test_parliament_and_the_acceptance_still_catch_a_real_mismatch():
    from parliament import analyze_policy_string

    wrong = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket"}
        ],
    }
    findings = analyze_policy_string(json.dumps(wrong)).findings
    assert [f.issue for f in findings if not accepted(f.issue, f.detail)] == ["RESOURCE_MISMATCH"]
