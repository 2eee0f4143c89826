"""The asynchronous decision endpoint, synthesized with the whole app (it is off by default):
its AsyncInferenceConfig, scaling to zero and back, the execution role's S3 prefixes evaluated
as IAM would, notifications, cdk-nag and cfn-lint; and the batch transform prefixes of the CPU
decision model's role."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from stacks.config import AppConfig
from tests.support.cdk_templates import (
    CPU_IMAGE,
    ENDPOINTS,
    RELEASE,
    cdk_json_context,
    cfn_lint,
    one,
    synthesize,
)
from tests.support.cfn_values import text
from tests.support.iam_policy import Rendered, Request, allows

INVOKER = "arn:aws:iam::123456789012:role/batch-caller"
BUCKET = "arn:aws:s3:::artifacts-bucket"


@pytest.fixture(scope="module")
def assembly(tmp_path_factory) -> Path:
    return synthesize(
        tmp_path_factory.mktemp("async"),
        **RELEASE,
        decisionAsyncEndpoint={"enabled": True},
        invokerRoleArns=[INVOKER],
    )


@pytest.fixture(scope="module")
def raw(assembly) -> dict:
    return json.loads((assembly / f"{ENDPOINTS}.template.json").read_text())


@pytest.fixture(scope="module")
def template(assembly):
    from tests.support.cdk_templates import template as read

    return read(assembly, ENDPOINTS)


def async_config(template) -> dict:
    _, config = one(template, "AWS::SageMaker::EndpointConfig", {"AsyncInferenceConfig": {}})
    return config["Properties"]


def logical_id(raw: dict, resource_type: str, prefix: str) -> str:
    (found,) = [
        k
        for k, v in raw["Resources"].items()
        if v["Type"] == resource_type and k.startswith(prefix)
    ]
    return found


# --- configuration -------------------------------------------------------------------------
def test_it_is_off_by_default_and_in_the_shipped_cdk_json():
    assert AppConfig.from_context(cdk_json_context()).decision_async_endpoint.enabled is False


def test_the_config_refuses_gpu_types_overlapping_prefixes_and_a_missing_image():
    with pytest.raises(ValidationError, match="is a GPU type"):
        AppConfig.from_context(
            {"decisionAsyncEndpoint": {"enabled": True, "instanceType": "ml.g5.xlarge"}}
        )
    with pytest.raises(ValidationError, match=r"failurePrefix \('async/output/bad'\) lies within"):
        AppConfig.from_context(
            {"decisionAsyncEndpoint": {"enabled": True, "failurePrefix": "async/output/bad"}}
        )
    with pytest.raises(
        ValidationError,
        match="decisionCpuImage is required while decision-models" "-decision-async is enabled",
    ):
        AppConfig.from_context(
            {
                "modelDataUri": RELEASE["modelDataUri"],
                "decisionGpuImage": RELEASE["decisionGpuImage"],
                "textGenerationEndpoint": RELEASE["textGenerationEndpoint"],
                "decisionCpuEndpoint": {"enabled": False},
                "decisionGpuEndpoint": RELEASE["decisionGpuEndpoint"],
                "decisionAsyncEndpoint": {"enabled": True},
            }
        )


def test_requests_and_answers_live_under_their_own_prefixes_with_notifications(template, raw):
    config = async_config(template)
    asynchronous = config["AsyncInferenceConfig"]
    assert asynchronous["ClientConfig"] == {"MaxConcurrentInvocationsPerInstance": 1}
    output = asynchronous["OutputConfig"]
    assert output["S3OutputPath"] == "s3://artifacts-bucket/async/output/"
    assert output["S3FailurePath"] == "s3://artifacts-bucket/async/failure/"
    topics = {
        name: logical_id(raw, "AWS::SNS::Topic", f"DecisionAsync{name}Topic")
        for name in ("Success", "Error")
    }
    assert output["NotificationConfig"] == {
        "SuccessTopic": {"Ref": topics["Success"]},
        "ErrorTopic": {"Ref": topics["Error"]},
    }
    (variant,) = config["ProductionVariants"]
    assert variant["InstanceType"] == "ml.c6i.2xlarge" and variant["InitialInstanceCount"] == 1
    model = raw["Resources"][variant["ModelName"]["Fn::GetAtt"][0]]["Properties"]
    assert model["PrimaryContainer"]["Image"] == CPU_IMAGE
    assert model["PrimaryContainer"]["Environment"]["DECISION_N_GPU_LAYERS"] == "0"
    outputs = raw["Outputs"]
    assert (
        text(outputs["DecisionAsyncInputLocation"]["Value"]) == "s3://artifacts-bucket/async/input/"
    )
    assert outputs["DecisionAsyncEndpointName"]["Value"] == {
        "Fn::GetAtt": [logical_id(raw, "AWS::SageMaker::Endpoint", "DecisionAsync"), "EndpointName"]
    }


def test_topics_are_encrypted_with_a_rotated_key_and_refuse_plain_http(raw):
    (key,) = resources_of(raw, "AWS::KMS::Key")
    assert key["Properties"]["EnableKeyRotation"] is True
    topics = resources_of(raw, "AWS::SNS::Topic")
    assert len(topics) == 2
    for topic in topics:
        assert topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][1] == "Arn"
    policies = resources_of(raw, "AWS::SNS::TopicPolicy")
    assert len(policies) == 2
    for policy in policies:
        (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
        assert statement["Effect"] == "Deny"
        assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def resources_of(raw: dict, resource_type: str) -> list[dict]:
    return [r for r in raw["Resources"].values() if r["Type"] == resource_type]


# --- scaling to zero and back ----------------------------------------------------------------
def test_it_scales_on_the_backlog_down_to_zero(template, raw):
    endpoint = logical_id(raw, "AWS::SageMaker::Endpoint", "DecisionAsync")
    target_id, target = one(
        template,
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {"MinCapacity": 0},
    )
    assert target["Properties"]["MaxCapacity"] == 2
    assert (
        text(target["Properties"]["ResourceId"])
        == f"endpoint/<{endpoint}.EndpointName>/variant/AllTraffic"
    )
    _, policy = one(
        template,
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {"PolicyType": "TargetTrackingScaling", "ScalingTargetId": {"Ref": target_id}},
    )
    tracking = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["TargetValue"] == 5
    assert tracking["CustomizedMetricSpecification"] == {
        "Namespace": "AWS/SageMaker",
        "MetricName": "ApproximateBacklogSizePerInstance",
        "Dimensions": [
            {"Name": "EndpointName", "Value": {"Fn::GetAtt": [endpoint, "EndpointName"]}}
        ],
        "Statistic": "Average",
    }


def test_a_backlog_without_capacity_wakes_it_from_zero(template, raw):
    endpoint = logical_id(raw, "AWS::SageMaker::Endpoint", "DecisionAsync")
    step_id, step = one(
        template, "AWS::ApplicationAutoScaling::ScalingPolicy", {"PolicyType": "StepScaling"}
    )
    configuration = step["Properties"]["StepScalingPolicyConfiguration"]
    assert configuration["AdjustmentType"] == "ChangeInCapacity"
    assert configuration["StepAdjustments"] == [
        {"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}
    ]
    alarms = [
        a["Properties"]
        for a in resources_of(raw, "AWS::CloudWatch::Alarm")
        if a["Properties"].get("MetricName") == "HasBacklogWithoutCapacity"  # math alarms have none
    ]
    (alarm,) = alarms
    assert alarm["AlarmActions"] == [{"Ref": step_id}]
    assert alarm["Namespace"] == "AWS/SageMaker" and alarm["Statistic"] == "Average"
    assert alarm["Dimensions"] == [
        {"Name": "EndpointName", "Value": {"Fn::GetAtt": [endpoint, "EndpointName"]}}
    ]
    # One minute with any request waiting (the metric is 1) and no instance starts one.
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert 0 < alarm["Threshold"] <= 1 and alarm["EvaluationPeriods"] == 1
    assert alarm["Period"] == 60


# --- least privilege -------------------------------------------------------------------------
def execution_role(raw: dict) -> str:
    return logical_id(raw, "AWS::IAM::Role", "DecisionAsyncEndpointExecutionRole")


@pytest.mark.parametrize(
    ("action", "key", "allowed"),
    [
        ("s3:GetObject", "async/input/req-1.json", True),
        ("s3:PutObject", "async/output/req-1.json.out", True),
        ("s3:PutObject", "async/failure/req-1.json.err", True),
        ("s3:GetObject", "models/3f2a/model.tar.gz", True),  # its model archive
        ("s3:PutObject", "async/input/req-1.json", False),
        ("s3:GetObject", "async/output/req-1.json.out", False),
        ("s3:GetObject", "async/failure/x", False),
        ("s3:GetObject", "async/inputs-elsewhere/x", False),
        ("s3:GetObject", "models/other/model.tar.gz", False),
        ("s3:PutObject", "models/3f2a/model.tar.gz", False),
        ("s3:DeleteObject", "async/output/req-1.json.out", False),
        ("s3:DeleteObject", "async/input/req-1.json", False),
    ],
)
def test_the_execution_role_reads_its_input_prefix_and_writes_its_output_prefixes_only(
    raw, action, key, allowed
):
    rendered = Rendered(raw)
    statements = rendered.statements_of_role(execution_role(raw))
    assert allows(statements, Request(action, f"{BUCKET}/{key}"), rendered) is allowed


def test_the_execution_role_publishes_to_its_two_topics_only(raw):
    rendered = Rendered(raw)
    statements = rendered.statements_of_role(execution_role(raw))
    topics = [
        f"<{logical_id(raw, 'AWS::SNS::Topic', f'DecisionAsync{name}Topic')}>"
        for name in ("Success", "Error")
    ]
    for topic in topics:
        assert allows(statements, Request("sns:Publish", topic), rendered)
    assert not allows(statements, Request("sns:Publish", "arn:aws:sns:eu-west-1:1:other"), rendered)
    written = {
        a
        for s in statements
        for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    }
    assert not any(a.startswith(("s3:Delete", "sns:Subscribe", "kms:Encrypt")) for a in written)


def test_an_invoker_may_send_requests_and_read_answers(raw):
    rendered = Rendered(raw)
    (policy,) = [
        p["Properties"]
        for p in resources_of(raw, "AWS::IAM::Policy")
        if p["Properties"].get("Roles") == ["batch-caller"]
    ]
    statements = policy["PolicyDocument"]["Statement"]
    endpoint = logical_id(raw, "AWS::SageMaker::Endpoint", "DecisionAsync")
    assert allows(statements, Request("sagemaker:InvokeEndpointAsync", f"<{endpoint}>"), rendered)
    assert allows(statements, Request("s3:PutObject", f"{BUCKET}/async/input/r.json"), rendered)
    assert allows(statements, Request("s3:GetObject", f"{BUCKET}/async/output/r.out"), rendered)
    assert not allows(statements, Request("s3:PutObject", f"{BUCKET}/async/output/r"), rendered)
    assert not allows(statements, Request("s3:GetObject", f"{BUCKET}/models/x"), rendered)


# --- cdk-nag and cfn-lint ----------------------------------------------------------------------
def test_cdk_nag_finds_nothing_unacknowledged(assembly):
    report = json.loads((assembly / "validation-report.json").read_text())
    (nag,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []
    ours = [f for f in nag["suppressedViolations"] if "/DecisionAsync" in json.dumps(f)]
    assert ours and {re.sub(r"\[.*", "", f["ruleName"]) for f in ours} == {"AwsSolutions-IAM5"}
    assert all(len(f["reason"]) > 40 for f in ours)


def test_cfn_lint_reports_nothing(assembly):
    assert cfn_lint(assembly, ENDPOINTS) == {f"{ENDPOINTS}.template.json": []}


# --- batch transform on the CPU decision model ---------------------------------------------------
@pytest.mark.parametrize(
    ("action", "key", "allowed"),
    [
        ("s3:GetObject", "batch/job-1/input/day.jsonl", True),
        ("s3:PutObject", "batch/job-1/output/day.jsonl.out", True),
        ("s3:GetObject", "models/3f2a/model.tar.gz", True),
        ("s3:PutObject", "batch/job-1/input/day.jsonl", False),
        ("s3:PutObject", "models/3f2a/model.tar.gz", False),
        ("s3:GetObject", "async/input/req-1.json", False),
        ("s3:DeleteObject", "batch/job-1/output/day.jsonl.out", False),
    ],
)
def test_the_cpu_decision_model_reads_batch_inputs_and_writes_batch_outputs_only(
    raw, action, key, allowed
):
    rendered = Rendered(raw)
    role = logical_id(raw, "AWS::IAM::Role", "DecisionCpuExecutionRole")
    statements = rendered.statements_of_role(role)
    assert allows(statements, Request(action, f"{BUCKET}/{key}"), rendered) is allowed


# --- listing, conditioned on the prefix ----------------------------------------------------------
def roles_statements(raw: dict) -> dict[str, list[dict]]:
    """The CPU model's, the asynchronous endpoint's and the invoker's statements."""
    rendered = Rendered(raw)
    (invoker,) = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in resources_of(raw, "AWS::IAM::Policy")
        if p["Properties"].get("Roles") == ["batch-caller"]
    ]
    return {
        "cpu": rendered.statements_of_role(
            logical_id(raw, "AWS::IAM::Role", "DecisionCpuExecutionRole")
        ),
        "async": rendered.statements_of_role(execution_role(raw)),
        "invoker": invoker,
    }


@pytest.mark.parametrize(
    ("role", "prefix", "allowed"),
    [
        ("cpu", "batch/job-1/input/day.jsonl", True),
        ("cpu", "models/", False),
        ("cpu", "", False),
        ("async", "async/input/req-1.json", True),
        ("async", "async/output/", False),
        ("invoker", "async/output/req-1.json.out", True),
        ("invoker", "async/failure/req-1.json.out", True),
        ("invoker", "async/input/", False),
        ("invoker", "models/", False),
    ],
)
def test_listing_is_limited_to_the_prefixes_each_role_reads(raw, role, prefix, allowed):
    """CDK's prefix read grant lists the whole bucket (`s3:List*` on it, no condition): every
    key name of every release and job. Listing is what tells a missing object from a forbidden
    one, so each role may list what it reads, nothing else."""
    statements = roles_statements(raw)[role]
    rendered = Rendered(raw)
    listing = Request("s3:ListBucket", BUCKET, (("s3:prefix", prefix),))
    assert allows(statements, listing, rendered) is allowed
    # A listing without a prefix (the whole bucket) is refused to every one of them.
    assert not allows(statements, Request("s3:ListBucket", BUCKET), rendered)
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else []
        assert not any(a.startswith("s3:List") and a != "s3:ListBucket" for a in actions)


def test_its_adapter_works_on_a_request_for_the_hour_ops_submit_asks_for(template, raw):
    """Not the real-time 45 s and 50 s: a long `.jsonl` sent with `ops submit` would fail into
    async/failure/ though SageMaker gives it an hour. Its latency alarm has its own threshold."""
    from ops.cli import build_parser

    asked = build_parser().parse_args(["submit", "x.json"]).invocation_timeout_seconds
    (variant,) = async_config(template)["ProductionVariants"]
    model = raw["Resources"][variant["ModelName"]["Fn::GetAtt"][0]]["Properties"]
    environment = model["PrimaryContainer"]["Environment"]
    for variable in (
        "DECISION_SCORING_DEADLINE_S",
        "DECISION_JSONLINES_TIMEOUT_S",
        "DECISION_CHAT_DEADLINE_S",
    ):
        assert 3000 <= int(environment[variable]) < asked, variable
    latency = [
        alarm["Properties"]
        for alarm in raw["Resources"].values()
        if alarm["Type"] == "AWS::CloudWatch::Alarm"
        and alarm["Properties"].get("MetricName") == "ModelLatency"
        and "Async" in json.dumps(alarm["Properties"]["Dimensions"])
    ]
    assert latency, "no latency alarm on the asynchronous endpoint"
    (alarm,) = latency
    assert alarm["Threshold"] == int(environment["DECISION_SCORING_DEADLINE_S"]) * 1_000_000
