"""The deploy steps as written (README and docs/deploy.md): every command runs in the project's
virtual environment (through `make` or a `.venv/bin/` path, never the system interpreter or an
unpinned CDK), the endpoint quotas docs/deploy.md lists are those the synthesized templates
need, and the GPU step's command line switches the GPU endpoint on. The deploy rehearsal
(tests/deploy/test_rehearsal.py) runs the steps themselves against moto."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from stacks.config import AppConfig
from tests.support.cdk_templates import (
    CPU_IMAGE,
    ENDPOINTS,
    GPU_IMAGE,
    MODEL,
    RELEASE,
    RELEASE_WITH_GPU,
    ROOT,
    context_commands,
    synthesize,
)
from tests.support.make_dry_run import cdk_command, printed_lines
from tests.support.readme_steps import (
    DEPLOY,
    DEPLOY_PAGE,
    DOCS,
    FIRST_DEPLOYMENT,
    README,
    block_with,
    commands,
    section,
    sh_blocks,
)

# Every section that tells a user which commands to run on AWS, and the page it is on.
DEPLOY_SECTIONS = (
    (README, DEPLOY),
    (DOCS / "operate.md", "Operator CLI"),
    (DEPLOY_PAGE, FIRST_DEPLOYMENT),
    (DEPLOY_PAGE, "Integration test (real account)"),
)
# Programs that would run outside the venv: the system interpreter, pip, an unpinned CDK CLI.
OUTSIDE_THE_VENV = {"python", "python3", "pip", "pip3", "npx", "cdk"}
_QUOTA_ROW = re.compile(r"^\s*\|\s*`(ml\.[a-z0-9.]+ for endpoint usage)`\s*\|\s*(\d+)\s*\|", re.M)


def programs(command: str) -> list[str]:
    """The programs a command line starts: the first word of the line and after each `|`,
    `;`, `&&` or `(`, variable assignments skipped (a substitution inside quotes is not
    looked into)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    started, at_start = [], True
    for token in lexer:
        if set(token) <= set("();<>|&"):
            at_start = True
        elif at_start and "=" not in token.split("/")[0]:
            started.append(token)
            at_start = False
    return started


@pytest.mark.parametrize(("page", "heading"), DEPLOY_SECTIONS)
def test_every_deploy_command_runs_in_the_virtual_environment(page, heading):
    blocks = sh_blocks(heading, page)
    assert blocks
    for block in blocks:
        for command in commands(block):
            outside = OUTSIDE_THE_VENV.intersection(programs(command))
            assert not outside, f"{heading}: `{command}` runs {outside} outside .venv"


def test_the_check_catches_a_command_outside_the_venv():
    assert programs("npx cdk deploy X") == ["npx"]
    assert programs("FOO=1 python -m ops status") == ["python"]
    assert programs('code=$(aws service-quotas list --query "x")') == ["aws"]
    assert programs(".venv/bin/python -m ops build model") == [".venv/bin/python"]


def test_the_make_targets_use_the_venvs_python_and_the_pinned_cdk():
    assert printed_lines("ops", "ARGS=status --endpoint e")[-1] == (
        ".venv/bin/python -m ops status --endpoint e"
    )
    for target in ("bootstrap", "deploy", "destroy"):
        (line,) = [line for line in printed_lines(target) if "npx --no-install cdk" in line]
        # cdk.json's `python3 app.py` then finds the venv's interpreter first.
        assert line.startswith(f'PATH="{ROOT}/.venv/bin:$PATH" ')
    assert cdk_command("destroy", "STACKS=X")[:4] == ["cdk", "destroy", "X", "--force"]
    assert cdk_command("bootstrap")[:2] == ["cdk", "bootstrap"]


# --- endpoint quotas ---------------------------------------------------------------------------
def endpoint_quotas(template: dict) -> Counter:
    """Instances per type "for endpoint usage" at each endpoint's maximum capacity: its
    scalable target's MaxCapacity, else its initial count; every type of a pool may have to
    hold all of them (the pool falls back type by type)."""
    resources = template["Resources"]
    needed = Counter()
    for endpoint_id, endpoint in resources.items():
        if endpoint["Type"] != "AWS::SageMaker::Endpoint":
            continue
        config_id = endpoint["Properties"]["EndpointConfigName"]["Fn::GetAtt"][0]
        (variant,) = resources[config_id]["Properties"]["ProductionVariants"]
        targets = [
            r["Properties"]["MaxCapacity"]
            for r in resources.values()
            if r["Type"] == "AWS::ApplicationAutoScaling::ScalableTarget"
            and f'"{endpoint_id}"' in json.dumps(r["Properties"]["ResourceId"])
        ]
        count = max(targets) if targets else variant["InitialInstanceCount"]
        pool = [p["InstanceType"] for p in variant.get("InstancePools", [])]
        for instance_type in pool or [variant["InstanceType"]]:
            needed[f"{instance_type} for endpoint usage"] += count
    return needed


@pytest.fixture(scope="module")
def quotas(tmp_path_factory) -> dict[str, Counter]:
    def of(name: str, context: dict) -> Counter:
        assembly = synthesize(tmp_path_factory.mktemp(name), **context)
        return endpoint_quotas(json.loads((assembly / f"{ENDPOINTS}.template.json").read_text()))

    return {"default": of("default", RELEASE), "gpu": of("gpu", RELEASE_WITH_GPU)}


def readme_quotas() -> tuple[dict[str, int], dict[str, int]]:
    """docs/deploy.md's two quota tables: the default deploy's, and the GPU step's."""
    text = section(FIRST_DEPLOYMENT, DEPLOY_PAGE)
    default, gpu = text.split("### The GPU decision endpoint")
    as_dict = lambda part: {name: int(n) for name, n in _QUOTA_ROW.findall(part)}  # noqa: E731
    return as_dict(default), as_dict(gpu)


def test_readme_lists_every_endpoint_quota_the_default_deploy_needs(quotas):
    default, _ = readme_quotas()
    assert default == dict(quotas["default"])
    # The check README gives runs get-service-quota for each of them.
    check = block_with(FIRST_DEPLOYMENT, "--service-code sagemaker", DEPLOY_PAGE)
    (names,) = re.findall(r"^for quota in (.*); do$", check, re.M)
    assert shlex.split(names) == sorted(default)


def test_readme_lists_the_quotas_the_gpu_step_adds(quotas):
    _, gpu = readme_quotas()
    added = quotas["gpu"] - quotas["default"]
    assert gpu == dict(added)
    assert set(gpu) == {
        f"{t} for endpoint usage" for t in AppConfig().decision_gpu_endpoint.instance_pool
    }


def test_the_first_deploy_needs_no_gpu_quota(quotas):
    assert not [q for q in quotas["default"] if q.startswith(("ml.g", "ml.p"))]


@pytest.mark.parametrize("order", [("3", "gpu", "4"), ("3", "4", "gpu")])
def test_the_gpu_step_and_step_4_keep_each_others_values_in_cdk_json(tmp_path, order):
    """The steps' `ops context` commands as ops receives them, on a copy of cdk.json: the GPU
    step switches its endpoint on (with its image, to be measured) and leaves the CPU endpoint
    as it was; step 4 unsets only what step 3 set. Either order ends with both."""
    from ops.context import update

    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    release = {"MODEL_URI": MODEL, "CPU_IMAGE_URI": CPU_IMAGE, "GPU_IMAGE_URI": GPU_IMAGE}
    blocks = {
        "3": block_with(DEPLOY, 'mark-released $CPU_IMAGE_URI"'),
        "4": block_with(DEPLOY, "ops ARGS='measure "),
        "gpu": block_with(FIRST_DEPLOYMENT, "$GPU_IMAGE_URI", DEPLOY_PAGE),
    }
    for step in order:
        (change,) = context_commands(blocks[step], **release)
        update(*change, path=tmp_path / "cdk.json")
    context = json.loads((tmp_path / "cdk.json").read_text())["context"]
    config = AppConfig.from_context({**context, "forDestroy": True})
    gpu, cpu = config.decision_gpu_endpoint, config.decision_cpu_endpoint
    assert gpu.enabled and gpu.measuring
    assert (config.model_data_uri, config.decision_gpu_image) == (MODEL, GPU_IMAGE)
    assert not cpu.measuring and not config.text_generation_endpoint.measuring
    # Every deploy after them reads this: no step passes `-c` values of its own.
    for block in blocks.values():
        assert "CDK_ARGS" not in block


def test_readme_says_where_the_operator_cli_runs():
    assert "make ops ARGS=" in section(DEPLOY)
    assert "make ops ARGS=" in section(FIRST_DEPLOYMENT, DEPLOY_PAGE)
    assert Path(ROOT / "Makefile").read_text().count("\nops:") == 1


# --- measuring the GPU pool type by type ---------------------------------------------------------
GPU_ENDPOINT = "decision-models-decision-gpu"


def made(block: str, tmp_path: Path) -> list[list[str]]:
    """The `make` calls of a block that bash runs as pasted (its loop and quoting), each
    call's arguments recorded instead of run; `git` does nothing."""
    record = tmp_path / "make-calls"
    stand_ins = (
        f"make() {{ printf '%s\\037' \"$@\" >> {record}; echo >> {record}; }}\ngit() {{ :; }}\n"
    )
    subprocess.run(["bash", "-euc", stand_ins + block], check=True, timeout=60)
    return [line.split("\x1f")[:-1] for line in record.read_text().splitlines()]


def gpu_variant(template: dict) -> tuple[tuple[str, ...], bool] | None:
    """The deployed GPU endpoint's instance types and whether its variant is an autoscaling
    target; None without the endpoint."""
    resources = template["Resources"]
    for endpoint_id, endpoint in resources.items():
        if endpoint["Type"] != "AWS::SageMaker::Endpoint":
            continue
        if endpoint["Properties"].get("EndpointName") != GPU_ENDPOINT:
            continue
        config_id = endpoint["Properties"]["EndpointConfigName"]["Fn::GetAtt"][0]
        (variant,) = resources[config_id]["Properties"]["ProductionVariants"]
        pool = [p["InstanceType"] for p in variant.get("InstancePools", [])]
        scaled = any(
            r["Type"] == "AWS::ApplicationAutoScaling::ScalableTarget"
            and f'"{endpoint_id}"' in json.dumps(r["Properties"]["ResourceId"])
            for r in resources.values()
        )
        return tuple(pool or [variant["InstanceType"]]), scaled
    return None


def test_the_gpu_pool_is_measured_type_by_type_without_an_update_sagemaker_refuses(tmp_path):
    """docs/deploy.md's measuring block after steps 3 and the GPU step, run by bash: each
    `make deploy` synthesizes the cdk.json the steps wrote, and no deploy changes the instance
    type of a variant that is an autoscaling target (SageMaker refuses that update). Each pool
    type is measured once, while the endpoint runs on it, and the last deploy serves the whole
    pool, measured."""
    from ops.context import update

    path = tmp_path / "cdk.json"
    shutil.copy(ROOT / "cdk.json", path)
    release = {"MODEL_URI": MODEL, "CPU_IMAGE_URI": CPU_IMAGE, "GPU_IMAGE_URI": GPU_IMAGE}
    for block in (
        block_with(DEPLOY, 'mark-released $CPU_IMAGE_URI"'),
        block_with(FIRST_DEPLOYMENT, "$GPU_IMAGE_URI", DEPLOY_PAGE),
    ):
        for change in context_commands(block, **release):
            update(*change, path=path)

    def deploy(name: str) -> tuple[tuple[str, ...], bool] | None:
        # No GPU measurement is committed: clean-up's placeholder capacity keeps the types.
        context = {**json.loads(path.read_text())["context"], "forDestroy": True}
        assembly = synthesize(tmp_path / name, **context)
        return gpu_variant(json.loads((assembly / f"{ENDPOINTS}.template.json").read_text()))

    deployed = deploy("gpu-step")
    measured = []
    measuring = block_with(
        FIRST_DEPLOYMENT, "measure --endpoint decision-models-decision-gpu", DEPLOY_PAGE
    )
    for number, call in enumerate(made(measuring, tmp_path)):
        target, argument = call[0], call[1]
        if target == "deploy":
            assert argument == f"STACKS={ENDPOINTS}"
            new = deploy(f"deploy-{number}")
            if deployed and new and deployed[1]:
                assert new[0] == deployed[0], f"deploy {number}: {deployed[0]} to {new[0]}"
            deployed = new
            continue
        # make's recipe runs `ops $(ARGS)` through a shell: ops gets the words it splits.
        words = shlex.split(argument.removeprefix("ARGS="))
        if words[0] == "context":
            update(words[1], words[2:], path=path)
        else:
            assert words == ["measure", "--endpoint", GPU_ENDPOINT]
            assert deployed is not None
            (instance_type,) = deployed[0]
            measured.append(instance_type)
    pool = AppConfig().decision_gpu_endpoint.instance_pool
    assert sorted(measured) == sorted(pool)
    assert deployed == (tuple(pool), True)
    config = AppConfig.from_context(json.loads(path.read_text())["context"] | {"forDestroy": True})
    assert config.decision_gpu_endpoint.enabled and not config.decision_gpu_endpoint.measuring
