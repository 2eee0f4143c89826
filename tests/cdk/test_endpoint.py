"""The SageMakerEndpoint construct, built alone in a bare stack."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Match, Template

from stacks.config import Alarms, Autoscaling
from stacks.constructs.artifacts import ContainerImage, ModelArchive
from stacks.constructs.endpoint import Instances, SageMakerEndpoint
from tests.support.cdk_templates import grants, one, policy_statements, text

DIGEST = "sha256:" + "ab" * 32
DLC_DIGEST = "sha256:" + "cd" * 32
IMAGE = f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-models@{DIGEST}"
MODEL = "s3://artifacts-bucket/models/3f2a/model.tar.gz"
POOL = ("ml.g6e.xlarge", "ml.g6.2xlarge", "ml.g5.2xlarge")
TOPIC = "arn:aws:sns:eu-west-1:123456789012:oncall"


@pytest.fixture(scope="module")
def template() -> Template:
    """A fixed-instance endpoint on our image and a pooled one on the DLC, plus an invoker."""
    stack = cdk.Stack(cdk.App(), "Bare")
    archive = ModelArchive.from_s3_uri(MODEL)
    cpu = SageMakerEndpoint(
        stack,
        "Cpu",
        endpoint_name="decision-cpu",
        image=ContainerImage.from_ecr_uri(IMAGE),
        model_archive=archive,
        environment={"DECISION_N_THREADS": "8", "DECISION_N_GPU_LAYERS": "0"},
        instances=Instances.fixed("ml.c6i.2xlarge"),
        initial_instance_count=1,
        autoscaling=Autoscaling(min_capacity=1, max_capacity=3, invocations_per_instance=40),
        alarms=Alarms(server_errors_per_5_minutes=5, model_latency_p90_ms=2500, topic_arn=TOPIC),
        container_startup_timeout=cdk.Duration.minutes(10),
        model_data_download_timeout=cdk.Duration.minutes(15),
        adapter_metrics=True,
    )
    SageMakerEndpoint(
        stack,
        "Gpu",
        endpoint_name="decision-gpu",
        image=ContainerImage.from_dlc(stack, repository_name="llama-cpp", digest=DLC_DIGEST),
        model_archive=archive,
        environment={"SM_LLAMA_CPP_N_GPU_LAYERS": "999"},
        instances=Instances.pool(POOL, provision_timeout=cdk.Duration.minutes(20)),
        initial_instance_count=2,
        autoscaling=Autoscaling(min_capacity=2, max_capacity=4),
        alarms=Alarms(),
        container_startup_timeout=cdk.Duration.minutes(10),
        model_data_download_timeout=cdk.Duration.minutes(10),
        inference_ami_version="al2023-ami-sagemaker-inference-gpu-4-1",
        least_outstanding_requests=True,
    )
    invoker = iam.Role(stack, "Invoker", assumed_by=iam.AccountRootPrincipal())
    cpu.grant_invoke(invoker)
    return Template.from_stack(stack)


def variant(template: Template, instance_key: str, value) -> dict:
    _, config = one(
        template,
        "AWS::SageMaker::EndpointConfig",
        {"ProductionVariants": [Match.object_like({instance_key: value})]},
    )
    return config["Properties"]["ProductionVariants"][0]


def test_each_endpoint_has_one_of_everything(template):
    for resource_type, count in {
        "AWS::SageMaker::Model": 2,
        "AWS::SageMaker::EndpointConfig": 2,
        "AWS::SageMaker::Endpoint": 2,
        "AWS::ApplicationAutoScaling::ScalableTarget": 2,
        "AWS::ApplicationAutoScaling::ScalingPolicy": 2,
        "AWS::CloudWatch::Alarm": 5,
        "AWS::IAM::Role": 3,  # two execution roles and the invoker
    }.items():
        template.resource_count_is(resource_type, count)


def test_models_are_network_isolated_and_pinned_by_digest(template):
    models = template.find_resources("AWS::SageMaker::Model")
    for model in models.values():
        props = model["Properties"]
        assert props["EnableNetworkIsolation"] is True
        assert props["PrimaryContainer"]["ModelDataUrl"] == MODEL
        assert "ModelName" not in props  # generated, so a new image or archive can replace it
        assert re.search(r'@sha256:[0-9a-f]{64}"', json.dumps(props["PrimaryContainer"]["Image"]))
    one(
        template,
        "AWS::SageMaker::Model",
        {
            "PrimaryContainer": {
                "Image": IMAGE,
                "ModelDataUrl": MODEL,
                "Environment": {"DECISION_N_THREADS": "8", "DECISION_N_GPU_LAYERS": "0"},
            }
        },
    )


def test_the_dlc_image_resolves_its_registry_account_from_the_dlc_map(template):
    _, model = one(
        template,
        "AWS::SageMaker::Model",
        {
            "PrimaryContainer": Match.object_like(
                {"Environment": {"SM_LLAMA_CPP_N_GPU_LAYERS": "999"}}
            )
        },
    )
    image = model["Properties"]["PrimaryContainer"]["Image"]
    parts = image["Fn::Join"][1]
    account = {"Fn::FindInMap": ["DlcRepositoryAccountMap", {"Ref": "AWS::Region"}, "account"]}
    assert account in parts
    assert parts[-1].endswith(f"/llama-cpp@{DLC_DIGEST}")
    accounts = template.to_json()["Mappings"]["DlcRepositoryAccountMap"]
    assert accounts["us-east-1"] == {"account": "763104351884"}


def test_models_wait_for_their_roles_policy(template):
    for logical_id, model in template.find_resources("AWS::SageMaker::Model").items():
        owner = logical_id.split("Model")[0]
        assert any(
            dep.startswith(f"{owner}ExecutionRoleDefaultPolicy") for dep in model["DependsOn"]
        )


def test_a_fixed_variant_names_its_instance_type_and_nothing_of_pools(template):
    fixed = variant(template, "InstanceType", "ml.c6i.2xlarge")
    assert fixed["InitialInstanceCount"] == 1
    assert fixed["ContainerStartupHealthCheckTimeoutInSeconds"] == 600
    assert fixed["ModelDataDownloadTimeoutInSeconds"] == 900
    for absent in (
        "InstancePools",
        "VariantInstanceProvisionTimeoutInSeconds",
        "RoutingConfig",
        "InferenceAmiVersion",
    ):
        assert absent not in fixed


def test_a_pooled_variant_ranks_its_types_and_names_no_instance_type(template):
    pooled = variant(template, "InstancePools", Match.any_value())
    assert "InstanceType" not in pooled  # the API rejects both together
    assert pooled["InstancePools"] == [
        {"InstanceType": t, "Priority": rank} for rank, t in enumerate(POOL, start=1)
    ]
    assert pooled["VariantInstanceProvisionTimeoutInSeconds"] == 1200
    assert pooled["InferenceAmiVersion"] == "al2023-ami-sagemaker-inference-gpu-4-1"
    assert pooled["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    assert pooled["InitialInstanceCount"] == 2


def test_configs_have_generated_names_and_endpoints_fixed_ones(template):
    for config in template.find_resources("AWS::SageMaker::EndpointConfig").values():
        assert "EndpointConfigName" not in config["Properties"]
        assert (
            config["Properties"]["ProductionVariants"][0]["ModelName"]["Fn::GetAtt"][1]
            == "ModelName"
        )
    names = {
        endpoint["Properties"]["EndpointName"]: endpoint["Properties"]["EndpointConfigName"]
        for endpoint in template.find_resources("AWS::SageMaker::Endpoint").values()
    }
    assert set(names) == {"decision-cpu", "decision-gpu"}
    assert all(ref["Fn::GetAtt"][1] == "EndpointConfigName" for ref in names.values())


def test_autoscaling_tracks_invocations_per_instance_within_configured_bounds(template):
    target_id, _ = one(
        template,
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {
            "MinCapacity": 1,
            "MaxCapacity": 3,
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
            "ServiceNamespace": "sagemaker",
            "ResourceId": {
                "Fn::Join": [
                    "",
                    [
                        "endpoint/",
                        {"Fn::GetAtt": [Match.string_like_regexp("^Cpu"), "EndpointName"]},
                        "/variant/AllTraffic",
                    ],
                ]
            },
            "RoleARN": {
                "Fn::Join": [
                    "",
                    Match.array_with(
                        [
                            Match.string_like_regexp(
                                "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint$"
                            )
                        ]
                    ),
                ]
            },
        },
    )
    one(
        template,
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {
            "ScalingTargetId": {"Ref": target_id},
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "PredefinedMetricSpecification": {
                    "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
                },
                "TargetValue": 40,
                "ScaleInCooldown": 300,
                "ScaleOutCooldown": 60,
            },
        },
    )
    one(
        template,
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {"MinCapacity": 2, "MaxCapacity": 4},
    )


def test_every_endpoint_alarms_on_5xx_errors_and_model_latency(template):
    alarms = [a["Properties"] for a in template.find_resources("AWS::CloudWatch::Alarm").values()]
    by_metric: dict[str, list[dict]] = {}
    for props in alarms:
        if "Metrics" in props:  # the adapter's metric math, below
            continue
        assert props["Namespace"] == "AWS/SageMaker"
        dimensions = {d["Name"]: d["Value"] for d in props["Dimensions"]}
        assert dimensions["VariantName"] == "AllTraffic"
        assert dimensions["EndpointName"]["Fn::GetAtt"][1] == "EndpointName"
        by_metric.setdefault(props["MetricName"], []).append(props)
    # The DLC endpoint's 5XX alarm is the plain metric; the adapter's subtracts backpressure.
    assert sorted(by_metric) == ["Invocation5XXErrors", "ModelLatency"]
    assert len(by_metric["Invocation5XXErrors"]) == 1 and len(by_metric["ModelLatency"]) == 2
    (dlc_errors,) = by_metric["Invocation5XXErrors"]
    assert (dlc_errors["Statistic"], dlc_errors["Threshold"]) == ("Sum", 1)
    assert "AlarmActions" not in dlc_errors
    cpu_latency = next(p for p in by_metric["ModelLatency"] if "AlarmActions" in p)
    assert cpu_latency["ExtendedStatistic"] == "p90"
    assert cpu_latency["Threshold"] == 2_500_000  # ModelLatency is in microseconds
    assert all("AlarmActions" not in p for p in by_metric["ModelLatency"] if p is not cpu_latency)
    # Errors page at the threshold itself, latency only above it; both over the configured
    # periods of 5 minutes, and an idle endpoint (no data) is healthy, not alarming.
    for props in by_metric["Invocation5XXErrors"]:
        assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    for props in by_metric["ModelLatency"]:
        assert props["ComparisonOperator"] == "GreaterThanThreshold"
    for props in (*by_metric["Invocation5XXErrors"], *by_metric["ModelLatency"]):
        assert (props["EvaluationPeriods"], props["Period"]) == (Alarms().evaluation_periods, 300)
        assert props["TreatMissingData"] == "notBreaching"


def math_alarm(template: Template, expression_part: str) -> tuple[dict, dict[str, dict]]:
    """(alarm properties, {metric id: MetricStat}) of the one metric-math alarm so written."""
    found = [
        a["Properties"]
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
        if any(
            expression_part in m.get("Expression", "") for m in a["Properties"].get("Metrics", [])
        )
    ]
    assert len(found) == 1, found
    stats = {m["Id"]: m["MetricStat"] for m in found[0]["Metrics"] if "MetricStat" in m}
    return found[0], stats


def adapter_metric(stat: dict, name: str) -> None:
    """The adapter's EMF contract: namespace DecisionAdapter, dimension Endpoint, 5 min sums."""
    metric = stat["Metric"]
    assert (metric["Namespace"], metric["MetricName"]) == ("DecisionAdapter", name)
    (dimension,) = metric["Dimensions"]
    assert dimension["Name"] == "Endpoint"
    assert dimension["Value"]["Fn::GetAtt"][1] == "EndpointName"
    assert (stat["Stat"], stat["Period"]) == ("Sum", 300)


def test_adapter_5xx_alarm_subtracts_its_backpressure_503s(template):
    props, stats = math_alarm(template, "errors")
    (expression,) = [m for m in props["Metrics"] if "Expression" in m]
    assert expression["Expression"] == "FILL(errors, 0) - FILL(overloaded, 0)"
    assert expression["ReturnData"] is True
    assert all(m.get("ReturnData") is False for m in props["Metrics"] if "MetricStat" in m)
    sagemaker = stats["errors"]["Metric"]
    assert (sagemaker["Namespace"], sagemaker["MetricName"]) == (
        "AWS/SageMaker",
        "Invocation5XXErrors",
    )
    assert stats["errors"]["Stat"] == "Sum"
    adapter_metric(stats["overloaded"], "Overloaded")
    assert props["Threshold"] == 5  # the configured serverErrorsPer5Minutes
    assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert props["EvaluationPeriods"] == Alarms().evaluation_periods
    assert props["TreatMissingData"] == "notBreaching"
    assert props["AlarmActions"] == [TOPIC]


def test_adapter_backpressure_has_an_alarm_of_its_own(template):
    props, stats = math_alarm(template, "admitted")
    (expression,) = [m for m in props["Metrics"] if "Expression" in m]
    assert expression["Expression"] == (
        "100 * FILL(overloaded, 0) / (FILL(admitted, 0) + FILL(overloaded, 0))"
    )
    adapter_metric(stats["overloaded"], "Overloaded")
    adapter_metric(stats["admitted"], "Admitted")
    assert props["Threshold"] == Alarms().overloaded_percent
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["EvaluationPeriods"] == Alarms().evaluation_periods
    assert props["TreatMissingData"] == "notBreaching"
    assert props["AlarmActions"] == [TOPIC]


def test_the_stacks_metric_names_are_the_adapters_contract():
    from stacks import adapter_metrics

    assert (adapter_metrics.NAMESPACE, adapter_metrics.ENDPOINT_DIMENSION) == (
        "DecisionAdapter",
        "Endpoint",
    )
    assert (adapter_metrics.OVERLOADED, adapter_metrics.ADMITTED) == ("Overloaded", "Admitted")
    assert (adapter_metrics.QUEUE_WAIT_MS, adapter_metrics.DECISION_LATENCY_MS) == (
        "QueueWaitMs",
        "DecisionLatencyMs",
    )
    assert adapter_metrics.KIND_DIMENSION == "Kind"
    assert adapter_metrics.KINDS == ("decision", "decisions", "systemone", "chat")


def test_execution_role_is_scoped_to_its_image_object_and_log_group(template):
    roles = template.find_resources("AWS::IAM::Role")
    cpu_role = next(r for k, r in roles.items() if k.startswith("CpuExecutionRole"))
    trust = cpu_role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"Service": "sagemaker.amazonaws.com"},
        }
    ]
    granted = grants(template, "CpuExecutionRole")
    assert granted == {
        ("ecr:GetAuthorizationToken",): ["*"],  # no resource-level permissions exist for it
        ("ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"): [
            "arn:<AWS::Partition>:ecr:eu-west-1:123456789012:repository/decision-models"
        ],
        ("s3:GetObject",): ["arn:<AWS::Partition>:s3:::artifacts-bucket/models/3f2a/model.tar.gz"],
        (
            "logs:CreateLogGroup",
            "logs:CreateLogStream",
            "logs:DescribeLogStreams",
            "logs:PutLogEvents",
        ): [
            "arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:/aws/sagemaker/Endpoints/decision-cpu",
            "arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:/aws/sagemaker/Endpoints/decision-cpu:*",
        ],
        # No resource-level permissions either: scoped by the namespace condition below.
        ("cloudwatch:PutMetricData",): ["*"],
    }
    (metrics,) = [
        s
        for s in policy_statements(template, "CpuExecutionRole")
        if s["Action"] == "cloudwatch:PutMetricData"
    ]
    assert metrics["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Endpoints"}
    }


def test_a_release_keeps_the_instance_counts_the_endpoint_scaled_to(template):
    """A new config without RetainAllVariantProperties (botocore: "The default is false")
    resets a scaled-out variant to its initial count, and wakes one scaled to zero."""
    for endpoint in template.find_resources("AWS::SageMaker::Endpoint").values():
        assert endpoint["Properties"]["RetainAllVariantProperties"] is True
        assert "ExcludeRetainedVariantProperties" not in endpoint["Properties"]


def test_dlc_pull_rights_name_the_regional_dlc_repository(template):
    pull = next(
        s
        for s in policy_statements(template, "GpuExecutionRole")
        if "ecr:BatchGetImage" in s["Action"]
    )
    assert text(pull["Resource"]) == (
        "arn:<AWS::Partition>:ecr:<AWS::Region>:<DlcRepositoryAccountMap>:repository/llama-cpp"
    )


def test_grant_invoke_allows_invoking_exactly_that_endpoint(template):
    (statement,) = policy_statements(template, "Invoker")
    assert statement["Action"] == [
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithResponseStream",
    ]
    assert statement["Resource"]["Ref"].startswith("CpuEndpoint")
