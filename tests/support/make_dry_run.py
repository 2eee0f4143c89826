"""What a make target would run, read from `make -n` (which executes nothing)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def make_output(*make_args: str) -> str:
    """What `make <make_args>` prints in the repository root."""
    return subprocess.run(
        # No "Entering directory" lines when the suite itself runs under make (make test).
        ["make", "--no-print-directory", *make_args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def printed_lines(*make_args: str) -> list[str]:
    """The command lines `make -n -B <make_args>` prints, continuation lines joined."""
    return make_output("-n", "-B", *make_args).replace("\\\n", " ").splitlines()


def cdk_command(*make_args: str) -> list[str]:
    """The `cdk ...` command line of `make <make_args>`, from `cdk` on."""
    (line,) = [line for line in printed_lines(*make_args) if " npx --no-install cdk " in line]
    words = shlex.split(line)
    return words[words.index("cdk") :]
