"""The EndpointStack alone (no app around it): the config's default endpoints on one release."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from stacks.config import (
    DEFAULT_DLC_CPU_DIGEST,
    DecisionCpuEndpoint,
    DecisionGpuEndpoint,
    DlcImages,
    TextGenerationEndpoint,
)
from stacks.endpoint_stack import EndpointStack
from tests.support.cdk_templates import (
    CPU_IMAGE,
    ENDPOINTS,
    GIVEN_CAPACITY,
    GIVEN_TEXT_CAPACITY,
    GPU_IMAGE,
    MODEL,
    cdk_json_context,
    grants,
    one,
    resources,
    text,
)


def bare(**overrides) -> Template:
    props = {
        "model_data_uri": MODEL,
        "dlc": DlcImages(),
        "text_generation": TextGenerationEndpoint.model_validate(GIVEN_TEXT_CAPACITY),
        "release_model": "qwen3.5-4b-q4_k_m",
        "decision_cpu": DecisionCpuEndpoint.model_validate(GIVEN_CAPACITY),
        "decision_cpu_image": CPU_IMAGE,
        "decision_gpu": DecisionGpuEndpoint.model_validate({**GIVEN_CAPACITY, "enabled": True}),
        "decision_gpu_image": GPU_IMAGE,
    }
    app = cdk.App(context=cdk_json_context())
    return Template.from_stack(EndpointStack(app, ENDPOINTS, **{**props, **overrides}))


@pytest.fixture(scope="module")
def endpoints() -> Template:
    return bare()


def test_endpoint_stack_resource_counts(endpoints):
    for resource_type, count in {
        "AWS::SageMaker::Model": 3,
        "AWS::SageMaker::EndpointConfig": 3,
        "AWS::SageMaker::Endpoint": 3,
        "AWS::ApplicationAutoScaling::ScalableTarget": 3,
        "AWS::ApplicationAutoScaling::ScalingPolicy": 3,
        "AWS::CloudWatch::Alarm": 8,
        "AWS::IAM::Role": 3,
        "AWS::IAM::Policy": 3,
    }.items():
        endpoints.resource_count_is(resource_type, count)


def test_the_endpoint_stack_stands_alone(endpoints):
    # No exports from the stateful stack: a release can be deployed, rolled or removed freely.
    assert "Fn::ImportValue" not in json.dumps(endpoints.to_json())


def model(endpoints: Template, endpoint_name: str) -> dict:
    _, endpoint = one(endpoints, "AWS::SageMaker::Endpoint", {"EndpointName": endpoint_name})
    config_id = endpoint["Properties"]["EndpointConfigName"]["Fn::GetAtt"][0]
    config = resources(endpoints, "AWS::SageMaker::EndpointConfig")[config_id]["Properties"]
    (variant,) = config["ProductionVariants"]
    return {
        "variant": variant,
        "model": resources(endpoints, "AWS::SageMaker::Model")[
            variant["ModelName"]["Fn::GetAtt"][0]
        ]["Properties"],
    }


def test_every_model_is_isolated_and_every_image_pinned_by_digest(endpoints):
    for props in (m["Properties"] for m in resources(endpoints, "AWS::SageMaker::Model").values()):
        assert props["EnableNetworkIsolation"] is True
        assert props["PrimaryContainer"]["ModelDataUrl"] == MODEL
        assert re.search(r"@sha256:[0-9a-f]{64}$", text(props["PrimaryContainer"]["Image"]))
        assert "ModelName" not in props


def test_text_generation_endpoint_runs_the_dlc_with_llama_cpp_settings(endpoints):
    built = model(endpoints, "decision-models-text-generation")
    container = built["model"]["PrimaryContainer"]
    assert text(container["Image"]) == (
        "<DlcRepositoryAccountMap>.dkr.ecr.<AWS::Region>.<AWS::URLSuffix>/llama-cpp@"
        + DEFAULT_DLC_CPU_DIGEST
    )
    assert container["Environment"] == {
        "SM_LLAMA_CPP_CTX_SIZE": "8192",
        "SM_LLAMA_CPP_THREADS": "8",
        "SM_LLAMA_CPP_PARALLEL": "2",
        "SM_LLAMA_CPP_N_PREDICT": "256",
        # The name every answer gives its model: ops measure files the measurement under it.
        "SM_LLAMA_CPP_ALIAS": "qwen3.5-4b-q4_k_m",
    }
    assert built["variant"]["InstanceType"] == "ml.c6i.2xlarge"
    assert "InferenceAmiVersion" not in built["variant"]


HUB = {"repo": "unsloth/Qwen3.5-4B-GGUF", "file": "Qwen3.5-4B-Q4_K_M.gguf"}


def test_text_generation_from_hugging_face_downloads_instead_of_the_archive(endpoints):
    hub = bare(
        text_generation=TextGenerationEndpoint.model_validate(
            {"huggingFace": HUB, **GIVEN_TEXT_CAPACITY}
        )
    )
    built = model(hub, "decision-models-text-generation")
    container = built["model"]["PrimaryContainer"]
    assert container["Environment"] == {
        "SM_LLAMA_CPP_CTX_SIZE": "8192",
        "SM_LLAMA_CPP_THREADS": "8",
        "SM_LLAMA_CPP_PARALLEL": "2",
        "SM_LLAMA_CPP_N_PREDICT": "256",
        "SM_LLAMA_CPP_ALIAS": "Qwen3.5-4B-Q4_K_M",
        "SM_LLAMA_CPP_HF_REPO": "unsloth/Qwen3.5-4B-GGUF",
        "SM_LLAMA_CPP_HF_FILE": "Qwen3.5-4B-Q4_K_M.gguf",
    }
    # The DLC would serve a GGUF from /opt/ml/model first: no archive, and no right to read it.
    assert "ModelDataUrl" not in container
    assert ("s3:GetObject",) not in grants(hub, "TextGenerationExecutionRole")
    # The download needs egress; the decision endpoints stay isolated with their archive.
    assert built["model"]["EnableNetworkIsolation"] is False
    for name in ("decision-models-decision-cpu", "decision-models-decision-gpu"):
        decision = model(hub, name)["model"]
        assert decision["EnableNetworkIsolation"] is True
        assert decision["PrimaryContainer"]["ModelDataUrl"] == MODEL
    # Without the option (the shared template): the archive, isolated.
    default = model(endpoints, "decision-models-text-generation")["model"]
    assert default["PrimaryContainer"]["ModelDataUrl"] == MODEL
    assert default["EnableNetworkIsolation"] is True


def test_decision_cpu_endpoint_runs_our_image_on_a_fixed_cpu_type(endpoints):
    built = model(endpoints, "decision-models-decision-cpu")
    assert built["model"]["PrimaryContainer"]["Image"] == CPU_IMAGE
    assert built["model"]["PrimaryContainer"]["Environment"] == {
        "DECISION_METRICS_ENDPOINT": "decision-models-decision-cpu",
        "DECISION_N_THREADS": "8",
        "DECISION_N_CTX": "4096",
        "DECISION_N_GPU_LAYERS": "0",
        # One request at a time unless the release's `concurrency` says otherwise.
        "DECISION_MAX_SCORING_REQUESTS": "1",
        "DECISION_MAX_CHAT_STREAMS": "1",
        "DECISION_CHAT_SHARED_BATCHES": "false",
        "DECISION_MAX_QUEUE": str(GIVEN_CAPACITY["maxQueue"]),
        "DECISION_ADMISSION_WAIT_S": str(GIVEN_CAPACITY["admissionWaitS"]),
        # Chat holds the model a decision would have: capped, its deadline the admission wait.
        "DECISION_MAX_CHAT_TOKENS": "256",
        "DECISION_CHAT_DEADLINE_S": str(GIVEN_CAPACITY["admissionWaitS"]),
    }
    assert built["variant"]["InstanceType"] == "ml.c6i.2xlarge"
    assert "InstancePools" not in built["variant"]


def test_decision_gpu_endpoint_uses_the_ordered_pool_with_full_offload(endpoints):
    built = model(endpoints, "decision-models-decision-gpu")
    variant = built["variant"]
    assert built["model"]["PrimaryContainer"]["Image"] == GPU_IMAGE
    assert built["model"]["PrimaryContainer"]["Environment"]["DECISION_N_GPU_LAYERS"] == "-1"
    assert "InstanceType" not in variant
    assert variant["InstancePools"] == [
        {"InstanceType": "ml.g6e.xlarge", "Priority": 1},
        {"InstanceType": "ml.g6.2xlarge", "Priority": 2},
        {"InstanceType": "ml.g5.2xlarge", "Priority": 3},
        {"InstanceType": "ml.g4dn.2xlarge", "Priority": 4},
    ]
    assert variant["VariantInstanceProvisionTimeoutInSeconds"] == 900
    assert variant["InferenceAmiVersion"] == "al2023-ami-sagemaker-inference-gpu-4-1"
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}


def test_a_gpu_pool_of_one_type_is_that_instance_type():
    """One type deployed to be measured: no pool to fall back through, a plain variant."""
    one_type = DecisionGpuEndpoint.model_validate(
        {**GIVEN_CAPACITY, "enabled": True, "instancePool": ["ml.g6e.xlarge"]}
    )
    variant = model(bare(decision_gpu=one_type), "decision-models-decision-gpu")["variant"]
    assert variant["InstanceType"] == "ml.g6e.xlarge"
    assert "InstancePools" not in variant
    assert "VariantInstanceProvisionTimeoutInSeconds" not in variant
    assert variant["InferenceAmiVersion"] == "al2023-ami-sagemaker-inference-gpu-4-1"


def test_execution_roles_are_assumable_by_sagemaker_only(endpoints):
    for role in resources(endpoints, "AWS::IAM::Role").values():
        (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Service": "sagemaker.amazonaws.com"}
        assert "ManagedPolicyArns" not in role["Properties"]


def test_every_execution_role_reads_the_one_archive_and_pulls_its_own_image(endpoints):
    dlc = "arn:<AWS::Partition>:ecr:<AWS::Region>:<DlcRepositoryAccountMap>:repository/llama-cpp"
    ours = "arn:<AWS::Partition>:ecr:eu-west-1:123456789012:repository/decision-models"
    pull = ("ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")
    for prefix, repository in {
        "TextGeneration": dlc,
        "DecisionCpu": ours,
        "DecisionGpu": ours,
    }.items():
        granted = grants(endpoints, f"{prefix}ExecutionRole")
        archive = "arn:<AWS::Partition>:s3:::artifacts-bucket/models/3f2a/model.tar.gz"
        batch = "arn:<AWS::Partition>:s3:::artifacts-bucket/batch/*"
        running = prefix == "DecisionCpu"  # its model also runs batch transform jobs
        assert granted[("s3:GetObject",)] == ([batch, archive] if running else [archive])
        assert granted[pull] == [repository]
        # Plus the ECR token, logs and instance metrics (tests/iam/test_execution_roles.py checks
        # them against what SageMaker does with the role); the batch model also lists and
        # writes its prefix (evaluated in tests/cdk/test_async_endpoint.py).
        expected = {
            ("ecr:GetAuthorizationToken",),
            pull,
            ("s3:GetObject",),
            (
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:DescribeLogStreams",
                "logs:PutLogEvents",
            ),
            ("cloudwatch:PutMetricData",),
        }
        if running:
            expected |= {
                ("s3:ListBucket",),
                (
                    "s3:Abort*",
                    "s3:PutObject",
                    "s3:PutObjectLegalHold",
                    "s3:PutObjectRetention",
                    "s3:PutObjectTagging",
                    "s3:PutObjectVersionTagging",
                ),
            }
        assert set(granted) == expected


def endpoint_of(resource: dict) -> str:
    """The logical id of the endpoint a scaling target, policy or alarm watches."""
    found = re.findall(
        r'"Fn::GetAtt": \["(\w+Endpoint\w*)", "EndpointName"\]', json.dumps(resource)
    )
    assert len(set(found)) == 1, found
    return found[0]


def test_default_scaling_and_alarm_settings(endpoints):
    """Every endpoint gets what its settings say (given here; otherwise derived from
    measurement: tests/cdk/test_capacity.py, tests/cdk/test_text_generation_capacity.py)."""
    names = {
        logical_id: r["Properties"]["EndpointName"]
        for logical_id, r in resources(endpoints, "AWS::SageMaker::Endpoint").items()
    }
    given = (
        GIVEN_CAPACITY["autoscaling"]["invocationsPerInstance"],
        GIVEN_CAPACITY["alarms"]["modelLatencyP90Ms"],
    )
    expected = {
        "decision-models-text-generation": (
            GIVEN_TEXT_CAPACITY["autoscaling"]["invocationsPerInstance"],
            GIVEN_TEXT_CAPACITY["alarms"]["modelLatencyP90Ms"],
        ),
        "decision-models-decision-cpu": given,
        "decision-models-decision-gpu": given,
    }
    for target in resources(endpoints, "AWS::ApplicationAutoScaling::ScalableTarget").values():
        assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (1, 2)
    targets = {}
    for policy in resources(endpoints, "AWS::ApplicationAutoScaling::ScalingPolicy").values():
        tracking = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
        assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == (
            "SageMakerVariantInvocationsPerInstance"
        )
        target_id = policy["Properties"]["ScalingTargetId"]["Ref"]
        scalable = resources(endpoints, "AWS::ApplicationAutoScaling::ScalableTarget")[target_id]
        targets[names[endpoint_of(scalable)]] = tracking["TargetValue"]
    latency = {
        names[endpoint_of(a)]: a["Properties"]["Threshold"]
        for a in resources(endpoints, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "ModelLatency"
    }
    assert targets == {name: target for name, (target, _) in expected.items()}
    assert latency == {name: ms * 1000 for name, (_, ms) in expected.items()}
    for alarm in resources(endpoints, "AWS::CloudWatch::Alarm").values():
        if "Invocation5XXErrors" in json.dumps(alarm):
            assert alarm["Properties"]["Threshold"] == 1


def test_every_endpoint_scales_and_alarms(endpoints):
    endpoint_ids = set(resources(endpoints, "AWS::SageMaker::Endpoint"))
    scaled = {
        t["Properties"]["ResourceId"]["Fn::Join"][1][1]["Fn::GetAtt"][0]
        for t in resources(endpoints, "AWS::ApplicationAutoScaling::ScalableTarget").values()
    }
    assert scaled == endpoint_ids
    alarmed: dict[str, set[str]] = {}
    for alarm in resources(endpoints, "AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        metrics = [
            m["MetricStat"]["Metric"]["MetricName"]
            for m in props.get("Metrics", [])
            if "MetricStat" in m
        ]
        alarmed.setdefault(endpoint_of(alarm), set()).add(
            props.get("MetricName") or "+".join(sorted(metrics))
        )
    (text_generation,) = [e for e in endpoint_ids if e.startswith("TextGeneration")]
    assert alarmed == {
        e: {"Invocation5XXErrors", "ModelLatency"}
        if e == text_generation
        else {"Invocation5XXErrors+Overloaded", "ModelLatency", "Admitted+Overloaded"}
        for e in endpoint_ids
    }


def test_invoker_roles_get_invoke_on_every_endpoint():
    synthesized = bare(invoker_role_arns=["arn:aws:iam::123456789012:role/decision-client"])
    _, policy = one(synthesized, "AWS::IAM::Policy", {"Roles": ["decision-client"]})
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == [
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithResponseStream",
    ]
    granted = sorted(resource["Ref"] for resource in statement["Resource"])
    assert granted == sorted(resources(synthesized, "AWS::SageMaker::Endpoint"))
    assert len(granted) == 3


def test_switched_off_endpoints_are_absent():
    endpoint_stack = bare(
        text_generation=TextGenerationEndpoint(enabled=False),
        decision_gpu=DecisionGpuEndpoint(enabled=False),
        decision_gpu_image=None,
    )
    endpoint_stack.resource_count_is("AWS::SageMaker::Endpoint", 1)
    endpoint_stack.resource_count_is("AWS::CloudWatch::Alarm", 3)
    one(
        endpoint_stack, "AWS::SageMaker::Endpoint", {"EndpointName": "decision-models-decision-cpu"}
    )


@pytest.mark.parametrize("name", ["decision-models-decision-cpu", "decision-models-decision-gpu"])
def test_the_adapter_names_its_metrics_by_the_endpoint_its_alarms_watch(endpoints, name):
    environment = model(endpoints, name)["model"]["PrimaryContainer"]["Environment"]
    resources = endpoints.to_json()["Resources"]

    def endpoint_name(value):  # a literal, or the endpoint's GetAtt EndpointName
        if isinstance(value, dict):
            logical_id, attribute = value["Fn::GetAtt"]
            return resources[logical_id]["Properties"][attribute]
        return value

    watched = {
        endpoint_name(dimension["Value"])
        for alarm in endpoints.find_resources("AWS::CloudWatch::Alarm").values()
        for query in alarm["Properties"].get("Metrics", [])
        if query.get("MetricStat", {}).get("Metric", {}).get("Namespace") == "DecisionAdapter"
        for dimension in query["MetricStat"]["Metric"]["Dimensions"]
        if dimension["Name"] == "Endpoint"
    }
    assert environment["DECISION_METRICS_ENDPOINT"] == name
    assert name in watched


def test_every_endpoint_log_group_expires_and_exists_before_its_endpoint(endpoints):
    """SageMaker writes /aws/sagemaker/Endpoints/<name>; left to SageMaker it never expires.
    It is the group `ops status` reads, so a missing one there is not an endpoint yet to start."""
    from ops.startup_log import log_group

    groups = {
        logical_id: group
        for logical_id, group in resources(endpoints, "AWS::Logs::LogGroup").items()
    }
    named = {g["Properties"]["LogGroupName"]: (i, g) for i, g in groups.items()}
    for endpoint in resources(endpoints, "AWS::SageMaker::Endpoint").values():
        name = endpoint["Properties"]["EndpointName"]
        logical_id, group = named[log_group(name)]
        assert group["Properties"]["RetentionInDays"] == 30
        assert group["DeletionPolicy"] == "Delete"
        assert logical_id in endpoint["DependsOn"]
    assert len(groups) == len(resources(endpoints, "AWS::SageMaker::Endpoint"))
    week = TextGenerationEndpoint.model_validate({**GIVEN_TEXT_CAPACITY, "logRetentionDays": 7})
    (group,) = [
        g
        for g in resources(bare(text_generation=week), "AWS::Logs::LogGroup").values()
        if g["Properties"]["LogGroupName"].endswith("text-generation")
    ]
    assert group["Properties"]["RetentionInDays"] == 7
