"""python -m ops invoke [BODY]: send a decision, System One or chat body to an endpoint, or to an
adapter's URL, retrying 503s and throttling, and print the answer."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ops.common import (
    EXIT_FAILED,
    Runtime,
    Subcommands,
    UsageError,
    _endpoint_option,
    _error,
    _info,
    _json_option,
    _read_body,
)
from ops.retry import Backoff, RetriesExhausted, Retryable, call_with_retries

NAME = "invoke"


def add_parser(commands: Subcommands) -> None:
    invoke = commands.add_parser(
        NAME,
        help="send a decision, System One or chat body",
    )
    where = invoke.add_mutually_exclusive_group()
    _endpoint_option(where)
    where.add_argument(
        "--url",
        help="adapter base URL, e.g. http://127.0.0.1:8080",
    )
    invoke.add_argument(
        "body",
        nargs="?",
        default="-",
        help="JSON file, or - for stdin (default)",
    )
    invoke.add_argument(
        "--path",
        default="/invocations",
        help="path for --url (default: /invocations)",
    )
    _json_option(invoke, "answer")
    invoke.add_argument(
        "--max-attempts",
        type=int,
        default=Backoff.max_attempts,
        help="attempts before giving up on 503 and throttling",
    )
    invoke.add_argument(
        "--custom-attributes",
        help="X-Amzn-SageMaker-Custom-Attributes value",
    )


def run(args: argparse.Namespace, runtime: Runtime) -> int:
    from ops.render import render_response
    from ops.transports import HttpTransport, InvalidUrl, InvokeFailed, SageMakerTransport

    body = _read_body(args.body)
    transport: HttpTransport | SageMakerTransport
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
            runtime.clients("sagemaker-runtime"),
            endpoint,
            custom_attributes=args.custom_attributes,
        )
    if args.max_attempts < 1:
        raise UsageError("--max-attempts must be at least 1")
    backoff = Backoff(max_attempts=args.max_attempts)

    def announce(attempt: int, delay: float, refusal: Retryable) -> None:
        _info(f"attempt {attempt}: {refusal}; retrying in {delay:.2f}s")

    try:
        reply = call_with_retries(
            lambda: transport.send(body),
            backoff,
            sleep=runtime.sleep,
            rng=runtime.rng,
            on_retry=announce,
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
