"""python -m ops submit (asynchronous endpoint) and python -m ops batch (batch transform):
decisions that may take their time, answered through S3."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

from ops.batch_strategy import STRATEGIES, choose, mean_line_bytes, measured_rate
from ops.clients import ClientFactory
from ops.common import (
    EXIT_FAILED,
    UsageError,
    _error,
    _info,
    _polling,
    _stack_option,
    _waiting_options,
)
from ops.s3_objects import S3Error, S3Location, fetch, upload, wait_for_first
from ops.transform import (
    JSON_LINES,
    NotForBatch,
    TransformFailed,
    TransformTimedOut,
    model_of_endpoint,
    result_location,
    start_transform,
    wait_for_transform,
)

JSON_LINES_SUFFIXES = (".jsonl", ".jsonlines")


def add_commands(commands) -> None:
    submit = commands.add_parser(
        "submit",
        help="send a body to an asynchronous endpoint through S3",  # pragma: no mutate
    )
    submit.add_argument(
        "body",
        help="JSON file, or JSON Lines (.jsonl) of several bodies",  # pragma: no mutate
    )
    submit.add_argument(
        "--endpoint",
        help="asynchronous endpoint (default: $OPS_ASYNC_ENDPOINT_NAME,"  # pragma: no mutate
        " else the --stack output)",  # pragma: no mutate
    )
    submit.add_argument(
        "--input-location",
        help="s3:// prefix for request bodies (default: the --stack output)",  # pragma: no mutate
    )
    _stack_option(
        submit,
        "OPS_ENDPOINT_STACK",
        "endpoint stack whose outputs name the endpoint and input location",  # pragma: no mutate
    )
    submit.add_argument(
        "--wait",
        action="store_true",
        help="wait for the answer (or the error) and print it",  # pragma: no mutate
    )
    submit.add_argument(
        "--invocation-timeout-seconds",
        type=_invocation_timeout,
        default=3600,
        help="time the endpoint may take for the request (default: 3600,"  # pragma: no mutate
        " SageMaker's most; its own default is 900)",  # pragma: no mutate
    )
    _waiting_options(submit, poll=5.0, timeout=60.0)
    submit.add_argument(
        "--output",
        type=Path,
        help="with --wait: write the answer to this file",  # pragma: no mutate
    )

    batch = commands.add_parser(
        "batch",
        help="run a batch transform job over a JSON Lines file",  # pragma: no mutate
    )
    batch.add_argument(
        "input",
        help="local .jsonl file (uploaded first) or s3:// object",  # pragma: no mutate
    )
    batch.add_argument(
        "--location",
        default=os.environ.get("OPS_BATCH_LOCATION"),
        help="s3:// prefix for the job's input and output"  # pragma: no mutate
        " (default: $OPS_BATCH_LOCATION)",  # pragma: no mutate
    )
    model = batch.add_mutually_exclusive_group()
    model.add_argument(
        "--model",
        help="SageMaker model to run",  # pragma: no mutate
    )
    model.add_argument(
        "--endpoint",
        help="run the model this endpoint serves"  # pragma: no mutate
        " (default: $OPS_ENDPOINT_NAME)",  # pragma: no mutate
    )
    batch.add_argument(
        "--instance-type",
        default="ml.c6i.2xlarge",
        help="transform instance type (default: ml.c6i.2xlarge)",  # pragma: no mutate
    )
    batch.add_argument(
        "--instance-count",
        type=int,
        default=1,
        help="transform instances (default: 1)",  # pragma: no mutate
    )
    batch.add_argument(
        "--job-name",
        help="transform job name (default: decisions-<time>)",  # pragma: no mutate
    )
    batch.add_argument(
        "--max-payload-mb",
        type=int,
        help="MB of lines per request (default: the container's)",  # pragma: no mutate
    )
    batch.add_argument(
        "--invocation-timeout-seconds",
        type=int,
        default=3600,
        help="time for one request of many lines (default: 3600)",  # pragma: no mutate
    )
    batch.add_argument(
        "--batch-strategy",
        choices=STRATEGIES,
        default="auto",
        help="lines per request: MultiRecord packs a payload, SingleRecord"  # pragma: no mutate
        " sends one; auto picks SingleRecord when a full payload would not"  # pragma: no mutate
        " finish in time",  # pragma: no mutate
    )
    batch.add_argument(
        "--lines-per-second",
        type=float,
        help="one instance's rate, for auto (default: the committed"  # pragma: no mutate
        " measurement of the release's model on --instance-type)",  # pragma: no mutate
    )
    _waiting_options(batch, poll=30.0, timeout=180.0)
    batch.add_argument(
        "--results",
        type=Path,
        help="local file for the answers (default: <input name>.out)",  # pragma: no mutate
    )


def _invocation_timeout(value: str) -> int:
    """InvokeEndpointAsync's InvocationTimeoutSeconds: 1 to 3600."""
    seconds = int(value) if value.isdigit() else 0
    if not 1 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of seconds, 1-3600")
    return seconds


def _location(uri: str, option: str) -> S3Location:
    try:
        return S3Location.parse(uri)
    except ValueError as error:
        raise UsageError(f"{option}: {error}") from None


def _stack_outputs(make_client: ClientFactory, stack: str) -> dict[str, str]:
    from botocore.exceptions import ClientError

    try:
        stacks = make_client("cloudformation").describe_stacks(StackName=stack)["Stacks"]
    except ClientError as error:
        raise UsageError(f"cannot read the outputs of stack {stack}: {error}") from None
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}


def _read_request(path: str) -> tuple[bytes, str]:
    """The file's bytes and content type, checked locally: a typo is a clear local error."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    json_lines = path.endswith(JSON_LINES_SUFFIXES)
    lines = raw.splitlines() if json_lines else [raw]
    for number, line in enumerate(lines, start=1):
        try:
            json.loads(line)
        except ValueError as error:
            where = f" line {number}" if json_lines else ""
            raise UsageError(f"{path}{where} is not JSON: {error}") from None
    return raw, JSON_LINES if json_lines else "application/json"


def submit(args, make_client: ClientFactory, sleep, clock) -> int:
    from botocore.exceptions import ClientError

    outputs = _stack_outputs(make_client, args.stack) if args.stack else {}
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
    body, content_type = _read_request(args.body)
    request = _location(prefix, "--input-location").child(f"{uuid.uuid4()}-{Path(args.body).name}")
    s3 = make_client("s3")
    try:
        upload(s3, request, body, content_type)
        reply = make_client("sagemaker-runtime").invoke_endpoint_async(
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
    return _await_answer(args, s3, output, failure, sleep, clock)


def _await_answer(args, s3, output, failure, sleep, clock) -> int:
    polling = _polling(args, sleep, clock)
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


def batch(args, make_client: ClientFactory, sleep, clock) -> int:
    from botocore.exceptions import ClientError

    if not args.location:
        raise UsageError(
            "no S3 location for the job: pass --location s3://BUCKET/PREFIX or set "
            "OPS_BATCH_LOCATION"
        )
    endpoint = args.endpoint or os.environ.get("OPS_ENDPOINT_NAME")
    if not args.model and not endpoint:
        raise UsageError("no model: pass --model NAME or --endpoint NAME, or set OPS_ENDPOINT_NAME")
    job_name = args.job_name or time.strftime("decisions-%Y%m%d-%H%M%S", time.gmtime())
    location = _location(args.location, "--location").child(job_name)
    s3, sagemaker = make_client("s3"), make_client("sagemaker")
    try:
        model = args.model or model_of_endpoint(sagemaker, endpoint)
        if args.input.startswith("s3://"):
            source = _location(args.input, "input")
        else:
            if not args.input.endswith(JSON_LINES_SUFFIXES):
                raise UsageError(
                    f"{args.input}: a batch input is a JSON Lines file (.jsonl or .jsonlines)"
                )
            body, _ = _read_request(args.input)
            source = location.child(f"input/{Path(args.input).name}")
            upload(s3, source, body, JSON_LINES)
            _info(f"uploaded {args.input} to {source.uri}")
        output = location.child("output")
        strategy = args.batch_strategy
        if strategy == "auto":
            chosen = choose(
                line_bytes=None
                if args.input.startswith("s3://")
                else mean_line_bytes(Path(args.input)),
                payload_mb=args.max_payload_mb,
                lines_per_second=args.lines_per_second or measured_rate(args.instance_type),
                invocation_timeout_s=args.invocation_timeout_seconds,
            )
            strategy = chosen.strategy
            _info(chosen.reason)
        start_transform(
            sagemaker,
            job_name=job_name,
            model=model,
            source=source,
            output=output,
            instance_type=args.instance_type,
            instance_count=args.instance_count,
            max_payload_mb=args.max_payload_mb,
            invocation_timeout_s=args.invocation_timeout_seconds,
            batch_strategy=strategy,
        )
        _info(f"started transform job {job_name} on model {model}")
        wait_for_transform(sagemaker, job_name, _polling(args, sleep, clock), report=_info)
        results = result_location(source, output)
        answers = fetch(s3, results)
    except (S3Error, ClientError, NotForBatch, TransformFailed, TransformTimedOut) as error:
        _error(str(error))
        return EXIT_FAILED
    target = args.results or Path(f"{source.name}.out")
    target.write_bytes(answers)
    print(f"RESULTS_LOCATION={results.uri}")
    print(f"RESULTS_FILE={target}")
    return 0
