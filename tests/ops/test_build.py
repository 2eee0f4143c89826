"""ops build: CodeBuild through botocore's Stubber; polling with an injected sleep."""

import pytest

from ops.cli import main
from tests.support.aws_stubs import stack_description, stubbed_client

BUILD_ID = "decision-image-build:1234"
IMAGE_URI = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-adapter@sha256:" + "e" * 64


@pytest.fixture
def codebuild():
    with stubbed_client("codebuild") as stubbed:
        yield stubbed


def build(phase, complete=False, status="IN_PROGRESS", **extra):
    return {
        "builds": [
            {
                "id": BUILD_ID,
                "currentPhase": phase,
                "buildComplete": complete,
                "buildStatus": status,
                **extra,
            }
        ]
    }


def starts(stubber, project: str | None = None, **overrides: str) -> None:
    """start_build answers BUILD_ID; given `project`, only when asked for it with `overrides`."""
    expected = None
    if project is not None:
        expected = {"projectName": project}
        if overrides:
            expected["environmentVariablesOverride"] = [
                {"name": name, "value": value, "type": "PLAINTEXT"}
                for name, value in overrides.items()
            ]
    stubber.add_response("start_build", {"build": {"id": BUILD_ID}}, expected_params=expected)


def poll(stubber, response):
    stubber.add_response("batch_get_builds", response, expected_params={"ids": [BUILD_ID]})


def run(argv, client, sleeps):
    # Keyed by service name: a command asking for the wrong client fails the test.
    return main(argv, clients={"codebuild": client}.__getitem__, sleep=sleeps.append)


def test_image_build_reports_phases_and_prints_the_digest_pinned_uri(codebuild, capsys):
    client, stubber = codebuild
    starts(stubber, "gpu-project", DOCKERFILE="container/Dockerfile.gpu")
    poll(stubber, build("PROVISIONING"))
    poll(stubber, build("BUILD"))
    poll(stubber, build("BUILD"))
    poll(
        stubber,
        build(
            "COMPLETED",
            complete=True,
            status="SUCCEEDED",
            exportedEnvironmentVariables=[{"name": "IMAGE_URI", "value": IMAGE_URI}],
        ),
    )
    sleeps = []

    code = run(
        [
            "build",
            "gpu-image",
            "--project",
            "gpu-project",
            "--poll-seconds",
            "5",
            "--env",
            "DOCKERFILE=container/Dockerfile.gpu",
        ],
        client,
        sleeps,
    )

    out, err = capsys.readouterr()
    assert code == 0
    assert out == f"IMAGE_URI={IMAGE_URI}\n"
    assert sleeps == [5.0, 5.0, 5.0]
    phases = [line.split()[-1] for line in err.splitlines() if line.startswith("[")]
    assert phases == ["PROVISIONING", "BUILD", "COMPLETED"]  # each phase reported once


def test_model_build_prints_uri_and_checksums_from_project_in_env(codebuild, monkeypatch, capsys):
    client, stubber = codebuild
    monkeypatch.setenv("OPS_MODEL_BUILD_PROJECT", "model-project")
    starts(stubber, "model-project")
    exported = [
        {"name": "MODEL_URI", "value": "s3://bucket/models/" + "a" * 64 + "/model.tar.gz"},
        {"name": "MODEL_ARCHIVE_SHA256", "value": "a" * 64},
        {"name": "MODEL_GGUF_SHA256", "value": "b" * 64},
    ]
    poll(
        stubber,
        build(
            "COMPLETED", complete=True, status="SUCCEEDED", exportedEnvironmentVariables=exported
        ),
    )

    assert run(["build", "model"], client, []) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{v['name']}={v['value']}" for v in exported]


def test_failed_build_names_the_failing_phase_and_its_message(codebuild, capsys):
    client, stubber = codebuild
    starts(stubber)
    poll(
        stubber,
        build(
            "COMPLETED",
            complete=True,
            status="FAILED",
            phases=[
                {"phaseType": "PRE_BUILD", "phaseStatus": "SUCCEEDED"},
                {
                    "phaseType": "BUILD",
                    "phaseStatus": "FAILED",
                    "contexts": [
                        {
                            "statusCode": "COMMAND_EXECUTION_ERROR",
                            "message": "Error while executing command: docker build",
                        }
                    ],
                },
            ],
            logs={"deepLink": "https://console.example/logs"},
        ),
    )

    assert run(["build", "cpu-image", "--project", "p"], client, []) == 1
    err = capsys.readouterr().err
    # The succeeded phase is left out; the failed one carries its message; the link comes last.
    assert err.splitlines()[-1] == (
        f"ops: error: build {BUILD_ID} FAILED (BUILD FAILED: Error while executing command: "
        "docker build); logs: https://console.example/logs"
    )


def test_successful_build_without_the_exported_uri_is_an_error(codebuild, capsys):
    client, stubber = codebuild
    starts(stubber)
    poll(stubber, build("COMPLETED", complete=True, status="SUCCEEDED"))
    assert run(["build", "cpu-image", "--project", "p"], client, []) == 1
    assert "did not export IMAGE_URI" in capsys.readouterr().err


def test_waiting_stops_at_the_timeout(codebuild):
    from ops.codebuild import BuildTimedOut, wait_for_build
    from ops.polling import Polling

    client, stubber = codebuild
    for _ in range(3):  # polls at 0 s, 60 s and 120 s
        poll(stubber, build("BUILD"))
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    with pytest.raises(BuildTimedOut, match="still running after 120s"):
        wait_for_build(
            client,
            BUILD_ID,
            Polling(poll_seconds=60, timeout_seconds=120, sleep=sleep, clock=lambda: now[0]),
            report=lambda line: None,
        )


class Clock:
    """Time that passes only when the command sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_without_a_timeout_it_waits_as_long_as_the_build_may_run(codebuild, capsys):
    """A GPU image build past 180 minutes, within its project's 240: CodeBuild's own answer
    says how long it may run (its queued and build timeouts)."""
    client, stubber = codebuild
    starts(stubber, "gpu-project")
    may_run = {"timeoutInMinutes": 240, "queuedTimeoutInMinutes": 60}
    poll(stubber, build("QUEUED", **may_run))
    for _ in range(3):  # at 1, 2 and 3 hours
        poll(stubber, build("BUILD", **may_run))
    exported = [{"name": "IMAGE_URI", "value": IMAGE_URI}]
    done = build("COMPLETED", True, "SUCCEEDED", exportedEnvironmentVariables=exported, **may_run)
    poll(stubber, done)  # at 4 hours
    clock = Clock()
    argv = ["build", "gpu-image", "--project", "gpu-project", "--poll-seconds", "3600"]
    code = main(argv, clients={"codebuild": client}.__getitem__, sleep=clock.sleep, clock=clock)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert clock.now == 4 * 3600 and captured.out == f"IMAGE_URI={IMAGE_URI}\n"
    stubber.assert_no_pending_responses()


def test_without_a_timeout_it_stops_once_the_build_may_no_longer_run(codebuild, capsys):
    """Queued 5 minutes and building 5 at most, and 15 for CodeBuild to finish: 1,500 s."""
    client, stubber = codebuild
    starts(stubber, "p")
    for _ in range(4):  # at 0, 600, 1200 and 1800 s
        poll(stubber, build("BUILD", timeoutInMinutes=5, queuedTimeoutInMinutes=5))
    clock = Clock()
    argv = ["build", "model", "--project", "p", "--poll-seconds", "600"]
    code = main(argv, clients={"codebuild": client}.__getitem__, sleep=clock.sleep, clock=clock)
    assert code == 1 and clock.now == 1800
    assert f"build {BUILD_ID} still running after 1500s" in capsys.readouterr().err
    stubber.assert_no_pending_responses()


def test_missing_project_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.delenv("OPS_CPU_IMAGE_BUILD_PROJECT", raising=False)
    monkeypatch.delenv("OPS_STATEFUL_STACK", raising=False)
    assert main(["build", "cpu-image"], clients=lambda s: pytest.fail("no AWS call expected")) == 2
    assert "OPS_CPU_IMAGE_BUILD_PROJECT" in capsys.readouterr().err


def test_malformed_env_override_is_a_usage_error(capsys):
    assert (
        main(
            ["build", "model", "--project", "p", "--env", "NOEQUALS"],
            clients=lambda s: pytest.fail("no AWS call expected"),
        )
        == 2
    )
    assert "NAME=VALUE" in capsys.readouterr().err


@pytest.mark.parametrize(
    "target,env,project,exported",
    [
        ("model", "OPS_MODEL_BUILD_PROJECT", "model-proj", "MODEL_URI"),
        ("cpu-image", "OPS_CPU_IMAGE_BUILD_PROJECT", "cpu-proj", "IMAGE_URI"),
        ("gpu-image", "OPS_GPU_IMAGE_BUILD_PROJECT", "gpu-proj", "IMAGE_URI"),
    ],
)
def test_project_name_is_read_from_the_stateful_stack_outputs(
    codebuild, monkeypatch, capsys, target, env, project, exported
):
    """Each target starts its own project: the outputs name all three, only one is right."""
    client, stubber = codebuild
    monkeypatch.delenv(env, raising=False)
    with stubbed_client("cloudformation") as (cloudformation, cfn):
        cfn.add_response(
            "describe_stacks",
            stack_description(
                "Stateful",
                {
                    "ModelBuildProject": "model-proj",
                    "CpuImageBuildProject": "cpu-proj",
                    "GpuImageBuildProject": "gpu-proj",
                },
                status="UPDATE_COMPLETE",
            ),
            expected_params={"StackName": "Stateful"},
        )
        starts(stubber, project)
        outputs = {
            "MODEL_URI": "s3://bucket/models/" + "a" * 64 + "/model.tar.gz",
            "MODEL_ARCHIVE_SHA256": "a" * 64,
            "MODEL_GGUF_SHA256": "b" * 64,
            "IMAGE_URI": IMAGE_URI,
        }
        poll(
            stubber,
            build(
                "COMPLETED",
                complete=True,
                status="SUCCEEDED",
                exportedEnvironmentVariables=[
                    {"name": name, "value": value} for name, value in outputs.items()
                ],
            ),
        )
        services = {"cloudformation": cloudformation, "codebuild": client}

        code = main(
            ["build", target, "--stack", "Stateful"],
            clients=services.__getitem__,
            sleep=lambda s: None,
        )

    assert code == 0
    assert f"{exported}={outputs[exported]}\n" in capsys.readouterr().out


def test_timeout_is_given_in_minutes_and_polls_every_poll_seconds(codebuild, capsys):
    client, stubber = codebuild
    starts(stubber, "p", EXTRA="a=b")
    # The first answer has no phase yet: nothing is reported for it.
    poll(stubber, {"builds": [{"id": BUILD_ID, "buildComplete": False}]})
    for _ in range(2):  # at 30 s and 60 s
        poll(stubber, build("BUILD"))
    now = [1000.0]  # a clock that does not start at zero: elapsed time is a difference

    def sleep(seconds):
        now[0] += seconds

    argv = ["build", "model", "--project", "p", "--env", "EXTRA=a=b", "--poll-seconds", "30"]
    code = main(
        [*argv, "--timeout-minutes", "1"],
        clients={"codebuild": client}.__getitem__,
        sleep=sleep,
        clock=lambda: now[0],
    )

    err = capsys.readouterr().err.splitlines()
    assert code == 1
    assert err == [
        f"started {BUILD_ID}",
        "[    30s] BUILD",
        f"ops: error: build {BUILD_ID} still running after 60s",
    ]


@pytest.mark.parametrize(
    "extra,summary",
    [
        ({}, f"build {BUILD_ID} FAULT"),
        (
            {"phases": [{"phaseType": "DOWNLOAD_SOURCE", "phaseStatus": "TIMED_OUT"}]},
            f"build {BUILD_ID} FAULT (DOWNLOAD_SOURCE TIMED_OUT)",
        ),
        (
            {
                "phases": [
                    {"phaseType": "INSTALL", "phaseStatus": "FAILED", "contexts": [{}]},
                    {
                        "phaseType": "BUILD",
                        "phaseStatus": "FAILED",
                        "contexts": [{"message": "one"}, {"message": "two"}],
                    },
                    {"phaseType": "COMPLETED"},
                ]
            },
            f"build {BUILD_ID} FAULT (INSTALL FAILED; BUILD FAILED: one: two)",
        ),
    ],
)
def test_failure_summary_names_only_unsuccessful_phases(codebuild, capsys, extra, summary):
    client, stubber = codebuild
    starts(stubber)
    poll(stubber, build("COMPLETED", complete=True, status="FAULT", **extra))
    assert run(["build", "cpu-image", "--project", "p"], client, []) == 1
    assert capsys.readouterr().err.splitlines()[-1] == f"ops: error: {summary}"


def test_every_missing_export_is_named_and_an_empty_value_counts_as_missing(codebuild, capsys):
    client, stubber = codebuild
    starts(stubber)
    exported = [{"name": "MODEL_URI", "value": "s3://b/k"}, {"name": "MODEL_GGUF_SHA256"}]
    poll(
        stubber,
        build(
            "COMPLETED", complete=True, status="SUCCEEDED", exportedEnvironmentVariables=exported
        ),
    )
    assert run(["build", "model", "--project", "p"], client, []) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "ops: error: build succeeded but did not export MODEL_ARCHIVE_SHA256, MODEL_GGUF_SHA256"
    )


def test_a_stack_without_outputs_names_no_project(monkeypatch, capsys):
    monkeypatch.delenv("OPS_MODEL_BUILD_PROJECT", raising=False)
    with stubbed_client("cloudformation") as (cloudformation, cfn):
        cfn.add_response(
            "describe_stacks",
            stack_description("Stateful", status="CREATE_IN_PROGRESS"),
        )
        code = main(
            ["build", "model", "--stack", "Stateful"],
            clients={"cloudformation": cloudformation}.__getitem__,
        )
    assert code == 2
    assert "no CodeBuild project" in capsys.readouterr().err


def test_build_failed_carries_the_build_it_describes():
    from ops.codebuild import TARGETS, BuildFailed, build_outputs

    for described in (
        {"id": BUILD_ID, "buildStatus": "FAILED"},
        {"id": BUILD_ID, "buildStatus": "SUCCEEDED", "exportedEnvironmentVariables": []},
    ):
        with pytest.raises(BuildFailed) as failed:
            build_outputs(described, TARGETS["cpu-image"])
        assert failed.value.build is described
