"""python -m ops build-inputs: whether a push changed what the builds read (ops/build_inputs.py),
as GitHub Actions step outputs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ops.common import Runtime, Subcommands

NAME = "build-inputs"


def add_parser(commands: Subcommands) -> None:
    parser = commands.add_parser(
        NAME,
        help="print changed=true|false: whether the build source or the configured build inputs "
        "changed since a commit; and gpu-image=true|false: whether the GPU endpoint is enabled",
    )
    parser.add_argument("--since", required=True, metavar="COMMIT", help="the commit before")


def run(args: argparse.Namespace, runtime: Runtime) -> int:
    """What changed goes to stderr, one line each, for the job's log."""
    from ops.build_inputs import build_inputs, changes_since

    repository = Path.cwd()
    changes = changes_since(args.since, repository)
    for change in changes:
        print(f"changed: {change}", file=sys.stderr)
    inputs = build_inputs(repository) or {}
    print(f"changed={str(bool(changes)).lower()}")
    print(f"gpu-image={str(bool(inputs.get('decisionGpuEndpoint.enabled'))).lower()}")
    return 0
