"""What a make target would run, read from `make -n` (which executes nothing)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def printed_lines(*make_args: str) -> list[str]:
    """The command lines `make -n -B <make_args>` prints, continuation lines joined."""
    printed = subprocess.run(
        # No "Entering directory" lines when the suite itself runs under make (make test).
        ["make", "--no-print-directory", "-n", "-B", *make_args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return printed.replace("\\\n", " ").splitlines()


def cdk_command(*make_args: str) -> list[str]:
    """The `cdk ...` command line of `make <make_args>`, from `cdk` on."""
    (line,) = [line for line in printed_lines(*make_args) if " npx --no-install cdk " in line]
    words = shlex.split(line)
    return words[words.index("cdk") :]
