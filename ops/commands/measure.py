"""python -m ops measure: measure an endpoint at rising concurrency and write the file synthesis
derives its capacity defaults from (ops/measure.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ops.common import (
    EXIT_FAILED,
    Runtime,
    Subcommands,
    UsageError,
    _endpoint_name,
    _endpoint_option,
    _error,
    _info,
)

NAME = "measure"


def add_parser(commands: Subcommands) -> None:
    measure = commands.add_parser(
        NAME,
        help="measure a decision endpoint at rising concurrency and write the"
        " file synthesis derives its capacity defaults from",
    )
    _endpoint_option(measure)
    measure.add_argument(
        "--max-clients",
        type=int,
        default=8,
        help="the last concurrency level; levels double from 1 (default: 8)",
    )
    measure.add_argument(
        "--max-requests",
        type=int,
        default=400,
        help="requests of the whole run, shared by the levels (default: 400)",
    )
    measure.add_argument(
        "--max-minutes",
        type=float,
        default=10.0,
        help="duration of the whole run, shared by the levels (default: 10)",
    )
    measure.add_argument(
        "--body",
        type=Path,
        help="JSON Lines of representative requests of a decision endpoint, decisions and chats "
        "in the shares it will serve, sent in turn (default: the bench's short decision)",
    )
    measure.add_argument(
        "--output",
        type=Path,
        help="write the measurement here (default: stacks/measurements/"
        "<model>/<instance type>.json, where synthesis reads it)",
    )


def run(args: argparse.Namespace, runtime: Runtime) -> int:
    from ops.measure import CannotMeasure, Limits, measure, read_bodies, write
    from ops.retry import RetriesExhausted
    from ops.transports import InvokeFailed, SageMakerTransport

    endpoint = _endpoint_name(args)
    try:
        limits = Limits(args.max_clients, args.max_requests, args.max_minutes * 60)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        requests = read_bodies(args.body) if args.body is not None else None
    except (CannotMeasure, OSError) as exc:
        raise UsageError(f"--body: {exc}") from None
    transport = SageMakerTransport(runtime.clients("sagemaker-runtime"), endpoint)
    try:
        measured = measure(
            runtime.clients("sagemaker"),
            lambda body: transport.send(body).body,
            endpoint,
            limits,
            sleep=runtime.sleep,
            rng=runtime.rng,
            report=_info,
            requests=requests,
        )
    except (CannotMeasure, RetriesExhausted) as exc:
        _error(str(exc))
        return EXIT_FAILED
    except InvokeFailed as exc:
        _error(str(exc) + (f": {exc.body}" if exc.body else ""))
        return EXIT_FAILED
    path = write(measured, args.output)
    print(f"MEASUREMENT={path}")
    return 0
