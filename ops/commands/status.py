"""python -m ops status: an endpoint's status, the instance type in use and each instance's
start-up line."""

from __future__ import annotations

import argparse
import json

from ops.common import (
    EXIT_FAILED,
    Runtime,
    Subcommands,
    _endpoint_name,
    _endpoint_option,
    _json_option,
)

NAME = "status"


def add_parser(commands: Subcommands) -> None:
    status = commands.add_parser(
        NAME,
        help="endpoint status, the instance type in use and each"
        " instance's start-up line (GPU, layers offloaded)",
    )
    _endpoint_option(status)
    _json_option(status, "status")


def run(args: argparse.Namespace, runtime: Runtime) -> int:
    from ops.endpoint_status import endpoint_status, render_status
    from ops.startup_log import startup_lines

    endpoint = _endpoint_name(args)
    status = endpoint_status(runtime.clients("sagemaker"), endpoint)
    status["startup"] = startup_lines(runtime.clients("logs"), endpoint)
    print(json.dumps(status, indent=2) if args.json else render_status(status))
    return 0 if status["status"] != "Failed" else EXIT_FAILED
