"""ops status: the adapter's start-up lines in the endpoint's log group (filter_log_events)
beside each instance's type, through botocore's Stubber, and the real adapter's line."""

import json

import pytest

from ops.cli import main
from ops.endpoint_status import render_status
from tests.support.aws_stubs import stubbed_client
from tests.support.endpoint_descriptions import (
    GROUP,
    NO_GROUP,
    PATTERN,
    by_service,
    no_log_group,
    stub_pool_endpoint,
)


@pytest.fixture
def sagemaker():
    with stubbed_client("sagemaker") as stubbed:
        yield stubbed


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


def test_status_without_a_log_group_says_the_stack_did_not_deploy_the_endpoint(
    sagemaker, logs, capsys
):
    """The endpoint stack creates each endpoint's group before the endpoint
    (tests/cdk/test_endpoint_stack.py): a missing group is not a container yet to start."""
    client, stubber = sagemaker
    logs_client, logs_stubber = logs
    stub_pool_endpoint(stubber, status="Creating")
    no_log_group(logs_stubber)
    code = main(["status", "--endpoint", "decisions"], clients=by_service(client, logs_client))
    assert code == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"  {NO_GROUP}"
    assert "yet" not in last and "started" not in last


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
