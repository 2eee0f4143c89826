"""The whole CDK app, synthesized offline: cdk-nag and cfn-lint over both stacks, and app.py
itself as the CDK CLI runs it. Each construct and stack has its own bare-stack test file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cdk_templates import (
    CPU_IMAGE,
    ENDPOINTS,
    ENV,
    GIVEN_CAPACITY,
    GIVEN_TEXT_CAPACITY,
    MODEL,
    RELEASE,
    RELEASE_WITH_GPU,
    ROOT,
    STATEFUL,
    cfn_lint,
    listed,
    resources,
    run_app,
    synthesize,
    template,
)


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """The default configuration with a complete release and the GPU endpoint switched on:
    all three endpoints."""
    return synthesize(tmp_path_factory.mktemp("release"), **RELEASE_WITH_GPU)


@pytest.fixture(scope="module")
def disposable(tmp_path_factory) -> Path:
    """Artifacts not retained; the GPU decision endpoint off, the DLC endpoint downloading its
    model from Hugging Face (no archive, no network isolation)."""
    return synthesize(
        tmp_path_factory.mktemp("disposable"),
        retainArtifacts=False,
        modelDataUri=MODEL,
        decisionCpuImage=CPU_IMAGE,
        decisionCpuEndpoint=GIVEN_CAPACITY,
        textGenerationEndpoint={
            "huggingFace": {"repo": "unsloth/Qwen3.5-4B-GGUF", "file": "Qwen3.5-4B-Q4_K_M.gguf"},
            **GIVEN_TEXT_CAPACITY,
        },
        decisionGpuEndpoint={"enabled": False},
    )


def test_the_disposable_app_holds_the_hugging_face_endpoint(disposable):
    """So that cdk-nag and cfn-lint below see that configuration too."""
    models = resources(template(disposable, ENDPOINTS), "AWS::SageMaker::Model").values()
    downloading = [
        m
        for m in models
        if "SM_LLAMA_CPP_HF_REPO" in m["Properties"]["PrimaryContainer"].get("Environment", {})
    ]
    assert len(downloading) == 1
    assert "ModelDataUrl" not in downloading[0]["Properties"]["PrimaryContainer"]


# Actions IAM grants on "*" only; PutMetricData is scoped by its namespace condition instead.
NO_RESOURCE_LEVEL = ("ecr:GetAuthorizationToken", "cloudwatch:PutMetricData")


def test_wildcard_resources_only_where_no_resource_level_permission_exists(release):
    for stack in (STATEFUL, ENDPOINTS):
        for policy in resources(template(release, stack), "AWS::IAM::Policy").values():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                if statement["Resource"] == "*" or "*" in statement.get("Resource", []):
                    assert statement["Action"] in NO_RESOURCE_LEVEL, statement
                    if statement["Action"] == "cloudwatch:PutMetricData":
                        assert "cloudwatch:namespace" in statement["Condition"]["StringEquals"]
                actions = listed(statement["Action"])
                assert all(a != "*" and not a.endswith(":*") for a in actions), statement


@pytest.mark.parametrize("assembly", ["release", "disposable"])
def test_cdk_nag_finds_nothing_unacknowledged_and_every_acknowledgement_has_a_reason(
    assembly, request
):
    report = json.loads((request.getfixturevalue(assembly) / "validation-report.json").read_text())
    (nag,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success"
    for plugin in report["pluginReports"]:
        assert plugin["violations"] == [], plugin["violations"]
    acknowledged = nag["suppressedViolations"]
    assert acknowledged
    for finding in acknowledged:
        assert len(finding["reason"]) > 40, finding
    rules = {re.sub(r"\[.*", "", f["ruleName"]) for f in acknowledged}
    # Nothing about public access, TLS or encryption at rest is waved through.
    assert rules == {"AwsSolutions-IAM5", "AwsSolutions-CB4"}


def test_cfn_lint_reports_nothing_on_the_templates(release):
    findings = cfn_lint(release)
    assert set(findings) == {f"{STATEFUL}.template.json", f"{ENDPOINTS}.template.json"}
    assert findings == {name: [] for name in findings}


def test_cfn_lint_reports_no_errors_on_the_disposable_templates(disposable):
    findings = [f for found in cfn_lint(disposable).values() for f in found]
    # CDK's own auto-delete provider carries a redundant DependsOn (a W3005 warning); ours do not.
    assert all(f.startswith("W3005 'CustomS3AutoDeleteObjects") for f in findings), findings


# --- app.py, as `cdk synth` runs it ---------------------------------------------------------


def test_app_refuses_an_invalid_config_with_a_clear_message(tmp_path):
    result = run_app(
        tmp_path, **{**RELEASE, "decisionCpuImage": CPU_IMAGE.split("@")[0] + ":latest"}
    )
    assert result.returncode != 0
    assert "Invalid configuration" in result.stderr
    assert "aws ecr describe-images" in result.stderr
    assert not list(tmp_path.glob("*.template.json"))


def test_the_pinned_cli_synthesizes_offline_through_cdk_json_alone(tmp_path):
    """`cdk synth` with no credentials and no context. With `-c` context (a release's images
    and archive) the pinned CLI synthesizes through cdk.json in the deploy rehearsal
    (tests/deploy/test_rehearsal.py), so that is not repeated here."""
    pinned = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    env = {**ENV, "CDK_DISABLE_CLI_TELEMETRY": "true"}
    for credential in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        env.pop(credential, None)
    # cdk.json runs `python3 app.py`: make that this interpreter.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    cli = ROOT / "node_modules/.bin/cdk"
    version = subprocess.run(
        [cli, "--version"], env=env, capture_output=True, text=True, check=True
    )
    assert version.stdout.startswith(pinned)
    result = subprocess.run(
        [cli, "synth", "--quiet", "--no-notices", "-o", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # No build has run: the stateful stack only, ready for the first deploy.
    assert sorted(p.name for p in tmp_path.glob("*.template.json")) == [f"{STATEFUL}.template.json"]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["artifacts"][STATEFUL]["environment"] == "aws://unknown-account/unknown-region"
