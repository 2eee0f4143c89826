"""Whether a push changed what the builds read, so CI builds only then.

The builds read their source zip (`SOURCE_PATHS`) and, from the configuration, the model spec,
the CUDA architectures and the DLC images they build from. The configuration is read as each
revision's own code reads its own cdk.json: a default changed in `stacks/config/` counts as
much as a value changed in cdk.json. Switching the GPU decision endpoint on counts too: CI
builds the GPU image only while that endpoint is enabled.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# stacks/constructs/build_project.py's DEFAULT_SOURCE_PATHS (not imported: it needs the CDK).
SOURCE_PATHS = ("container", "model_manifest", "model_packaging")

# Run in a child process with a revision's tree first on sys.path: its own stacks.config.
_READ = """
import json, sys
sys.path.insert(0, sys.argv[1])
from stacks.config import AppConfig
context = json.load(open(sys.argv[1] + "/cdk.json"))["context"]
config = AppConfig.from_context({**context, "forDestroy": True})
print(json.dumps({
    "builds.modelSpec": config.builds.model_spec,
    "builds.cudaArchitectures": config.builds.cuda_architectures,
    "dlc": config.dlc.model_dump(mode="json", by_alias=True),
    "decisionGpuEndpoint.enabled": config.decision_gpu_endpoint.enabled,
}))
"""


def build_inputs(tree: Path) -> dict[str, Any] | None:
    """The configured build inputs of a checked-out tree; None where its code cannot say."""
    done = subprocess.run(
        [sys.executable, "-c", _READ, str(tree)], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        return None
    inputs: dict[str, Any] = json.loads(done.stdout)
    return inputs


def _git(repository: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repository, capture_output=True, text=True)


def changes_since(before: str, repository: Path) -> list[str]:
    """What changed between `before` and the checked-out tree, in words; an unknown revision
    (a new branch's push names none) is a change."""
    if _git(repository, "cat-file", "-e", f"{before}^{{commit}}").returncode != 0:
        return [f"{before} is not a known commit"]
    changed = []
    if _git(repository, "diff", "--quiet", before, "HEAD", "--", *SOURCE_PATHS).returncode:
        changed.append(f"the build source ({', '.join(SOURCE_PATHS)})")
    now = build_inputs(repository)
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "before"
        _git(repository, "worktree", "add", "--detach", "-q", str(tree), before)
        try:
            then = build_inputs(tree)
        finally:
            _git(repository, "worktree", "remove", "--force", str(tree))
    if now is None or then is None:
        return changed + ["the configuration, which one revision's code could not read"]
    return changed + [
        f"{key}: {then.get(key)!r} -> {value!r}"
        for key, value in now.items()
        if then.get(key) != value
    ]
