"""python -m ops batch INPUT: run a batch transform job over a JSON Lines file (uploaded first,
or already in S3) and fetch its answers."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from ops.background import JSON_LINES_SUFFIXES, read_request, s3_location
from ops.batch_strategy import STRATEGIES, choose, mean_line_bytes, measured_rate
from ops.common import (
    EXIT_FAILED,
    Runtime,
    Subcommands,
    UsageError,
    _error,
    _info,
    _polling,
    _waiting_options,
)
from ops.s3_objects import S3Error, fetch, upload
from ops.transform import (
    JSON_LINES,
    NotForBatch,
    TransformFailed,
    TransformTimedOut,
    archive_of_model,
    model_of_endpoint,
    result_location,
    start_transform,
    wait_for_transform,
)

NAME = "batch"


def add_parser(commands: Subcommands) -> None:
    batch = commands.add_parser(
        NAME,
        help="run a batch transform job over a JSON Lines file",
    )
    batch.add_argument(
        "input",
        help="local .jsonl file (uploaded first) or s3:// object",
    )
    batch.add_argument(
        "--location",
        default=os.environ.get("OPS_BATCH_LOCATION"),
        help="s3:// prefix for the job's input and output" " (default: $OPS_BATCH_LOCATION)",
    )
    model = batch.add_mutually_exclusive_group()
    model.add_argument(
        "--model",
        help="SageMaker model to run",
    )
    model.add_argument(
        "--endpoint",
        help="run the model this endpoint serves" " (default: $OPS_ENDPOINT_NAME)",
    )
    batch.add_argument(
        "--instance-type",
        default="ml.c6i.2xlarge",
        help="transform instance type (default: ml.c6i.2xlarge)",
    )
    batch.add_argument(
        "--instance-count",
        type=int,
        default=1,
        help="transform instances (default: 1)",
    )
    batch.add_argument(
        "--job-name",
        help="transform job name (default: decisions-<time>)",
    )
    batch.add_argument(
        "--max-payload-mb",
        type=int,
        help="MB of lines per request (default: the container's)",
    )
    batch.add_argument(
        "--invocation-timeout-seconds",
        type=int,
        default=3600,
        help="time for one request of many lines (default: 3600)",
    )
    batch.add_argument(
        "--batch-strategy",
        choices=STRATEGIES,
        default="auto",
        help="lines per request: MultiRecord packs a payload, SingleRecord"
        " sends one; auto picks SingleRecord when a full payload would not"
        " finish in time",
    )
    batch.add_argument(
        "--lines-per-second",
        type=float,
        help="one instance's rate, for auto (default: the committed"
        " measurement, on --instance-type, of the model the archive of --model or"
        " --endpoint holds)",
    )
    _waiting_options(batch, poll=30.0, timeout=180.0)
    batch.add_argument(
        "--results",
        type=Path,
        help="local file for the answers (default: <input name>.out)",
    )


def run(args: argparse.Namespace, runtime: Runtime) -> int:
    from botocore.exceptions import ClientError

    if not args.location:
        raise UsageError(
            "no S3 location for the job: pass --location s3://BUCKET/PREFIX or set "
            "OPS_BATCH_LOCATION"
        )
    endpoint: str = args.endpoint or os.environ.get("OPS_ENDPOINT_NAME") or ""
    if not args.model and not endpoint:
        raise UsageError("no model: pass --model NAME or --endpoint NAME, or set OPS_ENDPOINT_NAME")
    job_name = args.job_name or time.strftime("decisions-%Y%m%d-%H%M%S", time.gmtime())
    location = s3_location(args.location, "--location").child(job_name)
    s3, sagemaker = runtime.clients("s3"), runtime.clients("sagemaker")
    try:
        model = args.model or model_of_endpoint(sagemaker, endpoint)
        if args.input.startswith("s3://"):
            source = s3_location(args.input, "input")
        else:
            if not args.input.endswith(JSON_LINES_SUFFIXES):
                raise UsageError(
                    f"{args.input}: a batch input is a JSON Lines file (.jsonl or .jsonlines)"
                )
            body, _ = read_request(args.input)
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
                lines_per_second=args.lines_per_second
                or measured_rate(args.instance_type, archive_of_model(sagemaker, model)),
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
        wait_for_transform(
            sagemaker, job_name, _polling(args, runtime.sleep, runtime.clock), report=_info
        )
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
