"""Start a CodeBuild project, follow its phases, and read what the build exported."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ops.clients import Client
from ops.polling import Polling


@dataclass(frozen=True)
class BuildTarget:
    project_env: str
    stack_output: str  # the CloudFormation output of the stateful stack naming the project
    outputs: tuple[str, ...]


# The buildspecs export these variables (env: exported-variables).
TARGETS: dict[str, BuildTarget] = {
    "model": BuildTarget(
        "OPS_MODEL_BUILD_PROJECT",
        "ModelBuildProject",
        ("MODEL_URI", "MODEL_ARCHIVE_SHA256", "MODEL_GGUF_SHA256"),
    ),
    "cpu-image": BuildTarget("OPS_CPU_IMAGE_BUILD_PROJECT", "CpuImageBuildProject", ("IMAGE_URI",)),
    "gpu-image": BuildTarget("OPS_GPU_IMAGE_BUILD_PROJECT", "GpuImageBuildProject", ("IMAGE_URI",)),
}


class BuildFailed(Exception):
    def __init__(self, message: str, build: dict[str, Any]) -> None:
        super().__init__(message)
        self.build = build


class BuildTimedOut(Exception):
    pass


def project_from_stack(cloudformation: Client, stack_name: str, target: BuildTarget) -> str | None:
    stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    outputs: dict[str, str] = {
        o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])
    }
    return outputs.get(target.stack_output)


def start_build(client: Client, project: str, overrides: dict[str, str]) -> str:
    request: dict[str, Any] = {"projectName": project}
    if overrides:
        request["environmentVariablesOverride"] = [
            {"name": name, "value": value, "type": "PLAINTEXT"} for name, value in overrides.items()
        ]
    build_id: str = client.start_build(**request)["build"]["id"]
    return build_id


# CodeBuild's largest queued and build timeouts, in minutes: what a build that names neither
# may take.
MOST_QUEUED_MINUTES, MOST_BUILD_MINUTES = 480, 2160
# Past its build timeout CodeBuild still stops the build and uploads its logs and artifacts
# (the FINALIZING and COMPLETED phases) before it reports the build complete.
FINISHING_SECONDS = 15 * 60


def may_run_seconds(build: dict[str, Any]) -> float:
    """How long CodeBuild may take over `build` before it reports it complete: the queued and the
    build timeout BatchGetBuilds reports for it (the project's, or StartBuild's overrides), and
    FINISHING_SECONDS."""
    queued = build.get("queuedTimeoutInMinutes", MOST_QUEUED_MINUTES)
    running = build.get("timeoutInMinutes", MOST_BUILD_MINUTES)
    return float((queued + running) * 60 + FINISHING_SECONDS)


def wait_for_build(
    client: Client, build_id: str, polling: Polling, *, report: Callable[[str], None]
) -> dict[str, Any]:
    """Poll until the build completes; report each phase once, as it starts. A polling without
    a timeout of its own (math.inf) waits as long as the build may run (may_run_seconds)."""
    build: dict[str, Any]
    as_long_as_the_build = math.isinf(polling.timeout_seconds)
    build, complete = polling.until(
        lambda: client.batch_get_builds(ids=[build_id])["builds"][0],
        lambda build: bool(build.get("buildComplete")),
        state=lambda build: build.get("currentPhase"),
        report=report,
        timeout=may_run_seconds if as_long_as_the_build else None,
    )
    if not complete:
        waited = may_run_seconds(build) if as_long_as_the_build else polling.timeout_seconds
        raise BuildTimedOut(f"build {build_id} still running after {waited:.0f}s")
    return build


def exported_variables(build: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v.get("value", "") for v in build.get("exportedEnvironmentVariables", [])}


def build_outputs(build: dict[str, Any], target: BuildTarget) -> dict[str, str]:
    if build.get("buildStatus") != "SUCCEEDED":
        raise BuildFailed(_failure_summary(build), build)
    exported = exported_variables(build)
    missing = [name for name in target.outputs if not exported.get(name)]
    if missing:
        raise BuildFailed(f"build succeeded but did not export {', '.join(missing)}", build)
    return {name: exported[name] for name in target.outputs}


def _failure_summary(build: dict[str, Any]) -> str:
    failed = [p for p in build.get("phases", []) if p.get("phaseStatus") not in (None, "SUCCEEDED")]
    details = "; ".join(
        f"{p['phaseType']} {p['phaseStatus']}"
        + "".join(f": {c.get('message')}" for c in p.get("contexts", []) if c.get("message"))
        for p in failed
    )
    summary = f"build {build.get('id')} {build.get('buildStatus')}"
    if details:
        summary += f" ({details})"
    link = build.get("logs", {}).get("deepLink")
    return summary + (f"; logs: {link}" if link else "")
