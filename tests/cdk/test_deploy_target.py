"""`make deploy`: the non-interactive CI path (no approval prompt, outputs to a file)."""

from __future__ import annotations

from tests.support.make_dry_run import cdk_command


def deploy_command(*make_args: str) -> list[str]:
    return cdk_command("deploy", *make_args)


def test_make_deploy_deploys_every_stack_without_a_prompt_and_records_outputs():
    command = deploy_command()
    assert command[:3] == ["cdk", "deploy", "--all"]
    assert command[command.index("--require-approval") + 1] == "never"
    assert command[command.index("--outputs-file") + 1] == "cdk-outputs.json"


def test_make_deploy_passes_cdk_args_through():
    uri = "s3://bucket/models/ab/model.tar.gz"
    command = deploy_command(f"CDK_ARGS=-c modelDataUri={uri} --exclusively")
    assert command[-3:] == ["-c", f"modelDataUri={uri}", "--exclusively"]
