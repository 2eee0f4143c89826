"""What every operator subcommand shares: exit codes, the usage error, what `main` hands each
handler, the options several subcommands take, reading a request body, and the lines written to
stderr."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from ops.clients import ClientFactory
from ops.polling import Polling

EXIT_FAILED = 1
EXIT_USAGE = 2


class UsageError(Exception):
    pass


# `python -m ops`'s subcommands, as argparse's add_subparsers returns them.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
# What an option is added to: a parser, or a group of mutually exclusive options.
Options: TypeAlias = argparse._ActionsContainer


@dataclass(frozen=True)
class Runtime:
    """What `main` hands every subcommand's handler besides its arguments: the AWS clients and
    the clock and randomness its waiting and retries use (tests pass their own)."""

    clients: ClientFactory
    sleep: Callable[[float], None]
    rng: random.Random | None
    clock: Callable[[], float]


def _stack_option(parser: Options, env: str, help: str) -> None:
    parser.add_argument(
        "--stack",
        default=os.environ.get(env),
        help=f"{help} (default: ${env})",
    )


def _waiting_options(parser: Options, *, poll: float, timeout: float) -> None:
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=poll,
        help=f"seconds between polls (default: {poll:g})",
    )
    parser.add_argument(
        "--timeout-minutes",
        type=float,
        default=timeout,
        help=f"give up waiting after this long (default: {timeout:g})",
    )


def _endpoint_option(parser: Options) -> None:
    parser.add_argument(
        "--endpoint",
        help="SageMaker endpoint name (default: $OPS_ENDPOINT_NAME)",
    )


def _json_option(parser: Options, what: str) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print the {what} as JSON",
    )


def _endpoint_name(args: argparse.Namespace) -> str:
    """--endpoint, else $OPS_ENDPOINT_NAME."""
    endpoint: str | None = args.endpoint or os.environ.get("OPS_ENDPOINT_NAME")
    if not endpoint:
        raise UsageError("pass --endpoint NAME or set OPS_ENDPOINT_NAME")
    return endpoint


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


def _polling(
    args: argparse.Namespace, sleep: Callable[[float], None], clock: Callable[[], float]
) -> Polling:
    return Polling(args.poll_seconds, args.timeout_minutes * 60, sleep, clock)


def _info(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _error(line: str) -> None:
    print("ops: error: " + " ".join(line.split()), file=sys.stderr)
