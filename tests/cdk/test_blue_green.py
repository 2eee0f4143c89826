"""Releases deploy blue/green: each endpoint's DeploymentConfig shifts traffic to the new fleet
in steps and rolls back on the endpoint's own 5XX and latency alarms, as the synthesized
template tells SageMaker."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from pydantic import ValidationError

from stacks.app import endpoint_stack
from stacks.config import AppConfig
from tests.support.cdk_templates import RELEASE_WITH_GPU, cdk_json_context, resources

NAMES = (
    "decision-models-text-generation",
    "decision-models-decision-cpu",
    "decision-models-decision-gpu",
    "decision-models-decision-async",
)


def release(**endpoints) -> AppConfig:
    context = {**RELEASE_WITH_GPU, "decisionAsyncEndpoint": {"enabled": True}, **endpoints}
    return AppConfig.from_context({**cdk_json_context(), **context})


def deployment_configs(config: AppConfig) -> tuple[dict[str, dict], Template]:
    """Each endpoint's DeploymentConfig by its name, and the template."""
    stack = endpoint_stack(cdk.App(context=cdk_json_context()), "Endpoints", config=config)
    template = Template.from_stack(stack)
    endpoints = resources(template, "AWS::SageMaker::Endpoint").values()
    return {
        e["Properties"]["EndpointName"]: e["Properties"].get("DeploymentConfig") for e in endpoints
    }, template


def alarms_on(template: Template, endpoint_name: str) -> dict[str, str]:
    """{metric or expression label: alarm name} of the alarms that watch the endpoint."""
    found = {}
    for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        if props.get("AlarmName", "").startswith(f"{endpoint_name}-"):
            found[props.get("MetricName") or "5XX less backpressure"] = props["AlarmName"]
    return found


@pytest.fixture(scope="module")
def defaults():
    return deployment_configs(release())


@pytest.mark.parametrize("name", NAMES)
def test_by_default_a_release_shifts_a_canary_and_rolls_back_on_the_alarms(defaults, name):
    configs, template = defaults
    deployment = configs[name]
    policy = deployment["BlueGreenUpdatePolicy"]
    assert policy["TrafficRoutingConfiguration"] == {
        "Type": "CANARY",
        "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": 10},
        "WaitIntervalInSeconds": 600,
    }
    assert policy["TerminationWaitInSeconds"] == 600
    rollback = [a["AlarmName"] for a in deployment["AutoRollbackConfiguration"]["Alarms"]]
    # The names are those of alarms the template holds on this endpoint: 5XX and latency.
    watching = alarms_on(template, name)
    assert sorted(rollback) == sorted(
        watching[key]
        for key in watching
        if key in ("Invocation5XXErrors", "5XX less backpressure", "ModelLatency")
    )
    assert len(rollback) == 2


def test_backpressure_rolls_nothing_back(defaults):
    configs, template = defaults
    rollback = configs["decision-models-decision-cpu"]["AutoRollbackConfiguration"]["Alarms"]
    assert not any("backpressure" in alarm["AlarmName"].lower() for alarm in rollback)
    assert len(alarms_on(template, "decision-models-decision-cpu")) == 2  # the named two


def test_linear_steps_and_no_rollback_as_configured():
    linear = {"trafficRouting": "LINEAR", "stepPercent": 25, "autoRollback": False}
    configs, _ = deployment_configs(
        release(
            textGenerationEndpoint={
                **RELEASE_WITH_GPU["textGenerationEndpoint"],
                "deployment": linear,
            }
        )
    )
    deployment = configs["decision-models-text-generation"]
    assert deployment["BlueGreenUpdatePolicy"]["TrafficRoutingConfiguration"] == {
        "Type": "LINEAR",
        "LinearStepSize": {"Type": "CAPACITY_PERCENT", "Value": 25},
        "WaitIntervalInSeconds": 600,
    }
    assert "AutoRollbackConfiguration" not in deployment


def test_a_step_shorter_than_the_alarms_evaluation_is_refused_naming_the_keys():
    with pytest.raises(ValidationError) as raised:
        release(decisionAsyncEndpoint={"enabled": True, "deployment": {"waitIntervalSeconds": 300}})
    (error,) = raised.value.errors()
    assert error["loc"] == ("decisionAsyncEndpoint",)
    assert "deployment.waitIntervalSeconds (300)" in error["msg"]
    assert "alarms.evaluationPeriods x 5 min (600 s)" in error["msg"]
