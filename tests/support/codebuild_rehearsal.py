"""A local stand-in for one CodeBuild build: a buildspec's phases run in one bash, in order, with
the environment the synthesized template gives the project, against a moto server.

What it models of CodeBuild (buildspec version 0.2): `env.variables` as defaults that the
project's variables override; all commands of all phases in one shell instance (exports carry
over); the first failing command ends the build; `env.exported-variables` read after the last
phase; CODEBUILD_* and AWS_REGION set. What it does not: runtime-versions, finally blocks,
artifacts, reports (a buildspec using them is refused rather than rehearsed in part).
"""

from __future__ import annotations

import os
import shlex
import socket
import stat
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"
PHASES = ("install", "pre_build", "build", "post_build")
PHASE_KEYS = {"commands"}
VENV_BIN = Path(sys.executable).parent
DOCKER_STANDIN = Path(__file__).resolve().parent / "docker_standin.py"


# -- The moto server -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


@contextmanager
def moto_server():
    """A moto server on a free port; yields its endpoint URL (named `localhost`, see
    docs/development.md)."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="localhost", port=port, verbose=False)
    server.start()
    endpoint = f"http://localhost:{port}"
    # moto's backends live in this process, shared by every server it starts: begin empty.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
    try:
        yield endpoint
    finally:
        server.stop()


def aws_environment(endpoint_url: str) -> dict[str, str]:
    """Dummy credentials and the moto endpoint for every SDK and the CLI in a child process."""
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


# -- The template's values, resolved ---------------------------------------------------------


@dataclass
class Resolver:
    """CloudFormation intrinsics as a stack in REGION/ACCOUNT would resolve them, with the
    physical ids and attributes of the resources the rehearsal created in moto."""

    template: dict
    refs: dict[str, str]
    attributes: dict[tuple[str, str], str]

    def __call__(self, value):
        if isinstance(value, str):
            return value
        ((function, argument),) = value.items()
        if function == "Ref":
            pseudo = {
                "AWS::Region": REGION,
                "AWS::AccountId": ACCOUNT,
                "AWS::URLSuffix": "amazonaws.com",
                "AWS::Partition": "aws",
            }
            return pseudo.get(argument) or self.refs[argument]
        if function == "Fn::GetAtt":
            return self.attributes[tuple(argument)]
        if function == "Fn::Join":
            separator, parts = argument
            return separator.join(self(part) for part in parts)
        if function == "Fn::Select":
            index, items = argument
            return self(items)[int(index)] if isinstance(items, dict) else self(items[index])
        if function == "Fn::Split":
            separator, text = argument
            return self(text).split(separator)
        if function == "Fn::FindInMap":
            mapping, key, name = (self(part) for part in argument)
            return self.template["Mappings"][mapping][key][name]
        raise NotImplementedError(f"intrinsic {function} in a build project's environment")


def project_environment(template: dict, logical_id: str, resolve: Resolver) -> dict[str, str]:
    variables = template["Resources"][logical_id]["Properties"]["Environment"][
        "EnvironmentVariables"
    ]
    assert all(v.get("Type", "PLAINTEXT") == "PLAINTEXT" for v in variables)
    return {v["Name"]: resolve(v["Value"]) for v in variables}


# -- One build -------------------------------------------------------------------------------


@dataclass
class BuildResult:
    returncode: int
    output: str
    exported: dict[str, str]


def build_script(buildspec: dict, exports_file: Path) -> str:
    """The buildspec as one bash script; each failing command stops the build, naming itself."""
    assert buildspec.get("version") == 0.2
    unknown = set(buildspec.get("phases", {})) - set(PHASES)
    assert not unknown, f"phases the rehearsal does not model: {unknown}"
    # A command may end the shell itself (`exit 1`); the trap still names where it stopped.
    lines = [
        "trap '__rc=$?; [ $__rc -eq 0 ] || echo \"[rehearsal] phase $__phase, command $__n"
        " failed (exit $__rc)\" >&2' EXIT"
    ]
    for phase in PHASES:
        spec = buildspec.get("phases", {}).get(phase)
        if not spec:
            continue
        assert set(spec) <= PHASE_KEYS, f"{phase}: keys the rehearsal does not model: {set(spec)}"
        lines.append(f"__phase={phase}; echo '[rehearsal] phase {phase}'")
        for number, command in enumerate(spec["commands"], 1):
            lines += [f"__n={number}", command, "__rc=$?; [ $__rc -eq 0 ] || exit $__rc"]
    for name in buildspec.get("env", {}).get("exported-variables", []):
        lines.append(f'printf "%s=%s\\n" {name} "${{{name}-}}" >> {shlex.quote(str(exports_file))}')
    return "\n".join(lines) + "\n"


def run_build(
    buildspec_path: str,
    *,
    source: Path,
    project_variables: dict[str, str],
    extra_environment: dict[str, str],
    path_prefix: list[Path] = (),
    timeout: float = 110,
) -> BuildResult:
    """Run `buildspec_path` (relative to `source`) as CodeBuild would, in `source`."""
    buildspec = yaml.safe_load((source / buildspec_path).read_text())
    exports = source.parent / f"{source.name}.exported"
    exports.unlink(missing_ok=True)
    defaults = {k: str(v) for k, v in buildspec.get("env", {}).get("variables", {}).items()}
    assert buildspec.get("env", {}).get("shell", "bash") == "bash"
    environment = {
        # Nothing from the test process leaks in (no PYTHONPATH to the checkout).
        "PATH": os.pathsep.join([*map(str, path_prefix), str(VENV_BIN), "/usr/bin", "/bin"]),
        "HOME": str(source.parent),
        "LANG": "C.UTF-8",
        "CODEBUILD_BUILD_NUMBER": "1",
        "CODEBUILD_BUILD_ID": "rehearsal:00000000-0000-0000-0000-000000000001",
        "CODEBUILD_SRC_DIR": str(source),
        # Offline: the install phase may only find its pins already installed.
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        **defaults,
        **project_variables,
        **extra_environment,
    }
    completed = subprocess.run(
        ["bash", "-c", build_script(buildspec, exports)],
        cwd=source,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    exported = {}
    if exports.exists():
        for line in exports.read_text().splitlines():
            name, _, value = line.partition("=")
            exported[name] = value
    return BuildResult(completed.returncode, completed.stdout + completed.stderr, exported)


def docker_standin_bin(directory: Path) -> Path:
    """`directory`/docker runs the checking stand-in (tests/support/docker_standin.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    docker = directory / "docker"
    docker.write_text(f'#!/bin/sh\nexec {sys.executable} {DOCKER_STANDIN} "$@"\n')
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    return directory
