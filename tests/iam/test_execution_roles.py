"""What each execution role may do vs what SageMaker does with it while a model runs, and
parliament's lint of every identity and bucket policy of a release.

The execution roles, on the runtime side: what SageMaker does with each to serve its model
(pull, read the archive, write logs, publish instance metrics) and, for the CPU model, what a
transform job of `ops batch` does; the container itself calls no AWS API. The build roles:
tests/iam/test_scripts_vs_roles.py.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest

from tests.support.cdk_templates import ENDPOINTS, RELEASE_WITH_GPU, STATEFUL, synthesize
from tests.support.iam_actions import DOCKER_PULL
from tests.support.iam_policy import Rendered, Request, Standins, allows

ROOT = Path(__file__).resolve().parents[2]

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
