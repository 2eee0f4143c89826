"""python -m ops context set|unset: the release's values and switches kept in cdk.json
(ops/context.py)."""

from __future__ import annotations

import argparse

from ops.common import Runtime, Subcommands, UsageError

NAME = "context"


def add_parser(commands: Subcommands) -> None:
    parser = commands.add_parser(
        NAME,
        help="keep release values and switches in cdk.json," " where every later deploy reads them",
    )
    parser.add_argument(
        "action",
        choices=("set", "unset"),
        help="set values, or unset keys",
    )
    parser.add_argument(
        "items",
        nargs="+",
        metavar="KEY[=VALUE]",
        help="set: KEY=VALUE (JSON, else a string); unset: KEY;"
        " a dotted key reaches into an object",
    )


def run(args: argparse.Namespace, runtime: Runtime) -> int:
    """Prints what changed; a value or key cdk.json cannot take is a usage error."""
    from ops.context import ContextError, cdk_json, update

    try:
        lines = [f"{cdk_json().name}: {line}" for line in update(args.action, args.items)]
    except ContextError as exc:
        raise UsageError(str(exc)) from None
    print("\n".join(lines))
    return 0
