"""Integration test for a real account (integ-runner): one CPU decision endpoint on a built
release of the bundled Gemma 3 270M, checked through SageMaker's InvokeEndpoint, then destroyed.

Needs a release built by the stateful stack's projects (docs/deploy.md, "Integration test"):
  INTEG_MODEL_DATA_URI      from `python -m ops build model --env MODEL_SPEC=gemma3-270m`
  INTEG_DECISION_CPU_IMAGE  from `python -m ops build cpu-image`
Without them (the snapshot check in `make test`) fixed placeholders stand in, so the snapshot
stays stable; a real run overwrites the snapshot with the real values (do not commit that).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "container")]

import aws_cdk as cdk  # noqa: E402
from aws_cdk import aws_iam as iam  # noqa: E402
from aws_cdk import aws_lambda as lambda_  # noqa: E402
from aws_cdk.integ_tests_alpha import ExpectedResult, IntegTest  # noqa: E402
from decision_adapter.http.openapi import DECISION_EXAMPLE  # noqa: E402

from stacks.app import endpoint_stack  # noqa: E402
from stacks.config import AppConfig  # noqa: E402

PLACEHOLDER_MODEL = f"s3://integ-placeholder-artifacts/models/{'0' * 64}/model.tar.gz"
PLACEHOLDER_IMAGE = (
    f"123456789012.dkr.ecr.us-east-1.amazonaws.com/decision-models@sha256:{'0' * 64}"
)
ENDPOINT_NAME = "decision-models-integ"

# The OpenAPI document's example decision, sent to the real endpoint.
DECISION = DECISION_EXAMPLE
CHAT = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8}

# Runs in the account: sums what the endpoint returned (matchers cannot add numbers).
CHECKER = """
import json, os, boto3
runtime = boto3.client("sagemaker-runtime")
def invoke(body):
    answer = runtime.invoke_endpoint(EndpointName=os.environ["ENDPOINT_NAME"],
                                     ContentType="application/json", Body=json.dumps(body))
    return json.loads(answer["Body"].read())
def handler(event, context):
    result = invoke(event["decision"])["result"]
    chat = invoke(event["chat"])["choices"][0]["message"]["content"]
    return {"optionIds": result["option_ids"],
            "probabilitySumIsOne": abs(sum(result["probabilities"]) - 1) < 1e-6,
            "chatAnswered": bool(chat.strip())}
"""


CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]


def release_config() -> AppConfig:
    context = CONTEXT
    return AppConfig.from_context(
        {
            **context,
            "stackPrefix": "DecisionModelsInteg",
            "modelDataUri": os.environ.get("INTEG_MODEL_DATA_URI", PLACEHOLDER_MODEL),
            "decisionCpuImage": os.environ.get("INTEG_DECISION_CPU_IMAGE", PLACEHOLDER_IMAGE),
            "builds": {"modelSpec": "gemma3-270m"},
            "textGenerationEndpoint": {"enabled": False},
            "decisionGpuEndpoint": {"enabled": False},
            # The smallest current CPU type: 2 vCPUs, 4 GiB, ample for a 250 MB model.
            "decisionCpuEndpoint": {
                "endpointName": ENDPOINT_NAME,
                "instanceType": "ml.c6i.large",
                "nThreads": 2,
                "nCtx": 2048,
                # This pair has no measurement (stacks/measurements/): the test's few requests
                # one at a time need no queue, and its alarms watch nothing.
                "maxQueue": 2,
                "admissionWaitS": 10,
                "autoscaling": {"invocationsPerInstance": 60},
                "alarms": {"modelLatencyP90Ms": 10000},
            },
        }
    )


# cdk.json's feature flags too, as `cdk deploy --app` from the repository root passes them.
app = cdk.App(context=CONTEXT)
endpoints = endpoint_stack(app, "DecisionModelsInteg-Endpoints", config=release_config())

checks = cdk.Stack(app, "DecisionModelsInteg-Checker")
checks.node.add_dependency(endpoints)  # the checker calls the endpoint
checker = lambda_.Function(
    checks,
    "Checker",
    runtime=lambda_.Runtime.PYTHON_3_12,
    handler="index.handler",
    code=lambda_.Code.from_inline(CHECKER),
    timeout=cdk.Duration.seconds(120),
    environment={"ENDPOINT_NAME": ENDPOINT_NAME},
)
checker.add_to_role_policy(
    iam.PolicyStatement(
        actions=["sagemaker:InvokeEndpoint"],
        resources=[
            checks.format_arn(service="sagemaker", resource="endpoint", resource_name=ENDPOINT_NAME)
        ],
    )
)

integ = IntegTest(app, "DecisionRelease", test_cases=[endpoints, checks])
# The endpoint answers JSON through SageMaker (no retry: the stack is InService when this runs).
integ.assertions.aws_api_call(
    "SageMakerRuntime",
    "invokeEndpoint",
    {
        "EndpointName": ENDPOINT_NAME,
        "ContentType": "application/json",
        "Body": json.dumps(DECISION),
    },
).expect(ExpectedResult.object_like({"ContentType": "application/json"}))
# A decision whose probabilities sum to 1, over the declared options, and a chat answer.
integ.assertions.invoke_function(
    function_name=checker.function_name,
    payload=json.dumps({"decision": DECISION, "chat": CHAT}),
).expect(
    ExpectedResult.object_like(
        {
            "Payload": {
                "optionIds": [option["id"] for option in DECISION["decision"]["options"]],
                "probabilitySumIsOne": True,
                "chatAnswered": True,
            }
        }
    )
)

app.synth()
