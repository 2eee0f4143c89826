"""python -m ops {build,build-inputs,invoke,status,load,measure,submit,batch,mark-released,
prune-released,context}: the operator's view of builds and endpoints."""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Protocol

from botocore.exceptions import BotoCoreError, ClientError

from ops.clients import ClientFactory, boto3_clients
from ops.commands import (
    batch,
    build,
    build_inputs,
    context,
    invoke,
    load,
    mark_released,
    measure,
    prune_released,
    status,
    submit,
)
from ops.common import EXIT_FAILED, EXIT_USAGE, Runtime, Subcommands, UsageError, _error


class Command(Protocol):
    """A subcommand's module: its name, its parser and its handler."""

    NAME: str

    def add_parser(self, commands: Subcommands) -> None: ...

    def run(self, args: argparse.Namespace, runtime: Runtime) -> int: ...


# The subcommands in the order `python -m ops --help` lists them.
COMMANDS: tuple[Command, ...] = (
    build,
    build_inputs,
    invoke,
    status,
    load,
    measure,
    submit,
    batch,
    mark_released,
    prune_released,
    context,
)


# Help texts are wording, not behaviour: mutation testing leaves them alone
# (pyproject.toml's [tool.mutation.do_not_mutate]); a test checks that every option has one.
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ops",
        description=__doc__,
    )
    parser.add_argument(
        "--region",
        help="AWS region (default: the SDK's configuration)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(
    argv: list[str] | None = None,
    *,
    clients: ClientFactory | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    args = build_parser().parse_args(argv)
    runtime = Runtime(clients or boto3_clients(args.region), sleep, rng, clock)
    handlers = {command.NAME: command.run for command in COMMANDS}
    try:
        return handlers[args.command](args, runtime)
    except UsageError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except (BotoCoreError, ClientError) as exc:
        # No credentials or region, no network, or an AWS refusal the command does not read
        # itself (an endpoint that does not exist, access denied): one line, not a traceback.
        _error(f"AWS: {exc}")
        return EXIT_FAILED
