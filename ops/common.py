"""What every operator subcommand shares: exit codes, the usage error, the options for a stack
and for waiting, and the lines it writes to stderr."""

from __future__ import annotations

import os
import sys

from ops.polling import Polling

EXIT_FAILED = 1
EXIT_USAGE = 2


class UsageError(Exception):
    pass


def _stack_option(parser, env: str, help: str) -> None:
    parser.add_argument(
        "--stack",
        default=os.environ.get(env),
        help=f"{help} (default: ${env})",  # pragma: no mutate
    )


def _waiting_options(parser, *, poll: float, timeout: float) -> None:
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=poll,
        help=f"seconds between polls (default: {poll:g})",  # pragma: no mutate
    )
    parser.add_argument(
        "--timeout-minutes",
        type=float,
        default=timeout,
        help=f"give up waiting after this long (default: {timeout:g})",  # pragma: no mutate
    )


def _polling(args, sleep, clock) -> Polling:
    return Polling(args.poll_seconds, args.timeout_minutes * 60, sleep, clock)


def _info(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _error(line: str) -> None:
    print("ops: error: " + " ".join(line.split()), file=sys.stderr)
