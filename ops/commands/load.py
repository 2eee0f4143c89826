"""python -m ops load BODY: closed-loop load on an endpoint at rising client counts; prints the
figures stacks/capacity.py derives its defaults from."""

from __future__ import annotations

import argparse
import json

from ops.common import (
    EXIT_FAILED,
    Runtime,
    Subcommands,
    UsageError,
    _endpoint_name,
    _endpoint_option,
    _error,
    _info,
    _read_body,
)

NAME = "load"


def add_parser(commands: Subcommands) -> None:
    load = commands.add_parser(
        NAME,
        help="closed-loop load on an endpoint; prints the figures"
        " stacks/capacity.py derives defaults from",
    )
    _endpoint_option(load)
    load.add_argument(
        "body",
        help="JSON file of one decision request",
    )
    load.add_argument(
        "--clients",
        default="1,2,4,8",
        help="client counts, one level each; must include 1" " (default: 1,2,4,8)",
    )
    load.add_argument(
        "--requests",
        type=int,
        default=50,
        help="requests per client and level (default: 50)",
    )
    load.add_argument(
        "--instances",
        type=int,
        default=1,
        help="instances serving the endpoint; rates are per instance" " (default: 1)",
    )
    load.add_argument(
        "--output",
        help="write the figures JSON here (default: stdout)",
    )


def run(args: argparse.Namespace, runtime: Runtime) -> int:
    from ops.load import Level, figures, run_level
    from ops.transports import InvokeFailed, SageMakerTransport

    endpoint = _endpoint_name(args)
    try:
        levels = [int(n) for n in args.clients.split(",")]
    except ValueError:
        raise UsageError(f"--clients expects counts such as 1,2,4, got {args.clients!r}") from None
    if 1 not in levels or min(levels) < 1 or args.requests < 1 or args.instances < 1:
        raise UsageError("--clients must include 1; counts, --requests, --instances at least 1")
    body = _read_body(args.body)
    transport = SageMakerTransport(runtime.clients("sagemaker-runtime"), endpoint)
    measured: list[Level] = []
    try:
        for clients in levels:
            level = run_level(
                lambda: transport.send(body), clients, args.requests, sleep=runtime.sleep
            )
            _info(f"{clients} client(s): {len(level.answered)} answered, {level.refused} refused")
            measured.append(level)
    except InvokeFailed as exc:
        _error(str(exc) + (f": {exc.body}" if exc.body else ""))
        return EXIT_FAILED
    text = json.dumps(figures(measured, instances=args.instances, endpoint=endpoint), indent=2)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    else:
        print(text)
    return 0
