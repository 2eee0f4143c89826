"""Synthesizing the CDK app offline and reading its templates: shared by the CDK test files.

Synthesis is slow (jsii), so test files synthesize once per module (a module-scoped fixture).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
from aws_cdk.assertions import Template

from stacks.app import compose
from stacks.config import AppConfig
from tests.support.cfn_values import listed, text

ROOT = Path(__file__).resolve().parents[2]
CPU_IMAGE = f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-models@sha256:{'ab' * 32}"
GPU_IMAGE = f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-models@sha256:{'cd' * 32}"
MODEL = "s3://artifacts-bucket/models/3f2a/model.tar.gz"
# The four values synthesis derives from the measurement of a release's model on its instance
# type, given instead: no measurement exists for the default release (Qwen3.5-4B on
# ml.c6i.2xlarge and the GPU pool). Chosen for the tests, not measured.
GIVEN_CAPACITY = {
    "maxQueue": 4,
    "admissionWaitS": 8.0,
    "autoscaling": {"invocationsPerInstance": 20},
    "alarms": {"modelLatencyP90Ms": 15000},
}
# The text-generation endpoint's two derived values (stacks/text_generation_capacity.py), given.
GIVEN_TEXT_CAPACITY = {
    "autoscaling": {"invocationsPerInstance": 6},
    "alarms": {"modelLatencyP90Ms": 40000},
}
RELEASE = {
    "modelDataUri": MODEL,
    "decisionCpuImage": CPU_IMAGE,
    "decisionGpuImage": GPU_IMAGE,
    "textGenerationEndpoint": GIVEN_TEXT_CAPACITY,
    "decisionCpuEndpoint": GIVEN_CAPACITY,
    "decisionGpuEndpoint": GIVEN_CAPACITY,
}
# The GPU decision endpoint is off by default (its quotas): switched on, every endpoint is there.
RELEASE_WITH_GPU = {**RELEASE, "decisionGpuEndpoint": {**GIVEN_CAPACITY, "enabled": True}}
STATEFUL, ENDPOINTS = "DecisionModels-Stateful", "DecisionModels-Endpoints"
# Node 20 runs jsii fine; its end-of-life banner only clutters failure output.
ENV = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}


def context_commands(block: str, **variables: str) -> list[tuple[str, list[str]]]:
    """The `make ops ARGS="context ..."` commands of a deploy step's block as ops receives them:
    (action, items), the shell's variables given their values and ARGS split into words as
    make's recipe line splits it."""
    from tests.support.readme_steps import commands

    found = []
    for command in commands(block):
        for name, value in variables.items():
            command = command.replace(f"${name}", value)
        words = shlex.split(command)
        if words[:2] == ["make", "ops"] and words[2].startswith("ARGS=context "):
            _, action, *items = words[2].removeprefix("ARGS=").split()
            found.append((action, items))
    return found


def cdk_json_context() -> dict:
    return json.loads((ROOT / "cdk.json").read_text())["context"]


def synthesize(outdir: Path, **overrides) -> Path:
    """What `cdk synth` does with cdk.json plus `-c` overrides, in this process."""
    context = {**cdk_json_context(), **overrides}
    app = cdk.App(outdir=str(outdir), context=context)
    compose(app, config=AppConfig.from_context(context), repository_root=ROOT)
    app.synth()
    return outdir


def bare_stack() -> cdk.Stack:
    """An empty stack for one construct, in an app with cdk.json's feature flags."""
    return cdk.Stack(cdk.App(context=cdk_json_context()), "Bare")


def template(assembly: Path, stack: str) -> Template:
    return Template.from_json(json.loads((assembly / f"{stack}.template.json").read_text()))


def resources(template: Template, resource_type: str) -> dict[str, dict]:
    return template.find_resources(resource_type)


def one(template: Template, resource_type: str, props: dict | None = None) -> tuple[str, dict]:
    """(logical id, resource) of the only resource of that type (with those properties)."""
    found = template.find_resources(resource_type, {"Properties": props} if props else None)
    assert len(found) == 1, found
    return next(iter(found.items()))


def policy_statements(template: Template, role_prefix: str) -> list[dict]:
    """The statements of the one policy attached to the role whose logical id starts so."""
    found = [
        policy["Properties"]["PolicyDocument"]["Statement"]
        for policy in resources(template, "AWS::IAM::Policy").values()
        if any(role["Ref"].startswith(role_prefix) for role in policy["Properties"]["Roles"])
    ]
    assert len(found) == 1, role_prefix
    return found[0]


def grants(template: Template, role_prefix: str) -> dict[tuple[str, ...], list[str]]:
    """{sorted actions: sorted resources as text} for one role's policy."""
    return {
        tuple(sorted(listed(s["Action"]))): sorted(text(r) for r in listed(s["Resource"]))
        for s in policy_statements(template, role_prefix)
    }


def run_app(tmp_path: Path, **overrides) -> subprocess.CompletedProcess:
    """Run app.py the way the CDK CLI does: context in CDK_CONTEXT_JSON, output in CDK_OUTDIR."""
    env = {
        **ENV,
        "CDK_CONTEXT_JSON": json.dumps({**cdk_json_context(), **overrides}),
        "CDK_OUTDIR": str(tmp_path),
    }
    for credential in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        env.pop(credential, None)
    return subprocess.run(
        [sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def cfn_lint(assembly: Path, *stacks: str) -> dict[str, list[str]]:
    """cfn-lint's findings on each template of a cloud assembly (or of the `stacks` named), in
    three regions."""
    from cfnlint.api import lint

    return {
        path.name: [
            f"{m.rule.id} {m.message} ({m.linenumber})"
            for m in lint(path.read_text(), regions=["us-east-1", "eu-west-1", "eu-central-1"])
        ]
        for path in sorted(assembly.glob("*.template.json"))
        if not stacks or path.name.removesuffix(".template.json") in stacks
    }
