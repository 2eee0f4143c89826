"""ops submit and ops batch: S3 through moto (objects really uploaded, answers really fetched),
SageMaker and CloudFormation through botocore's Stubber (the exact requests)."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import ANY
from decision_adapter.openapi import DECISION_EXAMPLE as DECISION
from moto import mock_aws

from ops.cli import main
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
def queue_invoke(runtime, content_type="application/json"):
    client, stubber = runtime
    stubber.add_response(
        "invoke_endpoint_async",
        {"InferenceId": "abc", "OutputLocation": OUTPUT, "FailureLocation": FAILURE},
        {"EndpointName": ENDPOINT, "InputLocation": ANY, "ContentType": content_type},
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


def test_submit_writes_the_answer_to_a_file(s3, runtime, tmp_path):
    client = queue_invoke(runtime)
    put(s3, OUTPUT, b'{"result": 1}')
    target = tmp_path / "answer.json"
    argv = ["submit", request_file(tmp_path), "--endpoint", ENDPOINT, "--wait"]
    argv += ["--input-location", f"s3://{BUCKET}/async/input", "--output", str(target)]
    assert main(argv, clients=factory(s3=s3, sagemaker_runtime=client)) == 0
    assert target.read_bytes() == b'{"result": 1}'


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
        (["--input-location", f"s3://{BUCKET}/x"], "no asynchronous endpoint: pass --endpoint"),
        (["--endpoint", ENDPOINT], "no input location: pass --input-location"),
        (["--endpoint", ENDPOINT, "--input-location", "bucket/x"], "is not an s3://"),
    ],
)
def test_submit_usage_errors_say_what_is_missing(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.delenv("OPS_ASYNC_ENDPOINT_NAME", raising=False)
    monkeypatch.delenv("OPS_ENDPOINT_STACK", raising=False)
    assert main(["submit", request_file(tmp_path), *argv], clients=factory()) == 2
    assert message in capsys.readouterr().err


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
    stubber.add_response(
        "describe_endpoint",
        {
            "EndpointName": "decision-cpu",
            "EndpointArn": "arn:aws:sagemaker:eu-west-1:123456789012:endpoint/decision-cpu",
            "EndpointConfigName": "config-1",
            "EndpointStatus": "InService",
            "CreationTime": "2026-01-01T00:00:00Z",
            "LastModifiedTime": "2026-01-01T00:00:00Z",
        },
        {"EndpointName": "decision-cpu"},
    )
    stubber.add_response(
        "describe_endpoint_config",
        {
            "EndpointConfigName": "config-1",
            "EndpointConfigArn": "arn:aws:sagemaker:eu-west-1:123456789012:endpoint-config/c",
            "ProductionVariants": [{"VariantName": "AllTraffic", "ModelName": "decision-model-1"}],
            "CreationTime": "2026-01-01T00:00:00Z",
        },
        {"EndpointConfigName": "config-1"},
    )
    source = f"s3://{BUCKET}/data/day.jsonl"
    output = f"s3://{BUCKET}/batch/job-2/output"
    queue_job(stubber, "job-2", [("Completed", {})], transform_request("job-2", source, output))
    put(s3, f"{output}/day.jsonl.out", b"answers\n")
    argv = ["batch", source, "--endpoint", "decision-cpu", "--job-name", "job-2"]
    argv += ["--location", f"s3://{BUCKET}/batch/"]
    assert main(argv, clients=factory(s3=s3, sagemaker=client)) == 0
    assert (tmp_path / "day.jsonl.out").read_bytes() == b"answers\n"
    assert keys(s3, "batch/job-2/input") == []  # nothing uploaded


def test_a_failed_job_reports_its_failure_reason(s3, sagemaker, tmp_path, capsys):
    client, stubber = sagemaker
    source = f"s3://{BUCKET}/data/day.jsonl"
    reason = "ClientError: See job logs. Access denied to s3://artifacts-bucket/data/day.jsonl"
    queue_job(
        stubber,
        "job-3",
        [("InProgress", {}), ("Failed", {"FailureReason": reason})],
        transform_request("job-3", source, f"s3://{BUCKET}/batch/job-3/output"),
    )
    argv = ["batch", source, "--model", "decision-model-1", "--job-name", "job-3"]
    argv += ["--location", f"s3://{BUCKET}/batch"]
    clock = Clock()
    code = main(argv, clients=factory(s3=s3, sagemaker=client), sleep=clock.sleep, clock=clock)
    assert code == 1
    assert f"ops: error: transform job job-3 failed: {reason}" in capsys.readouterr().err


def test_a_job_past_its_timeout_is_reported_with_how_to_stop_it(s3, sagemaker, capsys):
    client, stubber = sagemaker
    source = f"s3://{BUCKET}/data/day.jsonl"
    queue_job(
        stubber,
        "job-4",
        [("InProgress", {})] * 3,
        transform_request("job-4", source, f"s3://{BUCKET}/batch/job-4/output"),
    )
    argv = ["batch", source, "--model", "decision-model-1", "--job-name", "job-4"]
    argv += ["--location", f"s3://{BUCKET}/batch", "--timeout-minutes", "1"]
    clock = Clock()
    code = main(argv, clients=factory(s3=s3, sagemaker=client), sleep=clock.sleep, clock=clock)
    assert code == 1
    err = capsys.readouterr().err
    assert "transform job job-4 still InProgress after 60s" in err
    assert "aws sagemaker stop-transform-job --transform-job-name job-4" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["x.jsonl", "--model", "m"], "no S3 location for the job"),
        (["x.jsonl", "--location", "s3://bkt/p"], "no model: pass --model NAME or --endpoint NAME"),
        (["x.csv", "--location", "s3://bkt/p", "--model", "m"], "a batch input is a JSON Lines"),
    ],
)
def test_batch_usage_errors_say_what_is_missing(capsys, monkeypatch, argv, message):
    for name in ("OPS_BATCH_LOCATION", "OPS_ENDPOINT_NAME"):
        monkeypatch.delenv(name, raising=False)
    clients = factory(s3=object(), sagemaker=object())
    assert main(["batch", *argv], clients=clients) == 2
    assert message in capsys.readouterr().err
