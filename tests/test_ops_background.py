"""ops submit and ops batch: S3 through moto (objects really uploaded, answers really fetched),
SageMaker and CloudFormation through botocore's Stubber (the exact requests)."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import ANY
from decision_adapter.openapi import DECISION_EXAMPLE as DECISION
from moto import mock_aws

from ops.cli import main
from ops.s3_objects import S3Location, exists
from tests.aws_stubs import stack_description, stubbed_client

BUCKET = "artifacts-bucket"
ENDPOINT = "decision-models-decision-async"
ANSWER = {"result": {"id": "d", "probabilities": [0.75, 0.25]}}
OUTPUT = f"s3://{BUCKET}/async/output/abc.out"
FAILURE = f"s3://{BUCKET}/async/failure/abc-error.out"


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client(
            "s3", region_name="eu-west-1", aws_access_key_id="test", aws_secret_access_key="test"
        )
        client.create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
        )
        yield client


@pytest.fixture
def sagemaker():
    with stubbed_client("sagemaker") as stubbed:
        yield stubbed


def factory(**clients):
    return lambda service: clients[service.replace("-", "_")]


def keys(s3, prefix: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return [item["Key"] for item in listed]


def put(s3, uri: str, body: bytes) -> None:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    s3.put_object(Bucket=bucket, Key=key, Body=body)


class Clock:
    """A fake clock that moves only when the CLI sleeps; `on_sleep` acts as AWS would."""

    def __init__(self, on_sleep=None) -> None:
        self.now, self.slept, self.on_sleep = 0.0, 0, on_sleep

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += 1
        if self.on_sleep:
            self.on_sleep(self.slept)

    def __call__(self) -> float:
        return self.now


# --- submit ----------------------------------------------------------------------------------
def queue_invoke(runtime, content_type="application/json", invocation_timeout_s=3600):
    client, stubber = runtime
    stubber.add_response(
        "invoke_endpoint_async",
        {"InferenceId": "abc", "OutputLocation": OUTPUT, "FailureLocation": FAILURE},
        {
            "EndpointName": ENDPOINT,
            "InputLocation": ANY,
            "ContentType": content_type,
            "InvocationTimeoutSeconds": invocation_timeout_s,
        },
    )
    return client


def request_file(tmp_path, name="decision.json", content=None):
    path = tmp_path / name
    path.write_text(json.dumps(DECISION) if content is None else content)
    return str(path)


def test_submit_uploads_the_body_invokes_and_prints_where_the_answer_will_be(
    s3, runtime, tmp_path, capsys
):
    client = queue_invoke(runtime)
    argv = ["submit", request_file(tmp_path), "--endpoint", ENDPOINT]
    argv += ["--input-location", f"s3://{BUCKET}/async/input"]
    assert main(argv, clients=factory(s3=s3, sagemaker_runtime=client)) == 0
    (key,) = keys(s3, "async/input/")
    assert key.endswith("-decision.json")
    uploaded = s3.get_object(Bucket=BUCKET, Key=key)
    assert json.loads(uploaded["Body"].read()) == DECISION
    assert uploaded["ContentType"] == "application/json"
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"INPUT_LOCATION=s3://{BUCKET}/{key}",
        f"OUTPUT_LOCATION={OUTPUT}",
        f"FAILURE_LOCATION={FAILURE}",
    ]


def test_submit_waits_for_the_answer_that_appears_and_prints_it(s3, runtime, tmp_path, capsys):
    client = queue_invoke(runtime, content_type="application/jsonlines")
    lines = json.dumps(DECISION) + "\n" + json.dumps(DECISION) + "\n"
    clock = Clock(lambda slept: slept == 2 and put(s3, OUTPUT, json.dumps(ANSWER).encode()))
    argv = ["submit", request_file(tmp_path, "many.jsonl", lines), "--endpoint", ENDPOINT]
    argv += ["--input-location", f"s3://{BUCKET}/async/input/", "--wait", "--poll-seconds", "5"]
    code = main(
        argv, clients=factory(s3=s3, sagemaker_runtime=client), sleep=clock.sleep, clock=clock
    )
    assert code == 0
    assert capsys.readouterr().out.splitlines()[-1] == json.dumps(ANSWER)
    assert clock.slept == 2


def test_submit_writes_the_answer_to_a_file_and_says_how_many_bytes(s3, runtime, tmp_path, capsys):
    client = queue_invoke(runtime)
    put(s3, OUTPUT, b'{"result": 1}')
    target = tmp_path / "answer.json"
    argv = ["submit", request_file(tmp_path), "--endpoint", ENDPOINT, "--wait"]
    argv += ["--input-location", f"s3://{BUCKET}/async/input", "--output", str(target)]
    assert main(argv, clients=factory(s3=s3, sagemaker_runtime=client)) == 0
    assert target.read_bytes() == b'{"result": 1}'
    assert capsys.readouterr().err == f"wrote 13 bytes to {target}\n"


def test_submit_reports_the_failure_object_as_an_error(s3, runtime, tmp_path, capsys):
    client = queue_invoke(runtime)
    clock = Clock(lambda slept: put(s3, FAILURE, b"ModelError: 422 decision.options"))
    argv = ["submit", request_file(tmp_path), "--endpoint", ENDPOINT, "--wait"]
    argv += ["--input-location", f"s3://{BUCKET}/async/input"]
    code = main(
        argv, clients=factory(s3=s3, sagemaker_runtime=client), sleep=clock.sleep, clock=clock
    )
    assert code == 1
    assert capsys.readouterr().err == (
        f"ops: error: the endpoint failed the request ({FAILURE}): "
        "ModelError: 422 decision.options\n"
    )


def test_submit_gives_up_after_its_timeout(s3, runtime, tmp_path, capsys):
    client = queue_invoke(runtime)
    clock = Clock()
    argv = ["submit", request_file(tmp_path), "--endpoint", ENDPOINT, "--wait", "--timeout-minutes"]
    argv += ["2", "--poll-seconds", "30", "--input-location", f"s3://{BUCKET}/async/input"]
    code = main(
        argv, clients=factory(s3=s3, sagemaker_runtime=client), sleep=clock.sleep, clock=clock
    )
    assert code == 1 and clock.now == 120
    assert f"no answer at {OUTPUT} after 120s" in capsys.readouterr().err


def test_submit_finds_endpoint_and_input_location_in_the_stack_outputs(s3, runtime, tmp_path):
    client = queue_invoke(runtime)
    with stubbed_client("cloudformation") as (cloudformation, stubber):
        outputs = {
            "DecisionAsyncEndpointName": ENDPOINT,
            "DecisionAsyncInputLocation": f"s3://{BUCKET}/async/input/",
        }
        stubber.add_response(
            "describe_stacks",
            stack_description("DecisionModels-Endpoints", outputs),
            {"StackName": "DecisionModels-Endpoints"},
        )
        clients = factory(s3=s3, sagemaker_runtime=client, cloudformation=cloudformation)
        argv = ["submit", request_file(tmp_path), "--stack", "DecisionModels-Endpoints"]
        assert main(argv, clients=clients) == 0
    assert len(keys(s3, "async/input/")) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--input-location", f"s3://{BUCKET}/x"],
            "no asynchronous endpoint: pass --endpoint or --stack, or set OPS_ASYNC_ENDPOINT_NAME",
        ),
        (
            ["--endpoint", ENDPOINT],
            "no input location: pass --input-location s3://BUCKET/PREFIX or --stack",
        ),
        (
            ["--endpoint", ENDPOINT, "--input-location", "bucket/x"],
            "--input-location: 'bucket/x' is not an s3://<bucket>/<key> location",
        ),
    ],
)
def test_submit_usage_errors_say_what_is_missing(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.delenv("OPS_ASYNC_ENDPOINT_NAME", raising=False)
    monkeypatch.delenv("OPS_ENDPOINT_STACK", raising=False)
    assert main(["submit", request_file(tmp_path), *argv], clients=factory()) == 2
    assert capsys.readouterr().err == f"ops: error: {message}\n"


def test_submit_refuses_a_body_that_is_not_json_naming_the_line(tmp_path, capsys):
    path = request_file(tmp_path, "bad.jsonl", json.dumps(DECISION) + "\n{oops\n")
    argv = ["submit", path, "--endpoint", ENDPOINT, "--input-location", f"s3://{BUCKET}/x"]
    assert main(argv, clients=factory()) == 2
    assert f"{path} line 2 is not JSON" in capsys.readouterr().err


def test_submit_names_a_missing_bucket_and_a_missing_endpoint(s3, runtime, tmp_path, capsys):
    argv = ["submit", request_file(tmp_path), "--endpoint", ENDPOINT]
    client, stubber = runtime
    code = main(
        [*argv, "--input-location", "s3://no-such-bucket/in"],
        clients=factory(s3=s3, sagemaker_runtime=client),
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "cannot upload to s3://no-such-bucket/in/" in err and "NoSuchBucket" in err
    stubber.add_client_error(
        "invoke_endpoint_async",
        service_error_code="ValidationError",
        service_message=f"Endpoint {ENDPOINT} of account 123456789012 not found.",
        http_status_code=400,
    )
    code = main(
        [*argv, "--input-location", f"s3://{BUCKET}/in"],
        clients=factory(s3=s3, sagemaker_runtime=client),
    )
    assert code == 1 and f"Endpoint {ENDPOINT} of account" in capsys.readouterr().err


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
        "Environment": {"DECISION_JSONLINES_TIMEOUT_S": "3600"},
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


def queue_job(stubber, job, statuses, request):
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
def test_submit_waits_an_hour_by_default_looking_every_five_seconds(s3, runtime, tmp_path, capsys):
    client = queue_invoke(runtime)
    clock = Clock()
    # After the first poll, most of the hour passes at once (two polls, not 720, to a timeout).
    clock.on_sleep = lambda slept: slept == 1 and setattr(clock, "now", clock.now + 3590)
    argv = ["submit", request_file(tmp_path), "--endpoint", ENDPOINT, "--wait"]
    argv += ["--input-location", f"s3://{BUCKET}/async/input"]
    code = main(
        argv, clients=factory(s3=s3, sagemaker_runtime=client), sleep=clock.sleep, clock=clock
    )
    assert code == 1
    assert (clock.now, clock.slept) == (3600, 2)
    assert capsys.readouterr().err == (
        f"ops: error: no answer at {OUTPUT} after 3600s (the request may still run)\n"
    )


def test_submit_takes_endpoint_and_stack_from_the_environment(s3, runtime, tmp_path, monkeypatch):
    client = queue_invoke(runtime)
    monkeypatch.setenv("OPS_ASYNC_ENDPOINT_NAME", ENDPOINT)
    monkeypatch.setenv("OPS_ENDPOINT_STACK", "Env-Stack")
    with stubbed_client("cloudformation") as (cloudformation, stubber):
        outputs = {"DecisionAsyncInputLocation": f"s3://{BUCKET}/from-stack/"}
        stubber.add_response(
            "describe_stacks", stack_description("Env-Stack", outputs), {"StackName": "Env-Stack"}
        )
        clients = factory(s3=s3, sagemaker_runtime=client, cloudformation=cloudformation)
        assert main(["submit", request_file(tmp_path)], clients=clients) == 0
    assert len(keys(s3, "from-stack/")) == 1


def test_submit_names_a_stack_it_cannot_read_and_one_without_outputs(tmp_path, capsys):
    message = "Stack with id Gone does not exist"
    with stubbed_client("cloudformation") as (cloudformation, stubber):
        stubber.add_client_error("describe_stacks", "ValidationError", message)
        stubber.add_response("describe_stacks", stack_description("Bare"), {"StackName": "Bare"})
        clients = factory(cloudformation=cloudformation)
        assert main(["submit", request_file(tmp_path), "--stack", "Gone"], clients=clients) == 2
        assert capsys.readouterr().err == (
            "ops: error: cannot read the outputs of stack Gone: An error occurred "
            f"(ValidationError) when calling the DescribeStacks operation: {message}\n"
        )
        assert main(["submit", request_file(tmp_path), "--stack", "Bare"], clients=clients) == 2
        assert "no asynchronous endpoint" in capsys.readouterr().err


def test_submit_without_a_failure_location_waits_for_the_answer_alone(
    s3, runtime, tmp_path, capsys
):
    client, stubber = runtime
    stubber.add_response(
        "invoke_endpoint_async", {"InferenceId": "abc", "OutputLocation": OUTPUT}, None
    )
    # The answer appears after the first look, which found neither it nor a failure object.
    clock = Clock(lambda slept: put(s3, OUTPUT, b'{"text": "caf\xff"}  \n\n'))
    argv = ["submit", request_file(tmp_path), "--endpoint", ENDPOINT, "--wait"]
    argv += ["--input-location", f"s3://{BUCKET}/async/input"]
    code = main(
        argv, clients=factory(s3=s3, sagemaker_runtime=client), sleep=clock.sleep, clock=clock
    )
    assert code == 0 and clock.slept == 1
    out = capsys.readouterr().out
    assert "FAILURE_LOCATION" not in out
    # Undecodable bytes are replaced, trailing newlines become one, nothing else is stripped.
    assert out.endswith(f"OUTPUT_LOCATION={OUTPUT}\n" + '{"text": "caf\ufffd"}  \n')


def test_a_failure_object_that_is_not_utf8_is_still_reported(s3, runtime, tmp_path, capsys):
    client = queue_invoke(runtime)
    put(s3, FAILURE, b"bad byte \xff")
    argv = ["submit", request_file(tmp_path), "--endpoint", ENDPOINT, "--wait"]
    argv += ["--input-location", f"s3://{BUCKET}/async/input"]
    assert main(argv, clients=factory(s3=s3, sagemaker_runtime=client)) == 1
    assert capsys.readouterr().err.endswith(f"({FAILURE}): bad byte \ufffd\n")


def test_submit_reports_s3_refusing_to_show_or_give_the_answer(runtime, tmp_path, capsys):
    argv = ["submit", request_file(tmp_path), "--endpoint", ENDPOINT, "--wait"]
    argv += ["--input-location", f"s3://{BUCKET}/async/input"]
    listing = {"Bucket": BUCKET, "Prefix": "async/output/abc.out", "MaxKeys": 1}
    with stubbed_client("s3") as (s3, stubber):
        for then in ("list", "get"):
            client = queue_invoke(runtime)
            stubber.add_response("put_object", {}, None)
            if then == "list":
                stubber.add_client_error(
                    "list_objects_v2", "AccessDenied", "Access Denied", 403, None, listing
                )
            else:
                stubber.add_response(
                    "list_objects_v2", {"Contents": [{"Key": "async/output/abc.out"}]}, listing
                )
                stubber.add_client_error("get_object", "AccessDenied", "Access Denied", 403)
            assert main(argv, clients=factory(s3=s3, sagemaker_runtime=client)) == 1
        first, second = capsys.readouterr().err.splitlines()
    assert first == (
        f"ops: error: cannot look for {OUTPUT}: An error occurred (AccessDenied) when calling "
        "the ListObjectsV2 operation: Access Denied"
    )
    assert second == (
        f"ops: error: cannot fetch {OUTPUT}: An error occurred (AccessDenied) when calling the "
        "GetObject operation: Access Denied"
    )


def test_an_answer_is_there_only_under_its_own_key(s3):
    location = S3Location.parse(OUTPUT)
    assert exists(s3, location) is False
    put(s3, OUTPUT + ".partial", b"{}")  # a longer key with the answer's key as prefix
    assert exists(s3, location) is False
    put(s3, OUTPUT, b"{}")
    assert exists(s3, location) is True


def test_s3_locations_join_names_under_a_prefix():
    assert S3Location.parse(f"s3://{BUCKET}").key == ""
    assert S3Location.parse(f"s3://{BUCKET}").child("a.jsonl").uri == f"s3://{BUCKET}/a.jsonl"
    assert S3Location.parse(f"s3://{BUCKET}/").child("a").uri == f"s3://{BUCKET}/a"
    assert S3Location.parse(f"s3://{BUCKET}/runX/").child("a").uri == f"s3://{BUCKET}/runX/a"


def test_submit_reads_bodies_it_can_and_names_those_it_cannot(tmp_path, capsys):
    argv = ["--endpoint", ENDPOINT, "--input-location", f"s3://{BUCKET}/x"]
    missing = tmp_path / "missing.json"
    assert main(["submit", str(missing), *argv], clients=factory()) == 2
    assert capsys.readouterr().err == (
        f"ops: error: cannot read {missing}: [Errno 2] No such file or directory: '{missing}'\n"
    )
    broken = request_file(tmp_path, "broken.json", "{oops")
    assert main(["submit", broken, *argv], clients=factory()) == 2
    assert capsys.readouterr().err == (
        f"ops: error: {broken} is not JSON: Expecting property name enclosed in double quotes:"
        " line 1 column 2 (char 1)\n"
    )


def test_a_json_body_may_span_lines(s3, runtime, tmp_path):
    client = queue_invoke(runtime)
    pretty = request_file(tmp_path, "pretty.json", json.dumps(DECISION, indent=2))
    argv = ["submit", pretty, "--endpoint", ENDPOINT, "--input-location", f"s3://{BUCKET}/in"]
    assert main(argv, clients=factory(s3=s3, sagemaker_runtime=client)) == 0


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
    request["Environment"] = {"DECISION_JSONLINES_TIMEOUT_S": "600"}
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


def test_submit_gives_the_request_up_to_an_hour_unless_told(s3, runtime, tmp_path, capsys):
    """SageMaker's own default is 900 s: a long body would fail after 15 minutes."""
    argv = ["submit", request_file(tmp_path), "--endpoint", ENDPOINT]
    argv += ["--input-location", f"s3://{BUCKET}/async/input"]
    client = queue_invoke(runtime)
    assert main(argv, clients=factory(s3=s3, sagemaker_runtime=client)) == 0
    client = queue_invoke(runtime, invocation_timeout_s=600)
    argv += ["--invocation-timeout-seconds", "600"]
    assert main(argv, clients=factory(s3=s3, sagemaker_runtime=client)) == 0
    with pytest.raises(SystemExit):
        main([*argv[:-1], "3601"])
    assert "'3601' is not a whole number of seconds, 1-3600" in capsys.readouterr().err
