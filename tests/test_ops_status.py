"""ops status: describe_endpoint, describe_endpoint_config and the start-up lines in the
endpoint's log group (filter_log_events) through botocore's Stubber."""

import json
from datetime import datetime, timezone

import boto3
import pytest
from botocore.stub import Stubber

from ops.cli import main
from ops.endpoint_status import render_status
from tests.aws_stubs import stubbed_client, without_aws_credentials

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
ARN = "arn:aws:sagemaker:eu-west-1:123456789012:endpoint/decisions"
IMAGE = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-adapter@sha256:" + "f" * 64


GROUP = "/aws/sagemaker/Endpoints/decisions"
PATTERN = '{ $.event = "model_loaded" }'
NO_GROUP = (
    "start-up: no log group /aws/sagemaker/Endpoints/decisions yet: "
    "no container of this endpoint has started"
)


def no_log_group(stubber: Stubber) -> None:
    stubber.add_client_error(
        "filter_log_events",
        service_error_code="ResourceNotFoundException",
        service_message="The specified log group does not exist.",
        http_status_code=400,
        expected_params={"logGroupName": GROUP, "filterPattern": PATTERN},
    )


def by_service(client, logs=None):
    """Keyed by service name: a command asking for the wrong client fails the test. Without
    `logs`, the endpoint has no log group yet."""
    if logs is None:
        logs = boto3.client(
            "logs", region_name="eu-west-1", aws_access_key_id="t", aws_secret_access_key="t"
        )
        stubber = Stubber(logs)
        no_log_group(stubber)
        stubber.activate()
    return {"sagemaker": client, "logs": logs}.__getitem__


@pytest.fixture
def sagemaker():
    with stubbed_client("sagemaker") as stubbed:
        yield stubbed


def endpoint(status="InService", variants=None, **extra):
    return {
        "EndpointName": "decisions",
        "EndpointArn": ARN,
        "EndpointConfigName": "config-1",
        "EndpointStatus": status,
        "CreationTime": NOW,
        "LastModifiedTime": NOW,
        "ProductionVariants": variants or [],
        **extra,
    }


def config(variants):
    return {
        "EndpointConfigName": "config-1",
        "EndpointConfigArn": ARN + "-config",
        "ProductionVariants": variants,
        "CreationTime": NOW,
    }


def pool_variant(name, running: dict[str, int], *, current=1, desired=1, **extra) -> dict:
    """A described variant placed on instance pools: instance type -> instances running."""
    pools = [{"InstanceType": t, "CurrentInstanceCount": n} for t, n in running.items()]
    return {
        "VariantName": name,
        "CurrentInstanceCount": current,
        "DesiredInstanceCount": desired,
        "InstancePools": pools,
        **extra,
    }


def pool_config(name, instance_types: list[str]) -> dict:
    """A configured variant whose pools are `instance_types` in priority order."""
    pools = [{"InstanceType": t, "Priority": p} for p, t in enumerate(instance_types, start=1)]
    return {"VariantName": name, "ModelName": "model-1", "InstancePools": pools}


def stub_pool_endpoint(stubber, status="InService", **extra):
    stubber.add_response(
        "describe_endpoint",
        endpoint(
            status,
            [
                pool_variant(
                    "gpu",
                    {"ml.g5.xlarge": 0, "ml.g6e.xlarge": 1},
                    DeployedImages=[{"SpecifiedImage": "repo:tag", "ResolvedImage": IMAGE}],
                )
            ],
            **extra,
        ),
        expected_params={"EndpointName": "decisions"},
    )
    stubber.add_response(
        "describe_endpoint_config",
        config([pool_config("gpu", ["ml.g6e.xlarge", "ml.g5.xlarge"])]),
        expected_params={"EndpointConfigName": "config-1"},
    )


def test_status_shows_the_instance_type_placed_from_the_pool(sagemaker, capsys):
    client, stubber = sagemaker
    stub_pool_endpoint(stubber)
    assert main(["status", "--endpoint", "decisions"], clients=by_service(client)) == 0
    out = capsys.readouterr().out
    assert "endpoint decisions: InService" in out
    assert "variant gpu: 1/1 instances on ml.g6e.xlarge" in out
    pool_lines = [line.strip() for line in out.splitlines() if "pool priority" in line]
    assert pool_lines == [
        "pool priority 1: ml.g6e.xlarge, 1 running",
        "pool priority 2: ml.g5.xlarge, 0 running",
    ]
    assert f"image {IMAGE}" in out


def test_status_json_for_a_variant_without_pool(sagemaker, capsys):
    client, stubber = sagemaker
    stubber.add_response(
        "describe_endpoint",
        endpoint(
            "Updating",
            [
                {
                    "VariantName": "cpu",
                    "CurrentInstanceCount": 1,
                    "DesiredInstanceCount": 2,
                    "VariantStatus": [{"Status": "Creating", "StartTime": NOW}],
                }
            ],
        ),
    )
    stubber.add_response(
        "describe_endpoint_config",
        config([{"VariantName": "cpu", "ModelName": "model-1", "InstanceType": "ml.c6i.8xlarge"}]),
    )
    assert main(["status", "--endpoint", "decisions", "--json"], clients=by_service(client)) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["status"] == "Updating"
    [variant] = status["variants"]
    assert variant["running_on"] == ["ml.c6i.8xlarge"]
    assert (variant["current_instances"], variant["desired_instances"]) == (1, 2)
    assert variant["in_progress"] == ["Creating"]


def test_failed_endpoint_exits_non_zero_with_the_reason(sagemaker, capsys):
    client, stubber = sagemaker
    stub_pool_endpoint(stubber, status="Failed", FailureReason="no capacity for any pool type")
    assert main(["status", "--endpoint", "decisions"], clients=by_service(client)) == 1
    assert "failure: no capacity for any pool type" in capsys.readouterr().out


def test_status_names_a_fallback_type_when_the_pool_placed_it(sagemaker, capsys):
    """The first type had no capacity: the second one runs, and that is what status reports."""
    client, stubber = sagemaker
    stubber.add_response(
        "describe_endpoint",
        endpoint("InService", [pool_variant("gpu", {"ml.g6e.xlarge": 0, "ml.g6.2xlarge": 1})]),
    )
    stubber.add_response(
        "describe_endpoint_config",
        config([pool_config("gpu", ["ml.g6e.xlarge", "ml.g6.2xlarge"])]),
    )
    assert main(["status", "--endpoint", "decisions", "--json"], clients=by_service(client)) == 0
    [variant] = json.loads(capsys.readouterr().out)["variants"]
    assert variant["running_on"] == ["ml.g6.2xlarge"]
    assert [pool["instance_type"] for pool in variant["pools"]] == [
        "ml.g6e.xlarge",
        "ml.g6.2xlarge",
    ]


def test_status_text_for_pools_partly_placed_variants_and_missing_fields(sagemaker, capsys):
    client, stubber = sagemaker
    stubber.add_response(
        "describe_endpoint",
        endpoint(
            "Updating",
            [
                pool_variant(
                    "blue",
                    {"ml.g5.xlarge": 0, "ml.g4dn.xlarge": 1, "ml.g6e.xlarge": 1},
                    current=2,
                    desired=3,
                    DeployedImages=[{"SpecifiedImage": "repo:tag"}],
                    VariantStatus=[
                        {"Status": "Creating", "StartTime": NOW},
                        {"Status": "Updating", "StartTime": NOW},
                    ],
                ),
                {"VariantName": "green", "CurrentInstanceCount": 0, "DesiredInstanceCount": 1},
                {"VariantName": "unconfigured"},
            ],
        ),
    )
    stubber.add_response(
        "describe_endpoint_config",
        config(
            [
                pool_config("blue", ["ml.g6e.xlarge", "ml.g5.xlarge"]),
                {"VariantName": "green", "ModelName": "m", "InstanceType": "ml.c6i.xlarge"},
            ]
        ),
    )
    code = main(["status", "--endpoint", "decisions"], clients=by_service(client))
    assert code == 0
    # A pool type the config no longer lists sorts last; a variant with nothing running says so.
    assert capsys.readouterr().out == (
        "endpoint decisions: Updating\n"
        "  config config-1\n"
        "  variant blue: 2/3 instances on ml.g6e.xlarge, ml.g4dn.xlarge\n"
        "    pool priority 1: ml.g6e.xlarge, 1 running\n"
        "    pool priority 2: ml.g5.xlarge, 0 running\n"
        "    pool priority None: ml.g4dn.xlarge, 1 running\n"
        "    image repo:tag\n"
        "    in progress: Creating, Updating\n"
        "  variant green: 0/1 instances on no instance yet\n"
        "  variant unconfigured: None/None instances on no instance yet\n"
        f"  {NO_GROUP}\n"
    )


def test_status_of_an_endpoint_without_variants_yet(sagemaker, capsys):
    client, stubber = sagemaker
    described = endpoint("Creating")
    del described["ProductionVariants"]
    stubber.add_response("describe_endpoint", described)
    stubber.add_response(
        "describe_endpoint_config",
        config([{"VariantName": "cpu", "ModelName": "m", "InstanceType": "ml.c6i.xlarge"}]),
    )
    code = main(["status", "--endpoint", "decisions", "--json"], clients=by_service(client))
    assert code == 0
    assert (
        capsys.readouterr().out
        == json.dumps(
            {
                "endpoint": "decisions",
                "status": "Creating",
                "failure_reason": None,
                "endpoint_config": "config-1",
                "variants": [],
                "startup": {
                    "log_group": GROUP,
                    "instances": [],
                    "missing": NO_GROUP.removeprefix("start-up: "),
                },
            },
            indent=2,
        )
        + "\n"
    )


def test_status_endpoint_name_comes_from_the_environment(sagemaker, monkeypatch, capsys):
    client, stubber = sagemaker
    monkeypatch.setenv("OPS_ENDPOINT_NAME", "decisions")
    stub_pool_endpoint(stubber)
    assert main(["status"], clients=by_service(client)) == 0


def test_status_without_an_endpoint_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.delenv("OPS_ENDPOINT_NAME", raising=False)
    assert main(["status"], clients=lambda s: pytest.fail("no AWS call expected")) == 2
    assert capsys.readouterr().err == (
        "ops: error: pass --endpoint NAME or set OPS_ENDPOINT_NAME\n"
    )


# --- the adapter's start-up line ------------------------------------------------------------


@pytest.fixture
def logs():
    with stubbed_client("logs") as stubbed:
        yield stubbed


def started(stream: str, at_ms: int, **fields) -> dict:
    line = {
        "time": "2026-01-01T00:00:00.000Z",
        "level": "INFO",
        "logger": "decision_adapter",
        "message": "model loaded",
        "event": "model_loaded",
        "model": {"name": "qwen3.5-4b-q4_k_m"},
        "gpus": [{"name": "NVIDIA L40S", "memory_bytes": 48305799168}],
        "layers": {"offloaded": 37, "total": 37},
        "llama_libraries": ["/opt/llama/lib/libllama.so", "/opt/llama/lib/libggml-cuda.so"],
        **fields,
    }
    return {"logStreamName": stream, "timestamp": at_ms, "message": json.dumps(line)}


def test_status_shows_each_instances_newest_start_up_line_beside_its_type(sagemaker, logs, capsys):
    client, stubber = sagemaker
    logs_client, logs_stubber = logs
    stub_pool_endpoint(stubber)
    # Two pages: gpu/i-1 started twice (the container restarted), gpu/i-2 on a CPU-only host.
    logs_stubber.add_response(
        "filter_log_events",
        {
            "events": [
                started("gpu/i-1", 1_000, layers={"offloaded": 0, "total": 37}),
                started("gpu/i-2", 2_000, gpus=None, layers={"offloaded": 0, "total": 37}),
            ],
            "nextToken": "page-2",
        },
        expected_params={"logGroupName": GROUP, "filterPattern": PATTERN},
    )
    logs_stubber.add_response(
        "filter_log_events",
        {
            "events": [
                started("gpu/i-1", 3_000),
                {"logStreamName": "gpu/i-1", "timestamp": 4_000, "message": "not json"},
            ]
        },
        expected_params={"logGroupName": GROUP, "filterPattern": PATTERN, "nextToken": "page-2"},
    )
    code = main(["status", "--endpoint", "decisions"], clients=by_service(client, logs_client))
    assert code == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("  variant gpu: 1/1 instances on ml.g6e.xlarge")
    assert out[at + 4 :] == [
        "    started gpu/i-1 at 1970-01-01T00:00:03+00:00: NVIDIA L40S (46068 MiB); "
        "37/37 layers offloaded; model qwen3.5-4b-q4_k_m; libraries libllama.so, libggml-cuda.so",
        "    started gpu/i-2 at 1970-01-01T00:00:02+00:00: no GPU; 0/37 layers offloaded; "
        "model qwen3.5-4b-q4_k_m; libraries libllama.so, libggml-cuda.so",
    ]


def test_status_json_holds_the_start_up_lines(sagemaker, logs, capsys):
    client, stubber = sagemaker
    logs_client, logs_stubber = logs
    stub_pool_endpoint(stubber)
    logs_stubber.add_response("filter_log_events", {"events": [started("gpu/i-1", 5_000)]})
    argv = ["status", "--endpoint", "decisions", "--json"]
    assert main(argv, clients=by_service(client, logs_client)) == 0
    startup = json.loads(capsys.readouterr().out)["startup"]
    assert startup["log_group"] == GROUP and startup["missing"] is None
    (line,) = startup["instances"]
    assert line["gpus"] == [{"name": "NVIDIA L40S", "memory_bytes": 48305799168}]
    assert line["layers"] == {"offloaded": 37, "total": 37}


def test_status_without_a_log_group_says_no_container_started(sagemaker, logs, capsys):
    client, stubber = sagemaker
    logs_client, logs_stubber = logs
    stub_pool_endpoint(stubber, status="Creating")
    no_log_group(logs_stubber)
    code = main(["status", "--endpoint", "decisions"], clients=by_service(client, logs_client))
    assert code == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"  {NO_GROUP}"


def test_status_with_a_log_group_but_no_start_up_line_says_why(sagemaker, logs, capsys):
    client, stubber = sagemaker
    logs_client, logs_stubber = logs
    stub_pool_endpoint(stubber)
    logs_stubber.add_response("filter_log_events", {"events": []})
    assert main(["status", "--endpoint", "decisions"], clients=by_service(client, logs_client)) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"  start-up: no model_loaded line in {GROUP}: the model has not loaded yet, "
        "or the image predates this line"
    )


def test_the_real_adapters_start_up_line_is_what_status_shows(adapter, sagemaker, logs, capsys):
    """The line as the adapter wrote it, delivered as CloudWatch Logs would deliver it."""
    (raw,) = [line for line in adapter.log().splitlines() if '"event": "model_loaded"' in line]
    client, stubber = sagemaker
    logs_client, logs_stubber = logs
    stub_pool_endpoint(stubber)
    logs_stubber.add_response(
        "filter_log_events",
        {"events": [{"logStreamName": "gpu/i-0abc", "timestamp": 7_000, "message": raw}]},
    )
    assert main(["status", "--endpoint", "decisions"], clients=by_service(client, logs_client)) == 0
    shown = [line for line in capsys.readouterr().out.splitlines() if "started" in line]
    written = json.loads(raw)
    libraries = ", ".join(path.rsplit("/", 1)[-1] for path in written["llama_libraries"])
    assert "libllama.so" in libraries
    assert shown == [
        "    started gpu/i-0abc at 1970-01-01T00:00:07+00:00: no GPU; 0/19 layers offloaded; "
        f"model {written['model']['name']}; libraries {libraries}"
    ]


def test_start_up_lines_across_pages_variants_and_odd_events(sagemaker, logs, capsys):
    """A page without events, a JSON line that is not an object, two instances started in the
    same millisecond, one of a variant the endpoint no longer has, one without libraries or
    with two GPUs."""
    client, stubber = sagemaker
    logs_client, logs_stubber = logs
    stub_pool_endpoint(stubber)
    two_gpus = [
        {"name": "NVIDIA L4", "memory_bytes": 2**34},
        {"name": "NVIDIA L4", "memory_bytes": 2**34},
    ]
    bare = started("gpu/i-2", 5_000, gpus=two_gpus, llama_libraries=["libllama.so"])
    old = json.loads(started("old/i-9", 5_000)["message"])
    del old["llama_libraries"]
    logs_stubber.add_response("filter_log_events", {"nextToken": "page-2"})
    logs_stubber.add_response(
        "filter_log_events",
        {
            "events": [
                started("gpu/i-1", 5_000),
                bare,
                {"logStreamName": "old/i-9", "timestamp": 5_000, "message": json.dumps(old)},
                {"logStreamName": "gpu/i-3", "timestamp": 6_000, "message": "[1, 2]"},
            ]
        },
    )
    assert main(["status", "--endpoint", "decisions"], clients=by_service(client, logs_client)) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("  variant gpu: 1/1 instances on ml.g6e.xlarge")
    at_time = "at 1970-01-01T00:00:05+00:00"
    assert out[at + 4 :] == [
        f"    started gpu/i-1 {at_time}: NVIDIA L40S (46068 MiB); 37/37 layers offloaded; "
        "model qwen3.5-4b-q4_k_m; libraries libllama.so, libggml-cuda.so",
        f"    started gpu/i-2 {at_time}: NVIDIA L4 (16384 MiB), NVIDIA L4 (16384 MiB); "
        "37/37 layers offloaded; model qwen3.5-4b-q4_k_m; libraries libllama.so",
        "  start-up lines of other variants' instances:",
        f"    started old/i-9 {at_time}: NVIDIA L40S (46068 MiB); 37/37 layers offloaded; "
        "model qwen3.5-4b-q4_k_m; libraries none",
    ]


def test_status_rendered_without_start_up_facts_shows_the_variants_alone():
    status = {
        "endpoint": "decisions",
        "status": "InService",
        "endpoint_config": "config-1",
        "variants": [
            {
                "variant": "gpu",
                "current_instances": 1,
                "desired_instances": 1,
                "running_on": ["ml.g6e.xlarge"],
                "pools": [],
                "images": [],
                "in_progress": [],
            }
        ],
    }
    assert render_status(status).splitlines() == [
        "endpoint decisions: InService",
        "  config config-1",
        "  variant gpu: 1/1 instances on ml.g6e.xlarge",
    ]


def test_an_endpoint_aws_does_not_know_is_one_line_not_a_traceback(sagemaker, capsys):
    client, stubber = sagemaker
    stubber.add_client_error(
        "describe_endpoint",
        service_error_code="ValidationException",
        service_message="Could not find endpoint decisions.",
        http_status_code=400,
    )
    assert main(["status", "--endpoint", "decisions"], clients=by_service(client)) == 1
    assert capsys.readouterr().err == (
        "ops: error: AWS: An error occurred (ValidationException) when calling the "
        "DescribeEndpoint operation: Could not find endpoint decisions.\n"
    )


def test_without_credentials_the_real_client_fails_in_one_line(monkeypatch, tmp_path, capsys):
    without_aws_credentials(monkeypatch, tmp_path)
    assert main(["--region", "eu-west-1", "status", "--endpoint", "decisions"]) == 1
    assert capsys.readouterr().err == "ops: error: AWS: Unable to locate credentials\n"


@pytest.mark.parametrize("variable", ["AWS_REGION", "AWS_DEFAULT_REGION"])
def test_an_empty_region_variable_is_no_region_in_one_line(monkeypatch, tmp_path, capsys, variable):
    without_aws_credentials(monkeypatch, tmp_path)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv(variable, "")  # as `export AWS_REGION=` leaves it
    assert main(["status", "--endpoint", "decisions"]) == 1
    assert capsys.readouterr().err == "ops: error: AWS: You must specify a region.\n"
