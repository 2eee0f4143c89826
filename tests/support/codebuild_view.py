"""What CodeBuild reads: the source zip CDK stages for a build project, and the paths that the
project's buildspec names inside that source (Dockerfiles: tests/support/dockerfile_stages.py).

Everything here reads the synthesized cloud assembly (templates and asset manifests), never the
repository checkout, so a file that CDK leaves out of the zip is missing here too.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.cfn_values import text


@dataclass(frozen=True)
class BuildProject:
    logical_id: str
    buildspec: str
    environment: dict  # name -> raw template value (a string or an intrinsic)
    source_location: str  # bucket/key with intrinsics written <X>

    @property
    def source_key(self) -> str:
        return self.source_location.split("/", 1)[1]


def build_projects(assembly: Path, stack: str) -> list[BuildProject]:
    template = json.loads((assembly / f"{stack}.template.json").read_text())
    return [
        BuildProject(
            logical_id=logical_id,
            buildspec=resource["Properties"]["Source"]["BuildSpec"],
            environment={
                variable["Name"]: variable["Value"]
                for variable in resource["Properties"]["Environment"]["EnvironmentVariables"]
            },
            source_location=text(resource["Properties"]["Source"]["Location"]),
        )
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::CodeBuild::Project"
    ]


def staged_source(assembly: Path, stack: str, project: BuildProject) -> Path:
    """The directory CDK zips and uploads to the key the project reads its source from."""
    manifest = json.loads((assembly / f"{stack}.assets.json").read_text())
    matches = [
        assembly / entry["source"]["path"]
        for entry in manifest["files"].values()
        if entry["source"].get("packaging") == "zip"
        and any(d["objectKey"] == project.source_key for d in entry["destinations"].values())
    ]
    assert len(matches) == 1, f"no single zip asset uploaded to {project.source_key}"
    return matches[0]


# -- What a buildspec names ------------------------------------------------------------------


def buildspec_commands(buildspec: dict) -> list[str]:
    return [
        command
        for phase in buildspec.get("phases", {}).values()
        for command in phase.get("commands", [])
    ]


def buildspec_variables(buildspec: dict, project: BuildProject) -> dict[str, str]:
    """The buildspec's defaults overridden by the project's plain-text variables."""
    values = {k: str(v) for k, v in buildspec.get("env", {}).get("variables", {}).items()}
    values.update({k: v for k, v in project.environment.items() if isinstance(v, str)})
    return values


def expand(command: str, variables: dict[str, str]) -> str:
    """$NAME and ${NAME} replaced by known values; other shell expansions left as written."""
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)",
        lambda m: variables.get(m.group(1) or m.group(2), m.group(0)),
        command,
    )


def words(command: str) -> list[str]:
    return shlex.split(command, comments=False, posix=True)


@dataclass
class NamedPaths:
    requirements: list[str]  # pip install -r FILE
    modules: list[str]  # python -m MODULE
    dockerfiles: list[str]  # docker build -f FILE


def named_paths(commands: list[str], variables: dict[str, str]) -> NamedPaths:
    found = NamedPaths([], [], [])
    for command in commands:
        for line in expand(command, variables).splitlines():
            try:
                tokens = words(line)
            except ValueError:  # shell syntax shlex does not model (heredocs, [[ =~ ]] quoting)
                continue
            for i, token in enumerate(tokens[:-1]):
                following = tokens[i + 1]
                runs_python = i and re.fullmatch(r"python3?(\.\d+)?", Path(tokens[i - 1]).name)
                if token == "-m" and runs_python and following != "pip":
                    found.modules.append(following)
                if token in ("-r", "--requirement") and "pip" in tokens[:i]:
                    found.requirements.append(following)
                if token in ("-f", "--file") and tokens[:2] == ["docker", "build"]:
                    found.dockerfiles.append(following)
    return found


def module_exists(root: Path, module: str) -> bool:
    """`python -m MODULE` from `root` as the working directory finds it."""
    path = root.joinpath(*module.split("."))
    return (path / "__main__.py").is_file() or path.with_suffix(".py").is_file()


def load_buildspec(source: Path, project: BuildProject) -> dict:
    return yaml.safe_load((source / project.buildspec).read_text())
