"""ops status: what describe_endpoint and describe_endpoint_config say of the endpoint and its
variants (types placed from instance pools, counts, failures), through botocore's Stubber; the
command's one-line errors. The start-up lines: tests/ops/test_status_start_up.py."""

import json

import pytest

from ops.cli import main
from tests.support.aws_stubs import stubbed_client, without_aws_credentials
from tests.support.endpoint_descriptions import (
    GROUP,
    IMAGE,
    NO_GROUP,
    NOW,
    by_service,
    config,
    endpoint,
    pool_config,
    pool_variant,
    stub_pool_endpoint,
)


@pytest.fixture
def sagemaker():
    with stubbed_client("sagemaker") as stubbed:
        yield stubbed


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
