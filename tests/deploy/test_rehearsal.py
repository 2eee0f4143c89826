"""Deploy rehearsal against a moto server: README's deploy steps, run as README writes them
(`make bootstrap`, `make deploy ...`, `make ops ARGS=...`, `make destroy ...`) from a shell where
no virtual environment is active and `python3`/`python` are the system's: a step that reached
for the system interpreter (which lacks aws_cdk) fails here. README's prerequisites only: the
checkout's venv holds what requirements-deploy.txt installs (the serving packages cannot be
imported) and no C compiler is on the PATH. Between the stack deployments the
builds run as CodeBuild would run them on the deployed resources; afterwards what is left is
checked against what the templates retain.

Where moto 5.2.5 differs from AWS, the rehearsal adapts and says so (docs/development.md, "What
is rehearsed offline"): its checkout's cdk.json carries the rehearsal's context (an explicit image
repository name, since moto rejects the generated one; c5 instance types, since moto's
SageMaker knows no c6i, and a GPU pool of one g4dn type, since it knows no instance pools and
no g5, g6 or g6e; the bundled model's spec); its CDK CLI deploys with `--method=direct`
(moto's change-set execution drops stack outputs) and `--previous-parameters=false` (moto's
stack update loses the SSM-typed BootstrapVersion parameter's previous value); `ops status` is
given the endpoint's name from the stack outputs (moto ignores EndpointName); step 4's measures
get one answer for every request from moto (naming the release's model), so what they prove is
the files' places, their commit and the deploy that reads them. The GPU step runs before step 4
and again after it (switched off in between), so each order is rehearsed; the clean-up runs
from a second checkout that holds the committed cdk.json but no measurement. moto's
CloudFormation skips some resource types; the test pins that list so a change in either
direction is noticed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import urllib.request
import warnings
from pathlib import Path

import boto3
import pytest

from ops.measure import Limits
from stacks import capacity, text_generation_capacity
from tests.deploy.test_deploy_path import SERVING
from tests.support.codebuild_rehearsal import (
    ACCOUNT,
    REGION,
    Resolver,
    aws_environment,
    docker_standin_bin,
    moto_server,
    project_environment,
    run_build,
)
from tests.support.codebuild_view import build_projects, staged_source
from tests.support.readme_steps import DEPLOY, DEPLOY_PAGE, FIRST_DEPLOYMENT, block_with, commands

pytestmark = [pytest.mark.rehearsal, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
CDK = ROOT / "node_modules/.bin/cdk"
STATEFUL, ENDPOINTS = "DecisionModels-Stateful", "DecisionModels-Endpoints"
REPOSITORY = "decision-models"
MODEL_SPEC = "gemma3-270m"  # the bundled model, which the rehearsal's model build packages
# What this rehearsal changes in cdk.json's configuration, each for a reason in the docstring.
REHEARSAL_CONTEXT = {
    "imageRepositoryName": REPOSITORY,
    "builds": {"modelSpec": MODEL_SPEC},
    "textGenerationEndpoint": {"instanceType": "ml.c5.2xlarge"},
    # No measurement of the small model on it until step 4 writes one: step 3 switches the
    # endpoints to be measured in cdk.json, as README's "Deploy to AWS" does.
    "decisionCpuEndpoint": {"instanceType": "ml.c5.2xlarge"},
    "decisionGpuEndpoint": {"enabled": False, "instancePool": ["ml.g4dn.2xlarge"]},
}
# Resource types moto's CloudFormation does not implement: created by AWS, skipped by moto.
SKIPPED_BY_MOTO = {
    "AWS::CDK::Metadata",
    "AWS::S3::BucketPolicy",
    "AWS::CodeBuild::Project",
    "AWS::ApplicationAutoScaling::ScalableTarget",
    "AWS::ApplicationAutoScaling::ScalingPolicy",
    "AWS::CloudWatch::Alarm",
}
SYSTEM_PYTHON_USED = 97
# The rehearsal's CDK CLI: the pinned one, each deploy direct (see the docstring).
CDK_STANDIN = """#!/bin/sh
if [ "$1" = deploy ]; then set -- "$@" --method=direct --previous-parameters=false; fi
exec {cdk} "$@"
"""
COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "clang++", "cmake", "nvcc")
NO_COMPILER = """#!/bin/sh
echo "compiler used: $0 $*" >&2
exit 98
"""
# Stands for the system interpreter: it has no aws_cdk, and no step may reach it.
NO_SYSTEM_PYTHON = f"""#!/bin/sh
echo "system python used: $0 $*" >&2
exit {SYSTEM_PYTHON_USED}
"""


def jsii_package_cache() -> str:
    """Where jsii keeps this user's unpacked packages: the variable, else its default root."""
    if root := os.environ.get("JSII_RUNTIME_PACKAGE_CACHE_ROOT"):
        return root
    if sys.platform == "darwin":
        return str(Path.home() / "Library/Caches/com.amazonaws.jsii/package-cache")
    return str(Path.home() / ".cache/aws/jsii/package-cache")


def executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def checkout(tmp_path: Path, context: dict | None = None, name: str = "checkout") -> Path:
    """The repository as a user's checkout with the rehearsal's cdk.json (or `context`): every
    file linked, cdk.out and cdk-outputs.json its own, and the pinned CDK CLI behind the
    standin above."""
    work = tmp_path / name
    work.mkdir()
    own = {".git", "cdk.json", "node_modules", "cdk.out", "cdk-outputs.json", "__pycache__"}
    # Copied: step 4 writes and commits a measurement under stacks/, and the app must read it
    # there (Python puts a linked script's real folder first on its path).
    own |= {"stacks", "app.py"}
    own |= {".venv"}  # the deploy path's own (deploy_venv)
    for entry in ROOT.iterdir():
        if entry.name not in own:
            (work / entry.name).symlink_to(entry.resolve())
    shutil.copytree(ROOT / "stacks", work / "stacks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "app.py", work / "app.py")
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    cdk_json = json.loads((ROOT / "cdk.json").read_text())
    cdk_json["context"] = context or {**cdk_json["context"], **REHEARSAL_CONTEXT}
    (work / "cdk.json").write_text(json.dumps(cdk_json, indent=2))
    bin_dir = work / "node_modules/.bin"
    bin_dir.mkdir(parents=True)
    executable(bin_dir / "cdk", CDK_STANDIN.format(cdk=CDK))
    (work / "node_modules/.package-lock.json").write_text("{}")  # `npm ci` has run
    deploy_venv(work / ".venv")
    return work


def deploy_venv(path: Path) -> None:
    """What the AWS steps' `make` leaves of requirements-deploy.txt alone: a venv that sees the
    repository venv's packages except the serving ones (importing one raises ImportError), its
    stamps saying the deploy requirements are installed (no registry is reached from here)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    (site,) = path.glob("lib/python3*/site-packages")
    blocked = f"import sys; sys.modules.update(dict.fromkeys({SERVING!r}))"
    (site / "deploy-only.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n{blocked}\n")
    for stamp in (".venv", ".deploy"):  # in this order: make compares their times
        (path / stamp).touch()


def shell_environment(tmp_path: Path, aws: dict[str, str]) -> dict[str, str]:
    """A fresh login's environment: no virtual environment on PATH or active, and `python3`
    and `python` the system's (standins that fail), plus the moto endpoint and credentials."""
    system_bin = tmp_path / "system-bin"
    system_bin.mkdir()
    for name in ("python", "python3", f"python3.{sys.version_info.minor}"):
        executable(system_bin / name, NO_SYSTEM_PYTHON)
    for name in COMPILERS:  # README lists none: no step may compile
        executable(system_bin / name, NO_COMPILER)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Operator\n\temail = operator@example.com\n")
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and p != venv_bin]
    path = [p for p in path if ".venv" not in Path(p).parts]
    return {
        "PATH": os.pathsep.join([str(system_bin), *path]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        # jsii's unpacked packages stay where the user's are: under the HOME above, the first
        # synthesis would unpack aws-cdk-lib again (about 10 CPU-seconds).
        "JSII_RUNTIME_PACKAGE_CACHE_ROOT": jsii_package_cache(),
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        # CDK's built-in template validation costs each synthesis about 11 CPU-seconds (its
        # engine loads in every new process) and changes nothing deployed; test_cdk_app runs
        # it on the whole app and asserts it finds nothing.
        "CDK_VALIDATION": "false",
        **aws,
    }


class Shell:
    """README's commands in bash, in the checkout, with that environment."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work, self.env = work, env

    def run(self, script: str, **variables: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=self.work,
            env={**self.env, **variables},
            capture_output=True,
            text=True,
            timeout=300,
        )

    def __call__(self, script: str, **variables: str) -> str:
        done = self.run(script, **variables)
        assert done.returncode == 0, f"{script}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return done.stdout + done.stderr

    def outputs(self) -> dict:
        return json.loads((self.work / "cdk-outputs.json").read_text())


def moto_answers(moto: str, body: str, requests: int = 1) -> None:
    """What moto's InvokeEndpoint answers from now on (each distinct request body takes the
    next queued result and keeps it): `body`, as JSON, for `requests` distinct bodies."""
    result = {"Body": body, "ContentType": "application/json"}
    result |= {"InvokedProductionVariant": "AllTraffic", "CustomAttributes": ""}
    results = [result] * requests
    request = urllib.request.Request(
        f"{moto}/moto-api/static/sagemaker/endpoint-results",
        data=json.dumps({"account_id": ACCOUNT, "region": REGION, "results": results}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=30).close()


def physical_ids(cloudformation, stack: str) -> dict[str, str]:
    resources = cloudformation.list_stack_resources(StackName=stack)["StackResourceSummaries"]
    return {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in resources
        if r.get("LogicalResourceId")
    }


def inventory(client) -> dict[str, set[str]]:
    """What exists in the account, by kind, as an operator would list it."""
    sagemaker, iam = client("sagemaker"), client("iam")
    return {
        "buckets": {b["Name"] for b in client("s3").list_buckets()["Buckets"]},
        "repositories": {
            r["repositoryName"] for r in client("ecr").describe_repositories()["repositories"]
        },
        "log groups": {
            g["logGroupName"] for g in client("logs").describe_log_groups()["logGroups"]
        },
        "roles": {r["RoleName"] for r in iam.list_roles()["Roles"]},
        "endpoints": {e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]},
        "endpoint configs": {
            c["EndpointConfigName"] for c in sagemaker.list_endpoint_configs()["EndpointConfigs"]
        },
        "models": {m["ModelName"] for m in sagemaker.list_models()["Models"]},
    }


def build(tmp_path: Path, outdir: Path, aws: dict[str, str], cloudformation, client) -> dict:
    """README's step 2, as CodeBuild would run each buildspec on the deployed resources (moto's
    CloudFormation creates no CodeBuild project and moto's CodeBuild runs no buildspec);
    `ops build` itself is tested with botocore's Stubber. What the builds exported."""
    template = json.loads((outdir / f"{STATEFUL}.template.json").read_text())
    ids = physical_ids(cloudformation, STATEFUL)
    (repository_id,) = [
        logical_id
        for logical_id, r in template["Resources"].items()
        if r["Type"] == "AWS::ECR::Repository"
    ]
    repository_arn = client("ecr").describe_repositories(repositoryNames=[ids[repository_id]])[
        "repositories"
    ][0]["repositoryArn"]
    resolve = Resolver(template, ids, {(repository_id, "Arn"): repository_arn})
    produced = {}
    for project in build_projects(outdir, STATEFUL):
        source = Path(
            shutil.copytree(staged_source(outdir, STATEFUL, project), tmp_path / project.logical_id)
        )
        result = run_build(
            project.buildspec,
            source=source,
            project_variables=project_environment(template, project.logical_id, resolve),
            extra_environment={**aws, "DOCKER_STANDIN_LOG": str(tmp_path / "docker.jsonl")},
            path_prefix=[docker_standin_bin(tmp_path / "bin")],
        )
        assert result.returncode == 0, result.output[-4000:]
        gpu = project.environment.get("DOCKERFILE") == "container/Dockerfile.gpu"
        produced.update(
            {
                ("GPU_" if gpu and k == "IMAGE_URI" else "") + k: v
                for k, v in result.exported.items()
            }
        )
    return produced


TEXT_OUTPUT = "TextGenerationEndpointName"
# What moto's InvokeEndpoint answers ops measure: the adapter's decision answer naming the
# release's model (the manifest's spec), timed by the adapter; then llama-server's chat
# completion under its alias, of the release's n-predict tokens, with its own timings.
DECISION_ANSWER = {
    "result": {
        "id": "measure",
        "model": {"manifest": {"spec": MODEL_SPEC}},
        "input_tokens": 40,
        "timing": {"state_cache": "miss", "total_ms": 180.0},
    }
}
CHAT_ANSWER = {
    "object": "chat.completion",
    "model": MODEL_SPEC,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "..."}}],
    "timings": {"prompt_n": 30, "prompt_ms": 150.0, "predicted_n": 256, "predicted_ms": 9000.0},
}


def sent(levels: list[int]) -> int:
    """The requests `ops measure` sends with its default limits at these levels: a warm-up,
    then each level's share of the run's requests, a whole number per client."""
    share = Limits().max_requests // len(levels)
    return 1 + sum(max(1, share // clients) * clients for clients in levels)


def endpoint_on(sagemaker, instance_type: str) -> str:
    """The one endpoint whose variant runs on `instance_type`."""
    (found,) = [
        name
        for name in endpoints_now(sagemaker)
        if instance_type
        in {
            variant.get("InstanceType")
            for variant in sagemaker.describe_endpoint_config(
                EndpointConfigName=sagemaker.describe_endpoint(EndpointName=name)[
                    "EndpointConfigName"
                ]
            )["ProductionVariants"]
        }
    ]
    return found


def endpoints_now(sagemaker) -> set[str]:
    return {e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]}


def deployed_model(sagemaker, cloudformation, logical_prefix: str) -> dict[str, str]:
    """The environment of the model the endpoint stack holds now (moto's update replaces it,
    records its ARN as the physical id and leaves the endpoint config naming the old one,
    where AWS would replace the config and update the endpoint)."""
    (model_name,) = [
        physical.rsplit("/", 1)[-1]
        for logical, physical in physical_ids(cloudformation, ENDPOINTS).items()
        if logical.startswith(logical_prefix)
    ]
    return sagemaker.describe_model(ModelName=model_name)["PrimaryContainer"]["Environment"]


def deployed_environment(work: Path, logical_prefix: str) -> dict[str, str]:
    """A model's environment in the endpoint template the last deploy sent."""
    template = json.loads((work / "cdk.out" / f"{ENDPOINTS}.template.json").read_text())
    (environment,) = [
        r["Properties"]["PrimaryContainer"]["Environment"]
        for logical, r in template["Resources"].items()
        if r["Type"] == "AWS::SageMaker::Model" and logical.startswith(logical_prefix)
    ]
    return environment


def text_latency_threshold(work: Path) -> float:
    """The text-generation endpoint's latency alarm threshold in the deployed template."""
    template = json.loads((work / "cdk.out" / f"{ENDPOINTS}.template.json").read_text())
    (threshold,) = [
        r["Properties"]["Threshold"]
        for logical, r in template["Resources"].items()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        and logical.startswith("TextGeneration")
        and r["Properties"].get("MetricName") == "ModelLatency"
    ]
    return threshold


def test_readmes_deploy_steps_bootstrap_deploy_release_status_and_destroy(tmp_path):
    assert CDK.exists(), "the pinned CDK CLI is missing: run `npm ci` (make test does)"
    with warnings.catch_warnings(record=True) as caught, moto_server() as endpoint:
        warnings.simplefilter("always")
        aws = aws_environment(endpoint)
        session = boto3.Session(
            region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
        )

        def client(service: str):
            return session.client(service, endpoint_url=endpoint)

        cloudformation = client("cloudformation")
        work = checkout(tmp_path)
        shell = Shell(work, shell_environment(tmp_path, aws))

        # The shell really has no interpreter with aws_cdk outside the venv: the old deploy steps'
        # `npx cdk deploy` (cdk.json's `python3 app.py` on this PATH) fails at once.
        old_way = shell.run(f"npx --no-install cdk synth {STATEFUL} --no-notices")
        assert old_way.returncode != 0 and "system python used" in old_way.stderr

        # The deploy path's venv has no serving package, and the shell no compiler.
        for module in ("llama_cpp", "numpy"):
            assert shell.run(f".venv/bin/python -c 'import {module}'").returncode == 1
        assert shell.run("cc --version").returncode == 98

        # 0. Bootstrap, as README writes it; what exists then is not the app's.
        assert "bootstrapped" in shell(block_with(DEPLOY, "make bootstrap"))
        before = inventory(client)

        # 1. The stateful stack (no model yet: the app holds only this stack).
        printed = shell(block_with(DEPLOY, f"make deploy STACKS={STATEFUL}"))
        assert STATEFUL in shell.outputs(), printed[-3000:]
        stateful = shell.outputs()[STATEFUL]
        assert stateful["ImageRepositoryUri"] == (
            f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/{REPOSITORY}"
        )
        assert stateful["ModelArtifactsUri"] == f"s3://{stateful['ArtifactBucketName']}/models/"

        # 2. The builds on what it created; README's build commands are `make ops` ones.
        builds = commands(block_with(DEPLOY, "build model"))
        assert [c for c in builds if "ops" in c] == [
            "make ops ARGS='build model'",
            "make ops ARGS='build cpu-image'",
        ]
        produced = build(tmp_path, work / "cdk.out", aws, cloudformation, client)
        assert produced["MODEL_URI"].startswith(stateful["ModelArtifactsUri"])
        assert produced["IMAGE_URI"].startswith(stateful["ImageRepositoryUri"] + "@sha256:")
        release = {"MODEL_URI": produced["MODEL_URI"], "CPU_IMAGE_URI": produced["IMAGE_URI"]}

        # 3. The release, step by step as README writes it, with what the builds printed: the
        # release and its measuring switches go into cdk.json, committed, and the deploy reads it.
        release["GPU_IMAGE_URI"] = produced["GPU_IMAGE_URI"]
        mark, keep, commit, deploy, status = commands(
            block_with(DEPLOY, 'mark-released $CPU_IMAGE_URI"')
        )
        assert "marked released-" in shell(mark, **release)
        shell(keep, **release)
        shell(commit)
        assert "CDK_ARGS" not in deploy
        shell(deploy)
        outputs = shell.outputs()[ENDPOINTS]
        cpu_endpoint = outputs["DecisionCpuEndpointName"]
        sagemaker = client("sagemaker")
        config = sagemaker.describe_endpoint(EndpointName=cpu_endpoint)["EndpointConfigName"]
        variant = sagemaker.describe_endpoint_config(EndpointConfigName=config)[
            "ProductionVariants"
        ][0]
        container = sagemaker.describe_model(ModelName=variant["ModelName"])["PrimaryContainer"]
        assert container["Image"] == produced["IMAGE_URI"]
        assert container["ModelDataUrl"] == produced["MODEL_URI"]
        assert container["Environment"]["DECISION_MAX_QUEUE"] == "8"  # measuring
        digest = produced["IMAGE_URI"].rsplit("@sha256:", 1)[1]
        (image,) = client("ecr").describe_images(
            repositoryName=REPOSITORY, imageIds=[{"imageDigest": f"sha256:{digest}"}]
        )["imageDetails"]
        assert f"released-{digest}" in image["imageTags"]

        assert "--endpoint decision-models-decision-cpu" in status
        printed = shell(status.replace("decision-models-decision-cpu", cpu_endpoint))
        assert f"endpoint {cpu_endpoint}: InService" in printed
        assert "on ml.c5.2xlarge" in printed

        # The GPU step before step 4, as docs/deploy.md writes it (its image built above).
        gpu_step = commands(block_with(FIRST_DEPLOYMENT, "$GPU_IMAGE_URI", DEPLOY_PAGE))
        assert gpu_step[0] == "make ops ARGS='build gpu-image'"

        def gpu_step_run() -> None:
            """The step up to its deploy; the deployed template then holds the GPU endpoint."""
            for command in gpu_step[1:-1]:
                shell(command, **release)
            assert "DecisionGpuEndpointName" in shell.outputs()[ENDPOINTS]
            assert deployed_environment(work, "DecisionGpuModel")["DECISION_N_GPU_LAYERS"] == "-1"

        def gpu_status() -> str:
            """The step's status command, on the endpoint found by its instance type: moto's
            stack update names an endpoint it adds otherwise than the stack output says."""
            gpu_endpoint = endpoint_on(sagemaker, "ml.g4dn.2xlarge")
            assert "--endpoint decision-models-decision-gpu" in gpu_step[-1]
            shell(gpu_step[-1].replace("decision-models-decision-gpu", gpu_endpoint))
            return gpu_endpoint

        gpu_step_run()
        gpu_endpoint = gpu_status()
        assert (
            deployed_model(sagemaker, cloudformation, "DecisionCpuModel")["DECISION_MAX_QUEUE"]
            == "8"
        )  # the GPU step left the CPU endpoint as it was

        # Destroy has something to remove: roles, log groups and the release's SageMaker side.
        deployed = {kind: names - before[kind] for kind, names in inventory(client).items()}
        assert deployed["endpoints"] == {cpu_endpoint, gpu_endpoint, outputs[TEXT_OUTPUT]}
        assert deployed["roles"] and deployed["log groups"]

        # 4. Measure, then deploy again. moto's InvokeEndpoint answers each distinct body with
        # what it was given, here what the release's adapter says of its model (the manifest's
        # spec), then what llama-server answers a chat under its alias: the figures measure
        # moto, not a model; rehearsed are the files' places, their commit and the deploy that
        # takes the endpoints' capacity from them, with the GPU endpoint kept.
        measure_cpu, measure_text, unset, commit, redeploy = commands(
            block_with(DEPLOY, "ops ARGS='measure ")
        )
        moto_answers(endpoint, json.dumps(DECISION_ANSWER), requests=sent(Limits().levels()))
        printed = shell(measure_cpu.replace("decision-models-decision-cpu", cpu_endpoint))
        written = f"stacks/measurements/{MODEL_SPEC}/ml.c5.2xlarge.json"
        (measured,) = re.findall(r"^MEASUREMENT=(.+)$", printed, re.M)
        assert Path(measured).resolve() == (work / written).resolve()
        moto_answers(endpoint, json.dumps(CHAT_ANSWER), requests=sent([1, 2]))  # parallel 2
        text_endpoint = outputs[TEXT_OUTPUT]
        printed = shell(measure_text.replace("decision-models-text-generation", text_endpoint))
        text_written = f"stacks/measurements/{MODEL_SPEC}/ml.c5.2xlarge.text-generation.json"
        (measured,) = re.findall(r"^MEASUREMENT=(.+)$", printed, re.M)
        assert Path(measured).resolve() == (work / text_written).resolve()
        shell(unset)
        shell(commit)
        assert shell("git ls-files stacks/measurements").split() == [written, text_written]
        assert "CDK_ARGS" not in redeploy
        shell(redeploy)
        derived = capacity.derive(capacity.Measurement.read(work / written))

        def cpu_measured() -> None:
            """In what moto created and in the template the last deploy sent."""
            for environment in (
                deployed_model(sagemaker, cloudformation, "DecisionCpuModel"),
                deployed_environment(work, "DecisionCpuModel"),
            ):
                assert environment["DECISION_MAX_QUEUE"] == str(derived.max_queue)
                assert environment["DECISION_ADMISSION_WAIT_S"] == str(derived.admission_wait_s)

        cpu_measured()
        assert gpu_endpoint in endpoints_now(sagemaker)  # step 4 kept the GPU endpoint
        # The text-generation endpoint's alarm as the deployed template holds it (moto skips
        # alarms): the derivation from its committed measurement.
        text_capacity = text_generation_capacity.derive(
            text_generation_capacity.Measurement.read(
                work / text_written,
                model=MODEL_SPEC,
                instance_type="ml.c5.2xlarge",
                server_args=json.loads((work / text_written).read_text())["server_args"],
            )
        )
        assert text_latency_threshold(work) == text_capacity.model_latency_p90_ms * 1000

        # The GPU step after step 4, on a cdk.json where it has not run: its keys unset and
        # committed without a deploy (moto's stack update does not create again what an
        # earlier update deleted), then the step as written; the measured CPU endpoint keeps
        # its values and the GPU endpoint is there.
        shell(
            "make ops ARGS='context unset decisionGpuImage decisionGpuEndpoint.enabled "
            "decisionGpuEndpoint.measuring' && git commit -qam 'Before the GPU step'"
        )
        gpu_step_run()
        assert gpu_status() == gpu_endpoint
        cpu_measured()

        # Removing it, as README writes it, from a second checkout: the committed cdk.json
        # (the release and its switches) and no measurement. What is left is what the
        # templates retain.
        committed = json.loads(shell("git show HEAD:cdk.json"))["context"]
        clean = Shell(checkout(tmp_path, committed, "clean-up"), shell.env)
        assert not list((clean.work / "stacks").glob("measurements/*/*.json"))
        template = json.loads((work / "cdk.out" / f"{STATEFUL}.template.json").read_text())
        ids = physical_ids(cloudformation, STATEFUL)
        retained = {
            ids[logical_id]
            for logical_id, resource in template["Resources"].items()
            if resource.get("DeletionPolicy") == "Retain" and logical_id in ids
        }
        clean_up = block_with(DEPLOY, "make destroy")
        assert "CDK_ARGS" not in clean_up
        clean(clean_up)
        left = inventory(client)
        stacks = {
            s["StackName"]: s["StackStatus"]
            for s in cloudformation.list_stacks()["StackSummaries"]
            if s["StackName"] != "CDKToolkit"
        }
        assert stacks == {STATEFUL: "DELETE_COMPLETE", ENDPOINTS: "DELETE_COMPLETE"}
        new = {kind: names - before[kind] for kind, names in left.items()}
        assert {name for names in new.values() for name in names} == retained
        assert stateful["ArtifactBucketName"] in new["buckets"]
        assert new["repositories"] == {REPOSITORY}

    skipped = {
        str(w.message).split(" but ")[0].removeprefix("Tried to parse ")
        for w in caught
        if "not supported by moto's CloudFormation" in str(w.message)
    }
    assert skipped == SKIPPED_BY_MOTO
