"""The integration test for a real account (integ/integ_decision_release.py) cannot deploy here:
its snapshot is checked instead, and what it would deploy and assert is read from the templates.
"""

from __future__ import annotations

import json

import pytest

from integ.results import failures
from integ.snapshot import SNAPSHOT, read, synthesize


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> dict[str, dict]:
    return synthesize(tmp_path_factory.mktemp("integ"))


def test_the_checked_in_snapshot_is_what_the_integration_test_synthesizes(fresh):
    # After an intended change: python -m integ.snapshot, and review the diff.
    assert read(SNAPSHOT) == fresh


def resources(template: dict, resource_type: str) -> list[dict]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == resource_type]


def test_it_deploys_one_small_cpu_decision_endpoint(fresh):
    endpoints = fresh["DecisionModelsInteg-Endpoints.template.json"]
    assert [e["EndpointName"] for e in resources(endpoints, "AWS::SageMaker::Endpoint")] == [
        "decision-models-integ"
    ]
    (config,) = resources(endpoints, "AWS::SageMaker::EndpointConfig")
    assert [v["InstanceType"] for v in config["ProductionVariants"]] == ["ml.c6i.large"]
    assert fresh["integ.json"]["testCases"]["DecisionRelease/DefaultTest"]["stacks"] == [
        "DecisionModelsInteg-Endpoints",
        "DecisionModelsInteg-Checker",
    ]


def test_it_asserts_through_invoke_endpoint_and_the_checker(fresh):
    asserts = next(t for name, t in fresh.items() if "DeployAssert" in name)
    calls = {
        r["Type"]: r["Properties"]
        for r in asserts["Resources"].values()
        if r["Type"].startswith("Custom::DeployAssert")
    }
    invoke = calls["Custom::DeployAssert@SdkCallSageMakerRuntimeinvokeEndpoint"]
    assert invoke["api"] == "invokeEndpoint"
    assert invoke["parameters"]["EndpointName"] == '"decision-models-integ"'
    checker = calls["Custom::DeployAssert@SdkCallLambdainvoke"]
    expected = json.loads(checker["expected"])
    assert "probabilitySumIsOne" in json.dumps(expected) and "chatAnswered" in json.dumps(expected)
    assert len([o for o in asserts["Outputs"] if o.startswith("AssertionResults")]) == 2
    policy = resources(fresh["DecisionModelsInteg-Checker.template.json"], "AWS::IAM::Policy")
    assert "sagemaker:InvokeEndpoint" in json.dumps(policy)


def test_the_results_reader_fails_on_a_failed_or_missing_assertion():
    ok = {"S": {"AssertionResultsA": '{"status":"success"}', "Other": "x"}}
    bad = {
        "S": {
            "AssertionResultsA": '{"status":"success"}',
            "AssertionResultsB": '{"status":"fail","message":"Expected true"}',
        }
    }
    assert failures(ok) == (1, [])
    assert failures(bad) == (2, ["AssertionResultsB: Expected true"])
    assert failures({"S": {}}) == (0, [])
