"""A buildspec's commands run in bash with `aws` and `docker` replaced by recorders: each call
is appended to $CALLS, and `aws ecr describe-images` answers RECORDED_DIGEST as ECR would."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.codebuild_view import buildspec_commands

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORDED_DIGEST = "sha256:" + "c" * 64
RECORDERS = {
    "aws": f"""#!/bin/bash
echo "aws $*" >> "$CALLS"
case "$*" in
  *get-login-password*) echo token ;;
  *describe-images*) echo "{RECORDED_DIGEST}" ;;
esac
""",
    "docker": """#!/bin/bash
echo "docker $*" >> "$CALLS"
cat > /dev/null
""",
}


def load_buildspec(path: str) -> dict:
    """A buildspec of the repository, by its path from the root (version 0.2 only)."""
    spec = yaml.safe_load((REPO_ROOT / path).read_text())
    assert spec["version"] == 0.2
    return spec


def commands_text(spec: dict) -> str:
    return "\n".join(buildspec_commands(spec))


def recorders_bin(directory: Path) -> Path:
    """`directory`/bin holding the recording `aws` and `docker`; put it first on PATH."""
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    for tool, script in RECORDERS.items():
        (bin_dir / tool).write_text(script)
        (bin_dir / tool).chmod(0o755)
    return bin_dir
