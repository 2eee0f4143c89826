"""`make deploy`: the non-interactive CI path (no approval prompt, outputs to a file)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def deploy_command(*make_args: str) -> list[str]:
    """The `cdk deploy` command line `make deploy` would run (make -n executes nothing)."""
    printed = subprocess.run(
        ["make", "-n", "-B", "deploy", *make_args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.replace("\\\n", " ")
    (line,) = [line for line in printed.splitlines() if " cdk deploy " in line]
    words = shlex.split(line)
    return words[words.index("cdk") :]


def test_make_deploy_deploys_every_stack_without_a_prompt_and_records_outputs():
    command = deploy_command()
    assert command[:3] == ["cdk", "deploy", "--all"]
    assert command[command.index("--require-approval") + 1] == "never"
    assert command[command.index("--outputs-file") + 1] == "cdk-outputs.json"


def test_make_deploy_passes_cdk_args_through():
    uri = "s3://bucket/models/ab/model.tar.gz"
    command = deploy_command(f"CDK_ARGS=-c modelDataUri={uri} --exclusively")
    assert command[-3:] == ["-c", f"modelDataUri={uri}", "--exclusively"]
