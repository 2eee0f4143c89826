"""ops submit: a body to the asynchronous endpoint, waiting for its answer or failure object.
S3 through moto (objects really uploaded, answers really fetched), SageMaker Runtime and
CloudFormation through botocore's Stubber (the exact requests)."""

from __future__ import annotations

import json

import pytest
from botocore.stub import ANY
from decision_adapter.http.openapi import DECISION_EXAMPLE as DECISION

from ops.cli import main
from ops.s3_objects import S3Location, exists
from tests.support.aws_stubs import stack_description, stubbed_client
from tests.support.ops_background_fakes import (
    ANSWER,
    BUCKET,
    ENDPOINT,
    FAILURE,
    OUTPUT,
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
