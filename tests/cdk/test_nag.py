"""cdk-nag on our constructs: an acknowledgement names one finding and carries a reason."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks

from stacks.app import compose
from stacks.config import AppConfig
from stacks.constructs import nag
from tests.support.cdk_templates import ROOT, STATEFUL, cdk_json_context


def nag_report(outdir) -> dict:
    report = json.loads((outdir / "validation-report.json").read_text())
    (found,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    return found


def test_a_wildcard_resource_acknowledgement_covers_that_resource_only(tmp_path):
    app = cdk.App(outdir=str(tmp_path), context=cdk_json_context())
    stack = cdk.Stack(app, "Bare")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    bucket = s3.Bucket.from_bucket_name(stack, "Bucket", "some-bucket")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"))
    bucket.grant_put(role, "models/*")
    bucket.grant_delete(role, "scratch/*")
    reason = "Model archives live under models/, so the grant covers that prefix only."
    nag.acknowledge_wildcard_resource(role, bucket.arn_for_objects("models/*"), reason)
    with pytest.raises(Exception, match="ValidationFailed") as failed:
        app.synth()
    # The unacknowledged prefix still fails, under the name the acknowledgement renders.
    assert "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::some-bucket/scratch/*]" in str(
        failed.value
    )
    suppressed = nag_report(tmp_path)["suppressedViolations"]
    assert [(f["ruleName"], f["reason"]) for f in suppressed if "Resource::" in f["ruleName"]] == [
        ("AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::some-bucket/models/*]", reason)
    ]


def test_an_unacknowledged_cdk_nag_finding_stops_synthesis(tmp_path):
    context = cdk_json_context()
    app = cdk.App(outdir=str(tmp_path), context=context)
    stateful, _ = compose(app, config=AppConfig.from_context(context), repository_root=ROOT)
    s3.Bucket(stateful, "Careless")  # no access logs, plain HTTP allowed: AwsSolutions-S1, S10
    with pytest.raises(Exception, match="ValidationFailed") as failed:
        app.synth()
    message = str(failed.value)
    assert "Acknowledge with 'AwsSolutions::AwsSolutions-S1'" in message
    assert "Acknowledge with 'AwsSolutions::AwsSolutions-S10'" in message
    named = set(re.findall(r"^\s+(\S+/\S+) aws-cdk-lib", message, re.MULTILINE))
    assert named == {f"{STATEFUL}/Careless/Resource"}, message  # the rest stays compliant
    assert nag_report(tmp_path)["conclusion"] == "failure"
