"""ops batch: a JSON Lines file through a SageMaker batch transform job, from upload to the
answers fetched. S3 through moto (objects really uploaded, answers really fetched), SageMaker
through botocore's Stubber (the exact requests)."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime

import pytest
from decision_adapter.http.openapi import DECISION_EXAMPLE as DECISION

from ops.cli import main
from tests.support.aws_stubs import stubbed_client
from tests.support.ops_background_fakes import (
    ANSWER,
    BUCKET,
    Clock,
    artifacts_bucket,
    factory,
    keys,
    put,
    request_file,
)


@pytest.fixture
def s3():
    with artifacts_bucket() as client:
        yield client


@pytest.fixture
def sagemaker():
    with stubbed_client("sagemaker") as stubbed:
        yield stubbed


# --- batch -----------------------------------------------------------------------------------
def transform_request(job, source, output, model="decision-model-1", **extra):
    return {
        "TransformJobName": job,
        "ModelName": model,
        "BatchStrategy": "MultiRecord",
        "ModelClientConfig": {"InvocationsTimeoutInSeconds": 3600, "InvocationsMaxRetries": 1},
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": source}},
            "ContentType": "application/jsonlines",
            "SplitType": "Line",
        },
        "TransformOutput": {
            "S3OutputPath": output,
            "Accept": "application/jsonlines",
            "AssembleWith": "Line",
        },
        "TransformResources": {"InstanceType": "ml.c6i.2xlarge", "InstanceCount": 1},
        # The container may hold the model for a whole body as long as SageMaker waits for it.
        "Environment": {
            "DECISION_JSONLINES_TIMEOUT_S": "3600",
            "DECISION_SCORING_DEADLINE_S": "3600",
            # Its own metrics dimension, not the real-time endpoint's.
            "DECISION_METRICS_ENDPOINT": f"{model}-batch",
        },
        **extra,
    }


def job_status(job, status, **extra):
    return {
        "TransformJobName": job,
        "TransformJobArn": f"arn:aws:sagemaker:eu-west-1:123456789012:transform-job/{job}",
        "TransformJobStatus": status,
        "ModelName": "decision-model-1",
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/k"}}
        },
        "TransformResources": {"InstanceType": "ml.c6i.2xlarge", "InstanceCount": 1},
        "CreationTime": "2026-01-01T00:00:00Z",
        **extra,
    }


# The archive a SageMaker model serves, its key naming the spec it was packaged from.
SPEC = "gemma3-270m"
ARCHIVE = f"s3://{BUCKET}/models/{SPEC}/{'a' * 64}/model.tar.gz"


def describes_model(stubber, archive=ARCHIVE, model="decision-model-1"):
    """DescribeModel answers that `model` serves `archive` (what --batch-strategy auto reads)."""
    stubber.add_response(
        "describe_model",
        {
            "ModelName": model,
            "PrimaryContainer": {"Image": "i", "ModelDataUrl": archive},
            "ExecutionRoleArn": "arn:aws:iam::123456789012:role/r",
            "CreationTime": "2026-01-01T00:00:00Z",
            "ModelArn": f"arn:aws:sagemaker:eu-west-1:123456789012:model/{model}",
        },
        {"ModelName": model},
    )


def queue_job(stubber, job, statuses, request, *, auto_reads_the_archive=True):
    """The job's requests; first, unless the rate is given, the model's description."""
    if auto_reads_the_archive:
        describes_model(stubber, model=request["ModelName"])
    stubber.add_response("create_transform_job", {"TransformJobArn": "arn:x"}, request)
    for status, extra in statuses:
        stubber.add_response(
            "describe_transform_job", job_status(job, status, **extra), {"TransformJobName": job}
        )


def test_batch_uploads_a_local_file_runs_the_job_and_fetches_the_answers(
    s3, sagemaker, tmp_path, capsys
):
    client, stubber = sagemaker
    job = "decisions-test"
    prefix = f"s3://{BUCKET}/batch/{job}"
    source = f"{prefix}/input/decisions.jsonl"
    queue_job(
        stubber,
        job,
        [("InProgress", {}), ("InProgress", {}), ("Completed", {})],
        transform_request(job, source, f"{prefix}/output", MaxPayloadInMB=2),
    )
    lines = (json.dumps(DECISION) + "\n") * 3
    answers = (json.dumps(ANSWER) + "\n") * 3
    # SageMaker writes the answers once the job has run a while.
    clock = Clock(lambda slept: put(s3, f"{prefix}/output/decisions.jsonl.out", answers.encode()))
    results = tmp_path / "answers.jsonl"
    argv = [
        "batch",
        request_file(tmp_path, "decisions.jsonl", lines),
        "--model",
        "decision-model-1",
    ]
    argv += ["--location", f"s3://{BUCKET}/batch", "--job-name", job, "--max-payload-mb", "2"]
    argv += ["--results", str(results)]
    code = main(argv, clients=factory(s3=s3, sagemaker=client), sleep=clock.sleep, clock=clock)
    assert code == 0
    uploaded = s3.get_object(Bucket=BUCKET, Key=f"batch/{job}/input/decisions.jsonl")["Body"]
    assert uploaded.read().decode() == lines
    assert results.read_text() == answers
    assert capsys.readouterr().out.splitlines() == [
        f"RESULTS_LOCATION={prefix}/output/decisions.jsonl.out",
        f"RESULTS_FILE={results}",
    ]


def test_batch_runs_an_s3_file_on_the_model_an_endpoint_serves(
    s3, sagemaker, tmp_path, monkeypatch
):
    client, stubber = sagemaker
    monkeypatch.chdir(tmp_path)
    queue_model_of_endpoint(stubber, "decision-cpu")
    source = f"s3://{BUCKET}/data/day.jsonl"
    output = f"s3://{BUCKET}/batch/job-2/output"
    queue_job(stubber, "job-2", [("Completed", {})], transform_request("job-2", source, output))
    put(s3, f"{output}/day.jsonl.out", b"answers\n")
    argv = ["batch", source, "--endpoint", "decision-cpu", "--job-name", "job-2"]
    argv += ["--location", f"s3://{BUCKET}/batch/"]
    assert main(argv, clients=factory(s3=s3, sagemaker=client)) == 0
    assert (tmp_path / "day.jsonl.out").read_bytes() == b"answers\n"
    assert keys(s3, "batch/job-2/input") == []  # nothing uploaded


def batch_over_s3(s3, sagemaker, job, statuses, *options):
    """`ops batch` of an S3 file on a model, its job going through `statuses`; (exit, clock)."""
    client, stubber = sagemaker
    source = f"s3://{BUCKET}/data/day.jsonl"
    queue_job(
        stubber, job, statuses, transform_request(job, source, f"s3://{BUCKET}/batch/{job}/output")
    )
    argv = ["batch", source, "--model", "decision-model-1", "--job-name", job]
    argv += ["--location", f"s3://{BUCKET}/batch", *options]
    clock = Clock()
    code = main(argv, clients=factory(s3=s3, sagemaker=client), sleep=clock.sleep, clock=clock)
    return code, clock


def test_a_failed_job_reports_its_failure_reason(s3, sagemaker, capsys):
    reason = "ClientError: See job logs. Access denied to s3://artifacts-bucket/data/day.jsonl"
    statuses = [("InProgress", {}), ("Failed", {"FailureReason": reason})]
    code, _ = batch_over_s3(s3, sagemaker, "job-3", statuses)
    assert code == 1
    assert f"ops: error: transform job job-3 failed: {reason}" in capsys.readouterr().err


def test_a_job_past_its_timeout_is_reported_with_how_to_stop_it(s3, sagemaker, capsys):
    statuses = [("InProgress", {})] * 3
    code, _ = batch_over_s3(s3, sagemaker, "job-4", statuses, "--timeout-minutes", "1")
    assert code == 1
    err = capsys.readouterr().err
    assert "transform job job-4 still InProgress after 60s" in err
    assert "aws sagemaker stop-transform-job --transform-job-name job-4" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["x.jsonl", "--model", "m"],
            "no S3 location for the job: pass --location s3://BUCKET/PREFIX or set "
            "OPS_BATCH_LOCATION",
        ),
        (
            ["x.jsonl", "--location", "s3://bkt/p"],
            "no model: pass --model NAME or --endpoint NAME, or set OPS_ENDPOINT_NAME",
        ),
        (
            ["x.csv", "--location", "s3://bkt/p", "--model", "m"],
            "x.csv: a batch input is a JSON Lines file (.jsonl or .jsonlines)",
        ),
        (
            ["x.jsonl", "--location", "bkt/p", "--model", "m"],
            "--location: 'bkt/p' is not an s3://<bucket>/<key> location",
        ),
        (
            ["s3://Bkt/x.jsonl", "--location", "s3://bkt/p", "--model", "m"],
            "input: 's3://Bkt/x.jsonl' is not an s3://<bucket>/<key> location",
        ),
    ],
)
def test_batch_usage_errors_say_what_is_missing(capsys, monkeypatch, argv, message):
    for name in ("OPS_BATCH_LOCATION", "OPS_ENDPOINT_NAME"):
        monkeypatch.delenv(name, raising=False)
    clients = factory(s3=object(), sagemaker=object())
    assert main(["batch", *argv], clients=clients) == 2
    assert capsys.readouterr().err == f"ops: error: {message}\n"


# --- defaults, environment, and the messages an operator reads ---------------------------------
def test_batch_waits_three_hours_by_default_looking_every_30_seconds(s3, sagemaker, capsys):
    code, clock = batch_over_s3(s3, sagemaker, "job-6", [("InProgress", {})] * 361)
    assert code == 1 and (clock.now, clock.slept) == (10800, 360)
    assert "still InProgress after 10800s" in capsys.readouterr().err


def test_batch_sends_counts_as_numbers_and_reports_each_step(s3, sagemaker, tmp_path, capsys):
    client, stubber = sagemaker
    prefix = f"s3://{BUCKET}/batch/job-7"
    source = f"{prefix}/input/day.jsonl"
    request = transform_request("job-7", source, f"{prefix}/output")
    request["TransformResources"] = {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2}
    request["ModelClientConfig"]["InvocationsTimeoutInSeconds"] = 600
    request["Environment"] = {
        "DECISION_JSONLINES_TIMEOUT_S": "600",
        "DECISION_SCORING_DEADLINE_S": "600",
        "DECISION_METRICS_ENDPOINT": "decision-model-1-batch",
    }
    queue_job(stubber, "job-7", [("InProgress", {}), ("Completed", {})], request)
    clock = Clock(lambda slept: put(s3, f"{prefix}/output/day.jsonl.out", b"answers\n"))
    path = request_file(tmp_path, "day.jsonl", json.dumps(DECISION) + "\n")
    argv = ["batch", path, "--model", "decision-model-1", "--job-name", "job-7"]
    argv += ["--location", f"s3://{BUCKET}/batch", "--instance-type", "ml.m5.xlarge"]
    argv += ["--instance-count", "2", "--invocation-timeout-seconds", "600"]
    argv += ["--results", str(tmp_path / "out.jsonl")]
    code = main(argv, clients=factory(s3=s3, sagemaker=client), sleep=clock.sleep, clock=clock)
    assert code == 0
    assert capsys.readouterr().err.splitlines() == [
        f"uploaded {path} to {source}",
        "MultiRecord: no measured rate to tell how long a full payload takes; pass "
        "--lines-per-second (or --batch-strategy SingleRecord) where lines are slow",
        "started transform job job-7 on model decision-model-1",
        "[     0s] InProgress",
        "[    30s] Completed",
    ]


def queue_model_of_endpoint(stubber, endpoint, variant=None):
    stubber.add_response(
        "describe_endpoint",
        {
            "EndpointName": endpoint,
            "EndpointArn": f"arn:aws:sagemaker:eu-west-1:123456789012:endpoint/{endpoint}",
            "EndpointConfigName": "config-1",
            "EndpointStatus": "InService",
            "CreationTime": "2026-01-01T00:00:00Z",
            "LastModifiedTime": "2026-01-01T00:00:00Z",
        },
        {"EndpointName": endpoint},
    )
    stubber.add_response(
        "describe_endpoint_config",
        {
            "EndpointConfigName": "config-1",
            "EndpointConfigArn": "arn:aws:sagemaker:eu-west-1:123456789012:endpoint-config/c",
            "ProductionVariants": [
                {"VariantName": "AllTraffic", "ModelName": "decision-model-1", **(variant or {})}
            ],
            "CreationTime": "2026-01-01T00:00:00Z",
        },
        {"EndpointConfigName": "config-1"},
    )


@pytest.fixture
def far_east(monkeypatch):
    """Local time 14 hours ahead of UTC, so that a name taken from local time shows."""
    monkeypatch.setenv("TZ", "Etc/GMT-14")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_batch_takes_location_and_endpoint_from_the_environment_and_names_the_job_in_utc(
    s3, sagemaker, tmp_path, monkeypatch, capsys, far_east
):
    client, stubber = sagemaker
    monkeypatch.setenv("OPS_BATCH_LOCATION", f"s3://{BUCKET}/env-batch")
    monkeypatch.setenv("OPS_ENDPOINT_NAME", "decision-cpu")
    queue_model_of_endpoint(stubber, "decision-cpu")
    describes_model(stubber)
    stubber.add_response("create_transform_job", {"TransformJobArn": "arn:x"}, None)
    for status in ("InProgress", "Completed"):
        stubber.add_response("describe_transform_job", job_status("j", status), None)

    def answer(_):  # SageMaker writes next to the input the CLI uploaded under the job name
        (key,) = keys(s3, "env-batch/")
        put(s3, f"s3://{BUCKET}/{key.replace('/input/', '/output/')}.out", b"a\n")

    clock = Clock(answer)
    path = request_file(tmp_path, "day.jsonl", json.dumps(DECISION) + "\n")
    argv = ["batch", path, "--results", str(tmp_path / "out.jsonl")]
    code = main(argv, clients=factory(s3=s3, sagemaker=client), sleep=clock.sleep, clock=clock)
    assert code == 0
    location = capsys.readouterr().out.splitlines()[0]
    match = re.fullmatch(
        rf"RESULTS_LOCATION=s3://{BUCKET}/env-batch/(decisions-\d{{8}}-\d{{6}})/output/day.jsonl.out",
        location,
    )
    assert match, location
    named = datetime.strptime(match[1], "decisions-%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - named).total_seconds()) < 600


def test_batch_reports_a_stopped_job_without_a_reason(s3, sagemaker, capsys):
    code, _ = batch_over_s3(s3, sagemaker, "job-5", [("Stopped", {})])
    assert code == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "ops: error: transform job job-5 stopped: no reason given"
    )


@pytest.mark.parametrize(
    "variant",
    [
        {"InstancePools": [{"InstanceType": "ml.g6e.xlarge", "Priority": 1}]},
        {"InstanceType": "ml.g5.2xlarge"},
    ],
)
def test_batch_refuses_a_gpu_endpoint_in_one_line_before_uploading(
    s3, sagemaker, tmp_path, capsys, variant
):
    """The CUDA 13 image needs driver 580; batch transform's AMIs have 470 and 535 only."""
    client, stubber = sagemaker
    queue_model_of_endpoint(stubber, "decision-models-decision-gpu", variant)
    argv = ["batch", request_file(tmp_path, "d.jsonl", json.dumps(DECISION) + "\n")]
    argv += ["--endpoint", "decision-models-decision-gpu", "--location", f"s3://{BUCKET}/batch"]
    assert main(argv, clients=factory(s3=s3, sagemaker=client)) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ops: error: endpoint decision-models-decision-gpu runs on GPUs")
    assert "--endpoint decision-models-decision-cpu" in line
    stubber.assert_no_pending_responses()  # no transform job was started
    assert keys(s3, "batch/") == []


@pytest.mark.parametrize(
    "rate, strategy",
    [
        (1.0, "SingleRecord"),  # 1 MiB of 292-byte lines: 3,591 lines, an hour at 1/s
        (50.0, "MultiRecord"),  # a minute
    ],
)
def test_batch_sends_one_line_per_request_when_a_full_payload_would_not_finish(
    s3, sagemaker, tmp_path, capsys, rate, strategy
):
    """MultiRecord packs a megabyte of lines into a request; at 1 line/s that passes half the
    hour SageMaker allows, the retry is refused and the job fails hours later."""
    client, stubber = sagemaker
    prefix = f"s3://{BUCKET}/batch/job-8"
    source = f"{prefix}/input/day.jsonl"
    request = transform_request("job-8", source, f"{prefix}/output", BatchStrategy=strategy)
    statuses = [("InProgress", {}), ("Completed", {})]
    queue_job(stubber, "job-8", statuses, request, auto_reads_the_archive=False)
    clock = Clock(lambda slept: put(s3, f"{prefix}/output/day.jsonl.out", b"answers\n"))
    path = request_file(tmp_path, "day.jsonl", (json.dumps(DECISION) + "\n") * 10)
    argv = ["batch", path, "--model", "decision-model-1", "--job-name", "job-8"]
    argv += ["--location", f"s3://{BUCKET}/batch", "--lines-per-second", str(rate)]
    argv += ["--results", str(tmp_path / "out.jsonl")]
    code = main(argv, clients=factory(s3=s3, sagemaker=client), sleep=clock.sleep, clock=clock)
    assert code == 0
    assert strategy + ": a full payload of about" in capsys.readouterr().err


def measured(tmp_path, monkeypatch, model, rate):
    """A committed measurement of `model` on ml.c6i.2xlarge at `rate` decisions/s."""
    from stacks import capacity

    monkeypatch.setattr(capacity, "MEASUREMENTS", tmp_path / "measurements")
    path = capacity.measurement_path(model, "ml.c6i.2xlarge")
    path.parent.mkdir(parents=True)
    fields = {"measured": True, "model": model, "instance_type": "ml.c6i.2xlarge"}
    path.write_text(json.dumps({**fields, "throughput_rps": rate, "service_p95_ms": 1900}))


def test_auto_reads_the_rate_of_the_model_the_served_archive_holds(
    s3, sagemaker, tmp_path, monkeypatch, capsys
):
    """The archive's key names its spec (gemma3-270m); cdk.json's builds.modelSpec names another
    (the default, qwen3.5-4b-q4_k_m), whose rate would be the wrong one or none."""
    from stacks.config import Builds

    assert Builds().model != SPEC
    measured(tmp_path, monkeypatch, SPEC, 1.0)  # a full payload: an hour, over half the timeout
    client, stubber = sagemaker
    prefix = f"s3://{BUCKET}/batch/job-9"
    source = f"{prefix}/input/day.jsonl"
    request = transform_request("job-9", source, f"{prefix}/output", BatchStrategy="SingleRecord")
    queue_job(stubber, "job-9", [("Completed", {})], request)
    put(s3, f"{prefix}/output/day.jsonl.out", b"answers\n")
    path = request_file(tmp_path, "day.jsonl", (json.dumps(DECISION) + "\n") * 10)
    argv = ["batch", path, "--model", "decision-model-1", "--job-name", "job-9"]
    argv += ["--location", f"s3://{BUCKET}/batch", "--results", str(tmp_path / "out.jsonl")]
    assert main(argv, clients=factory(s3=s3, sagemaker=client), sleep=lambda s: None) == 0
    assert "SingleRecord: a full payload of about" in capsys.readouterr().err
    stubber.assert_no_pending_responses()


def test_an_archive_whose_key_names_no_spec_is_read_as_builds_model_spec(tmp_path, monkeypatch):
    from ops import batch_strategy
    from stacks.config import Builds

    measured(tmp_path, monkeypatch, Builds().model, 0.8)
    by_hand = f"s3://{BUCKET}/uploaded/model.tar.gz"
    assert batch_strategy.measured_rate("ml.c6i.2xlarge", by_hand) == 0.8
    assert batch_strategy.measured_rate("ml.c6i.2xlarge", None) == 0.8
    assert batch_strategy.measured_rate("ml.c6i.2xlarge", ARCHIVE) is None  # gemma3-270m's
    assert batch_strategy.measured_rate("ml.m5.xlarge", by_hand) is None


def test_the_payload_auto_assumes_is_the_containers():
    from decision_adapter.http.execution_parameters import preferred
    from decision_adapter.settings import Settings

    from ops.batch_strategy import CONTAINER_PAYLOAD_MB

    assert preferred(Settings())["MaxPayloadInMB"] == CONTAINER_PAYLOAD_MB
