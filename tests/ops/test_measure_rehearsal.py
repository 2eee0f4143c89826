"""`ops measure` rehearsed: the real adapter serving the packaged Gemma archive answers
InvokeEndpoint through a real boto3 client (tests/support/sagemaker_runtime.py), the endpoint's
placement comes from botocore's Stubber, and the file it writes is what the next synthesis
derives the endpoint's capacity from."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time

import pytest
from pydantic import ValidationError

from launcher import REPO, adapter_environment, running_adapter
from ops.cli import main
from stacks import capacity
from tests.cdk.test_capacity import SMALL_RELEASE, config, decision_cpu_capacity, expect
from tests.ops.test_measure import ADAPTER, placed
from tests.support.aws_stubs import stubbed_client

ENDPOINT = "decision-models-decision-cpu"
TYPE = SMALL_RELEASE["decisionCpuEndpoint"]["instanceType"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The bundled model packaged as `python -m ops build model` packages it, unpacked as
    SageMaker unpacks it into /opt/ml/model."""
    work = tmp_path_factory.mktemp("package")
    packaged = subprocess.run(
        [sys.executable, "-m", "model_packaging", "--spec", "gemma3-270m", "--output", f"{work}/"],
        env=adapter_environment(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert packaged.returncode == 0, packaged.stderr
    with tarfile.open(work / "model.tar.gz") as tar:
        tar.extractall(work / "opt-ml-model", filter="data")
    return work / "opt-ml-model"


def test_measure_the_served_model_and_synthesize_from_its_file(
    model_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(capacity, "MEASUREMENTS", tmp_path / "measurements")
    expected = capacity.measurement_path("gemma3-270m", TYPE)
    with pytest.raises(ValidationError, match=f"{expected} does not exist"):
        config(**SMALL_RELEASE)  # not measured yet: the release is refused

    # No queue and no grace: a second client is refused (503) while the first is answered.
    served = {
        "DECISION_MODEL_DIR": str(model_dir),
        "DECISION_ALLOW_BUNDLED_MODEL": "false",
        "DECISION_MAX_QUEUE": "0",
        "DECISION_SLOT_GRACE_MS": "0",
        "DECISION_RETRY_AFTER_S": "1",
    }
    invoked, waits = [], []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    with (
        running_adapter(tmp_path, **served) as adapter,
        stubbed_client("sagemaker") as (sagemaker, stubber),
    ):
        from tests.support.sagemaker_runtime import runtime_in_front_of

        placed(stubber, TYPE, name=ENDPOINT, serving=ADAPTER)
        placed(stubber, TYPE, name=ENDPOINT)
        runtime = runtime_in_front_of(adapter.url, invoked)
        argv = ["measure", "--endpoint", ENDPOINT, "--max-clients", "2", "--max-requests", "8"]
        by_service = {"sagemaker": sagemaker, "sagemaker-runtime": runtime}
        assert main(argv, clients=by_service.__getitem__, sleep=sleep) == 0

    assert capsys.readouterr().out == f"MEASUREMENT={expected}\n"
    measured = json.loads(expected.read_text())
    assert (measured["model"], measured["instance_type"]) == ("gemma3-270m", TYPE)
    levels = {level["clients"]: level for level in measured["levels"]}
    assert sorted(levels) == [1, 2]
    assert levels[1]["refused_503"] == 0 and levels[1]["answered"] == 4
    # Every refusal was waited out for at least the adapter's hint before the next request.
    assert levels[2]["refused_503"] == len(waits) >= 1
    assert min(waits) >= 1.0  # DECISION_RETRY_AFTER_S
    assert set(invoked) == {ENDPOINT}
    assert len(invoked) == 1 + 4 + 4  # a warm-up, then each level's share of 8

    # The file drives the next synthesis: the template carries its derivation.
    derived = capacity.derive(capacity.Measurement.read(expected))
    assert derived.measurement.service_p95_ms == measured["service_p95_ms"]
    assert decision_cpu_capacity(config(**SMALL_RELEASE)) == expect(derived)
    assert expected.is_relative_to(tmp_path)


# A production-like mix: two decisions on a long state to one chat. The bench's load decision
# reads about 100 tokens; these read several times that.
LONG_STATE = " ".join(
    f"Ticket {n}: the customer wrote again about the failed reset and the locked account."
    for n in range(16)
)


def representative_bodies(path):
    from ops.workloads import LOAD_QUESTION, decision

    chat = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4}
    lines = [{"decision": decision(LONG_STATE, LOAD_QUESTION)}] * 2 + [chat]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_measure_with_representative_bodies_records_their_shape_and_synthesis_holds_it(
    model_dir, tmp_path, monkeypatch, capsys
):
    """`--body`: the real adapter answers the file's decisions and chats in turn; the file
    records what was measured, and a release that expects other requests is refused."""
    monkeypatch.setattr(capacity, "MEASUREMENTS", tmp_path / "measurements")
    expected = capacity.measurement_path("gemma3-270m", TYPE)
    served = {"DECISION_MODEL_DIR": str(model_dir), "DECISION_ALLOW_BUNDLED_MODEL": "false"}
    with (
        running_adapter(tmp_path, **served) as adapter,
        stubbed_client("sagemaker") as (sagemaker, stubber),
    ):
        from tests.support.sagemaker_runtime import runtime_in_front_of

        placed(stubber, TYPE, name=ENDPOINT, serving=ADAPTER)
        placed(stubber, TYPE, name=ENDPOINT)
        body = representative_bodies(tmp_path / "requests.jsonl")
        argv = ["measure", "--endpoint", ENDPOINT, "--max-clients", "1", "--max-requests", "6"]
        by_service = {"sagemaker": sagemaker, "sagemaker-runtime": runtime_in_front_of(adapter.url)}
        assert main([*argv, "--body", str(body)], clients=by_service.__getitem__) == 0

    assert capsys.readouterr().out == f"MEASUREMENT={expected}\n"
    measured = json.loads(expected.read_text())
    shape = measured["shape"]
    assert shape["chat_share"] == round(2 / 6, 4)  # 6 requests: the file's 3 twice
    assert shape["decisions_at_once"] == 1
    assert measured["requests"]["count"] == 6
    assert measured["requests"]["state_cache"] == {"miss": 4}
    tokens = measured["requests"]["input_tokens"]
    assert tokens["min"] <= shape["input_tokens"] <= tokens["max"]
    assert tokens["max"] > 150  # the long state, not the load decision

    def with_traffic(**traffic) -> dict:
        endpoint = {**SMALL_RELEASE["decisionCpuEndpoint"], "traffic": traffic}
        return {**SMALL_RELEASE, "decisionCpuEndpoint": endpoint}

    # What was measured is what the release expects: synthesized from the file.
    as_measured = with_traffic(inputTokens=shape["input_tokens"], chatShare=0.33)
    derived = capacity.derive(capacity.Measurement.read(expected))
    assert decision_cpu_capacity(config(**as_measured)) == expect(derived)
    # A release without chat, or of requests of the bench's length, is not what was measured.
    for traffic, key in (
        ({"inputTokens": shape["input_tokens"]}, "traffic.chatShare 0"),
        ({"inputTokens": 98, "chatShare": 0.33}, "traffic.inputTokens 98"),
    ):
        with pytest.raises(ValidationError, match=key):
            config(**with_traffic(**traffic))
