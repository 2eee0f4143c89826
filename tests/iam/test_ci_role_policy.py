"""The CI job's role (.github/ci-role-policy.json) against the calls its steps make: each `ops`
command the workflow runs is run here against botocore's Stubber, every API call it makes is
recorded as its IAM action (botocore's service models), and the policy grants exactly those,
each on the stateful stack's resources, plus the CDK bootstrap roles `cdk deploy` assumes."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from parliament import analyze_policy_string

from ops.cli import main
from stacks.stateful_stack import STACK_TAG
from tests.support.aws_stubs import stack_description, stubbed_client
from tests.support.iam_actions import operation_action

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / ".github" / "ci-role-policy.json"
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
DIGEST = "sha256:" + "e" * 64
IMAGE = f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-models@{DIGEST}"
OUTPUTS = {
    "ModelBuildProject": "model-proj",
    "CpuImageBuildProject": "cpu-proj",
    "GpuImageBuildProject": "gpu-proj",
}
EXPORTED = {
    "MODEL_URI": "s3://bucket/models/" + "a" * 64 + "/model.tar.gz",
    "MODEL_ARCHIVE_SHA256": "a" * 64,
    "MODEL_GGUF_SHA256": "b" * 64,
    "IMAGE_URI": IMAGE,
}


LOCAL_COMMANDS = ("build-inputs", "context")


def policy() -> dict:
    return json.loads(POLICY.read_text())


def granted() -> dict[str, list[dict]]:
    """Each action of the policy and the statements that grant it."""
    found: dict[str, list[dict]] = {}
    for statement in policy()["Statement"]:
        actions = statement["Action"]
        for action in [actions] if isinstance(actions, str) else actions:
            found.setdefault(action, []).append(statement)
    return found


def workflow_ops_commands() -> list[list[str]]:
    """The `ops` command lines of the deploy job (`python -m ops ...` and `make ops ARGS=`)."""
    text = WORKFLOW.read_text()
    direct = re.findall(r"python -m ops ([a-z-]+ [a-z-]+)", text)
    via_make = re.findall(r'make ops ARGS="([^"]+)"', text)
    found = [shlex.split(line) for line in [*direct, *via_make]]
    # These two read and write the checkout only (cdk.json, git): no AWS call to grant.
    return [command for command in found if command[0] not in LOCAL_COMMANDS]


class Recorder:
    """Stubbed clients by service, each recording the IAM action of every call it makes."""

    def __init__(self, stack) -> None:
        self.actions: set[str] = set()
        self.clients: dict = {}
        self.stack = stack

    def client(self, service: str):
        if service not in self.clients:
            client, stubber = self.stack.enter_context(stubbed_client(service))

            def record(model, **_):
                self.actions.add(operation_action(service, model.name))

            # Before the Stubber's own handler, which answers at before-call.
            client.meta.events.register("before-parameter-build", record)
            self.clients[service] = (client, stubber)
        return self.clients[service]


def answer_a_build(recorder: Recorder) -> None:
    cloudformation = recorder.client("cloudformation")[1]
    cloudformation.add_response(
        "describe_stacks", stack_description("DecisionModels-Stateful", OUTPUTS)
    )
    codebuild = recorder.client("codebuild")[1]
    codebuild.add_response("start_build", {"build": {"id": "b:1"}})
    exported = [{"name": name, "value": value} for name, value in EXPORTED.items()]
    build = {
        "id": "b:1",
        "currentPhase": "COMPLETED",
        "buildComplete": True,
        "buildStatus": "SUCCEEDED",
        "exportedEnvironmentVariables": exported,
    }
    codebuild.add_response("batch_get_builds", {"builds": [build]})


def answer_a_release(recorder: Recorder, images: int, tag_exists: bool) -> None:
    ecr = recorder.client("ecr")[1]
    for _ in range(images):
        manifest = {"imageId": {"imageDigest": DIGEST}, "imageManifest": "{}"}
        ecr.add_response("batch_get_image", {"images": [manifest], "failures": []})
        if tag_exists:
            ecr.add_client_error("put_image", "ImageTagAlreadyExistsException")
            detail = {"imageDigest": DIGEST, "imageTags": ["released-" + "e" * 64]}
            ecr.add_response("describe_images", {"imageDetails": [detail]})
        else:
            ecr.add_response("put_image", {"image": {}})


@pytest.mark.parametrize("tag_exists", [False, True], ids=["first run", "re-run"])
def test_the_policy_grants_exactly_what_the_workflows_ops_steps_call(tag_exists):
    import contextlib

    commands = workflow_ops_commands()
    assert [c[:2] for c in commands] == [
        ["build", "model"],
        ["build", "cpu-image"],
        ["build", "gpu-image"],
        ["mark-released", "${images[*]}"],
    ]
    called: set[str] = set()
    for command in commands:
        with contextlib.ExitStack() as stack:
            recorder = Recorder(stack)
            if command[0] == "build":
                answer_a_build(recorder)
                argv = [*command, "--stack", "DecisionModels-Stateful"]
            else:
                images = 2  # the CPU image's, and the GPU image's when it is built
                answer_a_release(recorder, images, tag_exists)
                argv = ["mark-released", *[IMAGE] * images]
            clients = lambda s: recorder.client(s)[0]  # noqa: B023, E731 - used in this turn
            code = main(argv, clients=clients, sleep=lambda s: None)
            assert code == 0, argv
            for _, stubber in recorder.clients.values():
                stubber.assert_no_pending_responses()
            called |= recorder.actions
    # ops' own calls, and the one `cdk deploy` makes with the job's session.
    needed = called | {"sts:AssumeRole"}
    allowed = set(granted())
    # DescribeImages is asked only on a re-run, to accept the tag an earlier run put there.
    assert allowed == needed | ({"ecr:DescribeImages"} if not tag_exists else set())


def test_every_statement_is_scoped_to_this_apps_resources():
    for statement in policy()["Statement"]:
        resource = statement["Resource"]
        assert ":ACCOUNT_ID:" in resource, resource
        if statement["Action"] == "codebuild:StartBuild" or "ecr:PutImage" in statement["Action"]:
            tag = statement["Condition"]["StringEquals"]
            assert tag == {f"aws:ResourceTag/{STACK_TAG}": "DecisionModels-Stateful"}
    (stack,) = [s for s in policy()["Statement"] if s["Action"] == "cloudformation:DescribeStacks"]
    assert stack["Resource"].endswith(":stack/DecisionModels-Stateful/*")


def test_parliament_finds_nothing_in_the_policy():
    concrete = (
        POLICY.read_text().replace("ACCOUNT_ID", "123456789012").replace("REGION", "eu-west-1")
    )
    findings = analyze_policy_string(concrete).findings
    assert [(f.issue, f.detail) for f in findings] == []


def test_the_deploy_page_points_to_the_policy():
    page = (ROOT / "docs" / "deploy.md").read_text()
    assert "(../.github/ci-role-policy.json)" in page


def test_a_tag_on_another_digest_is_an_error_not_a_release(capsys):
    import contextlib

    with contextlib.ExitStack() as stack:
        recorder = Recorder(stack)
        ecr = recorder.client("ecr")[1]
        manifest = {"imageId": {"imageDigest": DIGEST}, "imageManifest": "{}"}
        ecr.add_response("batch_get_image", {"images": [manifest], "failures": []})
        ecr.add_client_error("put_image", "ImageTagAlreadyExistsException")
        other = {"imageDigest": "sha256:" + "f" * 64, "imageTags": ["released-" + "e" * 64]}
        ecr.add_response("describe_images", {"imageDetails": [other]})
        code = main(["mark-released", IMAGE], clients=lambda s: recorder.client(s)[0])
    assert code != 0
    assert "not sha256:" in capsys.readouterr().err
