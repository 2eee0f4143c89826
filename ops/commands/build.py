"""python -m ops build TARGET: run a CodeBuild project and print what it produced."""

from __future__ import annotations

import argparse
import math
import os

from ops.common import (
    EXIT_FAILED,
    Runtime,
    Subcommands,
    UsageError,
    _error,
    _info,
    _polling,
    _stack_option,
)
from ops.polling import Polling

NAME = "build"


def add_parser(commands: Subcommands) -> None:
    from ops.codebuild import TARGETS

    build = commands.add_parser(
        NAME,
        help="run a CodeBuild project and print what it produced",
    )
    build.add_argument(
        "target",
        choices=sorted(TARGETS),
        help="what to build",
    )
    build.add_argument(
        "--project",
        help="CodeBuild project (default: "
        + ", ".join(f"${t.project_env} for {name}" for name, t in sorted(TARGETS.items()))
        + "; else the --stack output)",
    )
    _stack_option(
        build,
        "OPS_STATEFUL_STACK",
        "stateful stack whose outputs name the build projects",
    )
    build.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment override for this build," " e.g. MODEL_SPEC=gemma3-270m",
    )
    build.add_argument(
        "--poll-seconds",
        type=float,
        default=10.0,
        help="seconds between polls (default: 10)",
    )
    build.add_argument(
        "--timeout-minutes",
        type=float,
        help="give up waiting after this long (default: as long as the build may run: the"
        " queued and build timeouts CodeBuild reports for it, and 15 minutes)",
    )


def run(args: argparse.Namespace, runtime: Runtime) -> int:
    from ops.codebuild import (
        TARGETS,
        BuildFailed,
        BuildTimedOut,
        build_outputs,
        project_from_stack,
        start_build,
        wait_for_build,
    )

    target = TARGETS[args.target]
    project = args.project or os.environ.get(target.project_env)
    if not project and args.stack:
        project = project_from_stack(runtime.clients("cloudformation"), args.stack, target)
    if not project:
        raise UsageError(
            f"no CodeBuild project: pass --project or --stack, or set {target.project_env}"
        )
    overrides = dict(_name_value(item) for item in args.env)
    client = runtime.clients("codebuild")
    build_id = start_build(client, project, overrides)
    _info(f"started {build_id}")
    try:
        polling = (
            _polling(args, runtime.sleep, runtime.clock)
            if args.timeout_minutes is not None
            else Polling(args.poll_seconds, math.inf, runtime.sleep, runtime.clock)
        )
        build = wait_for_build(client, build_id, polling, report=_info)
        outputs = build_outputs(build, target)
    except (BuildFailed, BuildTimedOut) as exc:
        _error(str(exc))
        return EXIT_FAILED
    # NAME=value lines: readable, and `eval`-able by a deploy script.
    for name, value in outputs.items():
        print(f"{name}={value}")
    return 0


def _name_value(item: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name:
        raise UsageError(f"--env expects NAME=VALUE, got {item!r}")
    return name, value
