"""python -m ops submit BODY: send a body (or a JSON Lines file of several) to the asynchronous
endpoint through S3; with --wait, wait for its answer or error and print it."""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path

from ops.background import read_request, s3_location, stack_outputs
from ops.clients import Client
from ops.common import (
    EXIT_FAILED,
    Runtime,
    Subcommands,
    UsageError,
    _error,
    _info,
    _polling,
    _stack_option,
    _waiting_options,
)
from ops.s3_objects import S3Error, S3Location, fetch, upload, wait_for_first

NAME = "submit"


def add_parser(commands: Subcommands) -> None:
    submit = commands.add_parser(
        NAME,
        help="send a body to an asynchronous endpoint through S3",
    )
    submit.add_argument(
        "body",
        help="JSON file, or JSON Lines (.jsonl) of several bodies",
    )
    submit.add_argument(
        "--endpoint",
        help="asynchronous endpoint (default: $OPS_ASYNC_ENDPOINT_NAME,"
        " else the --stack output)",
    )
    submit.add_argument(
        "--input-location",
        help="s3:// prefix for request bodies (default: the --stack output)",
    )
    _stack_option(
        submit,
        "OPS_ENDPOINT_STACK",
        "endpoint stack whose outputs name the endpoint and input location",
    )
    submit.add_argument(
        "--wait",
        action="store_true",
        help="wait for the answer (or the error) and print it",
    )
    submit.add_argument(
        "--invocation-timeout-seconds",
        type=_invocation_timeout,
        default=3600,
        help="time the endpoint may take for the request (default: 3600,"
        " SageMaker's most; its own default is 900)",
    )
    _waiting_options(submit, poll=5.0, timeout=60.0)
    submit.add_argument(
        "--output",
        type=Path,
        help="with --wait: write the answer to this file",
    )


def _invocation_timeout(value: str) -> int:
    """InvokeEndpointAsync's InvocationTimeoutSeconds: 1 to 3600."""
    seconds = int(value) if value.isdigit() else 0
    if not 1 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of seconds, 1-3600")
    return seconds


def run(args: argparse.Namespace, runtime: Runtime) -> int:
    from botocore.exceptions import ClientError

    outputs = stack_outputs(runtime.clients, args.stack) if args.stack else {}
    endpoint = (
        args.endpoint
        or os.environ.get("OPS_ASYNC_ENDPOINT_NAME")
        or outputs.get("DecisionAsyncEndpointName")
    )
    if not endpoint:
        raise UsageError(
            "no asynchronous endpoint: pass --endpoint or --stack, or set OPS_ASYNC_ENDPOINT_NAME"
        )
    prefix = args.input_location or outputs.get("DecisionAsyncInputLocation")
    if not prefix:
        raise UsageError("no input location: pass --input-location s3://BUCKET/PREFIX or --stack")
    body, content_type = read_request(args.body)
    request = s3_location(prefix, "--input-location").child(
        f"{uuid.uuid4()}-{Path(args.body).name}"
    )
    s3 = runtime.clients("s3")
    try:
        upload(s3, request, body, content_type)
        reply = runtime.clients("sagemaker-runtime").invoke_endpoint_async(
            EndpointName=endpoint,
            InputLocation=request.uri,
            ContentType=content_type,
            InvocationTimeoutSeconds=args.invocation_timeout_seconds,
        )
    except (S3Error, ClientError) as error:
        _error(str(error))
        return EXIT_FAILED
    output = S3Location.parse(reply["OutputLocation"])
    failure = S3Location.parse(reply["FailureLocation"]) if reply.get("FailureLocation") else None
    print(f"INPUT_LOCATION={request.uri}")
    print(f"OUTPUT_LOCATION={output.uri}")
    if failure is not None:
        print(f"FAILURE_LOCATION={failure.uri}")
    if not args.wait:
        return 0
    sys.stdout.flush()
    return _await_answer(args, s3, output, failure, runtime)


def _await_answer(
    args: argparse.Namespace,
    s3: Client,
    output: S3Location,
    failure: S3Location | None,
    runtime: Runtime,
) -> int:
    polling = _polling(args, runtime.sleep, runtime.clock)
    try:
        found = wait_for_first(s3, [output] + ([failure] if failure else []), polling)
        answer = fetch(s3, found) if found is not None else b""
    except S3Error as error:
        _error(str(error))
        return EXIT_FAILED
    if found is None:
        _error(
            f"no answer at {output.uri} after {polling.timeout_seconds:.0f}s"
            " (the request may still run)"
        )
        return EXIT_FAILED
    if found == failure:
        _error(
            f"the endpoint failed the request ({failure.uri}): {answer.decode(errors='replace')}"
        )
        return EXIT_FAILED
    if args.output is not None:
        args.output.write_bytes(answer)
        _info(f"wrote {len(answer)} bytes to {args.output}")
    else:
        sys.stdout.write(answer.decode("utf-8", "replace").rstrip("\n") + "\n")
    return 0
