"""python -m ops {build,invoke,status,load,measure,submit,batch,mark-released,prune-released,
context}: the operator's view of builds and endpoints."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from ops.clients import ClientFactory, boto3_clients
from ops.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    UsageError,
    _error,
    _info,
    _polling,
    _stack_option,
    _waiting_options,
)
from ops.retry import Backoff, RetriesExhausted, call_with_retries


# Help texts are wording, not behaviour: `# pragma: no mutate` keeps mutation testing off them
# (tests/mutation/SURVIVORS.md); a test checks that every option has one.
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ops",
        description=__doc__,  # pragma: no mutate
    )
    parser.add_argument(
        "--region",
        help="AWS region (default: the SDK's configuration)",  # pragma: no mutate
    )
    commands = parser.add_subparsers(dest="command", required=True)

    from ops.codebuild import TARGETS

    build = commands.add_parser(
        "build",
        help="run a CodeBuild project and print what it produced",  # pragma: no mutate
    )
    build.add_argument(
        "target",
        choices=sorted(TARGETS),
        help="what to build",  # pragma: no mutate
    )
    build.add_argument(
        "--project",
        help="CodeBuild project (default: "  # pragma: no mutate
        + ", ".join(  # pragma: no mutate
            f"${t.project_env} for {name}" for name, t in sorted(TARGETS.items())
        )
        + "; else the --stack output)",  # pragma: no mutate
    )
    _stack_option(
        build,
        "OPS_STATEFUL_STACK",
        "stateful stack whose outputs name the build projects",  # pragma: no mutate
    )
    build.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",  # pragma: no mutate
        help="environment override for this build,"  # pragma: no mutate
        " e.g. MODEL_SPEC=gemma3-270m",  # pragma: no mutate
    )
    _waiting_options(build, poll=10.0, timeout=180.0)

    invoke = commands.add_parser(
        "invoke",
        help="send a decision, System One or chat body",  # pragma: no mutate
    )
    where = invoke.add_mutually_exclusive_group()
    _endpoint_option(where)
    where.add_argument(
        "--url",
        help="adapter base URL, e.g. http://127.0.0.1:8080",  # pragma: no mutate
    )
    invoke.add_argument(
        "body",
        nargs="?",
        default="-",
        help="JSON file, or - for stdin (default)",  # pragma: no mutate
    )
    invoke.add_argument(
        "--path",
        default="/invocations",
        help="path for --url (default: /invocations)",  # pragma: no mutate
    )
    _json_option(invoke, "answer")  # pragma: no mutate
    invoke.add_argument(
        "--max-attempts",
        type=int,
        default=Backoff.max_attempts,
        help="attempts before giving up on 503 and throttling",  # pragma: no mutate
    )
    invoke.add_argument(
        "--custom-attributes",
        help="X-Amzn-SageMaker-Custom-Attributes value",  # pragma: no mutate
    )

    status = commands.add_parser(
        "status",
        help="endpoint status, the instance type in use and each"  # pragma: no mutate
        " instance's start-up line (GPU, layers offloaded)",  # pragma: no mutate
    )
    _endpoint_option(status)
    _json_option(status, "status")  # pragma: no mutate

    load = commands.add_parser(
        "load",
        help="closed-loop load on an endpoint; prints the figures"  # pragma: no mutate
        " stacks/capacity.py derives defaults from",  # pragma: no mutate
    )
    _endpoint_option(load)
    load.add_argument(
        "body",
        help="JSON file of one decision request",  # pragma: no mutate
    )
    load.add_argument(
        "--clients",
        default="1,2,4,8",
        help="client counts, one level each; must include 1"  # pragma: no mutate
        " (default: 1,2,4,8)",  # pragma: no mutate
    )
    load.add_argument(
        "--requests",
        type=int,
        default=50,
        help="requests per client and level (default: 50)",  # pragma: no mutate
    )
    load.add_argument(
        "--instances",
        type=int,
        default=1,
        help="instances serving the endpoint; rates are per instance"  # pragma: no mutate
        " (default: 1)",  # pragma: no mutate
    )
    load.add_argument(
        "--output",
        help="write the figures JSON here (default: stdout)",  # pragma: no mutate
    )

    measure = commands.add_parser(
        "measure",
        help="measure a decision endpoint at rising concurrency and write the"  # pragma: no mutate
        " file synthesis derives its capacity defaults from",  # pragma: no mutate
    )
    _endpoint_option(measure)
    measure.add_argument(
        "--max-clients",
        type=int,
        default=8,
        help="the last concurrency level; levels double from 1 (default: 8)",  # pragma: no mutate
    )
    measure.add_argument(
        "--max-requests",
        type=int,
        default=400,
        help="requests of the whole run, shared by the levels (default: 400)",  # pragma: no mutate
    )
    measure.add_argument(
        "--max-minutes",
        type=float,
        default=10.0,
        help="duration of the whole run, shared by the levels (default: 10)",  # pragma: no mutate
    )
    measure.add_argument(
        "--output",
        type=Path,
        help="write the measurement here (default: stacks/measurements/"  # pragma: no mutate
        "<model>/<instance type>.json, where synthesis reads it)",  # pragma: no mutate
    )

    from ops.background import add_commands

    add_commands(commands)
    from ops.released_images import add_command as add_mark_released

    add_mark_released(commands)
    from ops.context import add_command as add_context

    add_context(commands)
    return parser


def _endpoint_option(parser) -> None:
    parser.add_argument(
        "--endpoint",
        help="SageMaker endpoint name (default: $OPS_ENDPOINT_NAME)",  # pragma: no mutate
    )


def _json_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print the {what} as JSON",  # pragma: no mutate
    )


def main(
    argv: list[str] | None = None,
    *,
    clients: ClientFactory | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    args = build_parser().parse_args(argv)
    make_client = clients or boto3_clients(args.region)
    try:
        if args.command == "build":
            return _build(args, make_client, sleep, clock)
        if args.command == "invoke":
            return _invoke(args, make_client, sleep, rng)
        if args.command == "load":
            return _load(args, make_client, sleep)
        if args.command == "measure":
            return _measure(args, make_client, sleep, rng)
        if args.command in ("submit", "batch"):
            from ops import background

            handler = background.submit if args.command == "submit" else background.batch
            return handler(args, make_client, sleep, clock)
        if args.command == "mark-released":
            from ops.released_images import mark

            return mark(args, make_client)
        if args.command == "prune-released":
            from ops.released_images import prune

            return prune(args, make_client)
        if args.command == "context":
            return _context(args)
        return _status(args, make_client)
    except UsageError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except (BotoCoreError, ClientError) as exc:
        # No credentials or region, no network, or an AWS refusal the command does not read
        # itself (an endpoint that does not exist, access denied): one line, not a traceback.
        _error(f"AWS: {exc}")
        return EXIT_FAILED


def _build(args, make_client: ClientFactory, sleep, clock) -> int:
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
        project = project_from_stack(make_client("cloudformation"), args.stack, target)
    if not project:
        raise UsageError(
            f"no CodeBuild project: pass --project or --stack, or set {target.project_env}"
        )
    overrides = dict(_name_value(item) for item in args.env)
    client = make_client("codebuild")
    build_id = start_build(client, project, overrides)
    _info(f"started {build_id}")
    try:
        build = wait_for_build(client, build_id, _polling(args, sleep, clock), report=_info)
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


def _read_body(source: str) -> bytes:
    """The body as written (a leading byte-order mark dropped: it marks the encoding). Sent as
    is, not re-serialized: json.loads would merge a duplicate key the server refuses by name."""
    try:
        text = sys.stdin.read() if source == "-" else open(source, encoding="utf-8").read()
        text = text.removeprefix("\ufeff")
        json.loads(text)  # a typo is a clear local error instead of a remote 4xx
    except (OSError, ValueError) as exc:  # ValueError: JSONDecodeError, or bytes not UTF-8
        raise UsageError(f"cannot read a JSON body from {source}: {exc}") from exc
    return text.encode()


def _invoke(args, make_client: ClientFactory, sleep, rng) -> int:
    from ops.render import render_response
    from ops.transports import HttpTransport, InvalidUrl, InvokeFailed, SageMakerTransport

    body = _read_body(args.body)
    if args.url:
        try:
            transport = HttpTransport(
                args.url, path=args.path, custom_attributes=args.custom_attributes
            )
        except InvalidUrl as exc:
            raise UsageError(f"--url {exc}") from None
    else:
        endpoint = args.endpoint or os.environ.get("OPS_ENDPOINT_NAME")
        if not endpoint:
            raise UsageError("pass --endpoint NAME, --url URL, or set OPS_ENDPOINT_NAME")
        transport = SageMakerTransport(
            make_client("sagemaker-runtime"), endpoint, custom_attributes=args.custom_attributes
        )
    if args.max_attempts < 1:
        raise UsageError("--max-attempts must be at least 1")
    backoff = Backoff(max_attempts=args.max_attempts)

    def announce(attempt: int, delay: float, refusal) -> None:
        _info(f"attempt {attempt}: {refusal}; retrying in {delay:.2f}s")

    try:
        reply = call_with_retries(
            lambda: transport.send(body), backoff, sleep=sleep, rng=rng, on_retry=announce
        )
    except RetriesExhausted as exc:
        _error(str(exc))
        return EXIT_FAILED
    except InvokeFailed as exc:
        _error(str(exc) + (f": {exc.body}" if exc.body else ""))
        return EXIT_FAILED
    try:
        payload = json.loads(reply.body)
    except ValueError:
        sys.stdout.write(reply.body.decode("utf-8", "replace") + "\n")
        return 0
    print(
        json.dumps(payload, indent=2, ensure_ascii=False) if args.json else render_response(payload)
    )
    return 0


def _status(args, make_client: ClientFactory) -> int:
    from ops.endpoint_status import endpoint_status, render_status
    from ops.startup_log import startup_lines

    endpoint = args.endpoint or os.environ.get("OPS_ENDPOINT_NAME")
    if not endpoint:
        raise UsageError("pass --endpoint NAME or set OPS_ENDPOINT_NAME")
    status = endpoint_status(make_client("sagemaker"), endpoint)
    status["startup"] = startup_lines(make_client("logs"), endpoint)
    print(json.dumps(status, indent=2) if args.json else render_status(status))
    return 0 if status["status"] != "Failed" else EXIT_FAILED


def _load(args, make_client: ClientFactory, sleep) -> int:
    from ops.load import figures, run_level
    from ops.transports import InvokeFailed, SageMakerTransport

    endpoint = args.endpoint or os.environ.get("OPS_ENDPOINT_NAME")
    if not endpoint:
        raise UsageError("pass --endpoint NAME or set OPS_ENDPOINT_NAME")
    try:
        levels = [int(n) for n in args.clients.split(",")]
    except ValueError:
        raise UsageError(f"--clients expects counts such as 1,2,4, got {args.clients!r}") from None
    if 1 not in levels or min(levels) < 1 or args.requests < 1 or args.instances < 1:
        raise UsageError("--clients must include 1; counts, --requests, --instances at least 1")
    body = _read_body(args.body)
    transport = SageMakerTransport(make_client("sagemaker-runtime"), endpoint)
    measured = []
    try:
        for clients in levels:
            level = run_level(lambda: transport.send(body), clients, args.requests, sleep=sleep)
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


def _context(args) -> int:
    from ops.context import ContextError, run

    try:
        lines = run(args)
    except ContextError as exc:
        raise UsageError(str(exc)) from None
    print("\n".join(lines))
    return 0


def _measure(args, make_client: ClientFactory, sleep, rng) -> int:
    from ops.measure import CannotMeasure, Limits, measure, write
    from ops.retry import RetriesExhausted
    from ops.transports import InvokeFailed, SageMakerTransport

    endpoint = args.endpoint or os.environ.get("OPS_ENDPOINT_NAME")
    if not endpoint:
        raise UsageError("pass --endpoint NAME or set OPS_ENDPOINT_NAME")
    try:
        limits = Limits(args.max_clients, args.max_requests, args.max_minutes * 60)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    transport = SageMakerTransport(make_client("sagemaker-runtime"), endpoint)
    try:
        measured = measure(
            make_client("sagemaker"),
            lambda body: transport.send(body).body,
            endpoint,
            limits,
            sleep=sleep,
            rng=rng,
            report=_info,
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
