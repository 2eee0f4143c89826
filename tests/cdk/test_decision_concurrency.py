"""The adapter's concurrency settings as a release carries them: context keys rendered into each
decision Model's environment, read there by the adapter's own settings; the asynchronous
endpoint's concurrent invocations following them; their KV cache checked against the instance's
memory at synthesis."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from decision_adapter.settings import Settings
from pydantic import ValidationError

from stacks.app import endpoint_stack
from stacks.config import AppConfig
from tests.cdk.test_async_endpoint import async_config
from tests.cdk.test_endpoint_stack import model
from tests.support.cdk_templates import GIVEN_CAPACITY, RELEASE_WITH_GPU, cdk_json_context

CONCURRENCY = {"maxScoringRequests": 4, "maxChatStreams": 2, "chatSharedBatches": True}


def release(**endpoints) -> AppConfig:
    return AppConfig.from_context({**cdk_json_context(), **RELEASE_WITH_GPU, **endpoints})


def synthesized(config: AppConfig) -> Template:
    stack = endpoint_stack(cdk.App(context=cdk_json_context()), "Endpoints", config=config)
    return Template.from_stack(stack)


@pytest.fixture(scope="module")
def template() -> Template:
    return synthesized(
        release(
            decisionCpuEndpoint={**GIVEN_CAPACITY, "concurrency": CONCURRENCY},
            decisionGpuEndpoint={**GIVEN_CAPACITY, "enabled": True, "concurrency": CONCURRENCY},
            decisionAsyncEndpoint={"enabled": True, "concurrency": {"maxScoringRequests": 3}},
        )
    )


def adapter_settings(template: Template, endpoint_name: str) -> Settings:
    """What the adapter starts with on that endpoint: its Model's environment, read as the
    container reads it."""
    environment = model(template, endpoint_name)["model"]["PrimaryContainer"]["Environment"]
    return Settings.from_environment(environment)


@pytest.mark.parametrize("name", ["decision-models-decision-cpu", "decision-models-decision-gpu"])
def test_the_concurrency_keys_reach_the_adapter(template, name):
    settings = adapter_settings(template, name)
    assert settings.max_scoring_requests == 4
    assert settings.max_chat_streams == 2
    assert settings.chat_shared_batches is True


def test_the_async_endpoint_sends_each_instance_the_decisions_it_scores_at_once(template):
    assert adapter_settings(template, "decision-models-decision-async").max_scoring_requests == 3
    client = async_config(template)["AsyncInferenceConfig"]["ClientConfig"]
    assert client["MaxConcurrentInvocationsPerInstance"] == 3


def test_unset_the_adapter_runs_its_defaults_one_request_at_a_time():
    default = synthesized(release(decisionAsyncEndpoint={"enabled": True}))
    for name in ("decision-models-decision-cpu", "decision-models-decision-async"):
        settings = adapter_settings(default, name)
        assert (settings.max_scoring_requests, settings.max_chat_streams) == (1, 1)
    client = async_config(default)["AsyncInferenceConfig"]["ClientConfig"]
    assert client["MaxConcurrentInvocationsPerInstance"] == 1


def refusal(**endpoints) -> str:
    with pytest.raises(ValidationError) as raised:
        release(**endpoints)
    (error,) = raised.value.errors()
    return f"{'.'.join(map(str, error['loc']))}: {error['msg']}"


def test_a_kv_cache_larger_than_the_cpu_instance_is_refused_naming_the_keys():
    # 4 requests: the main context and 8 streams of 4096 cells, 5.1 GiB of a 4 GiB instance.
    message = refusal(
        decisionCpuEndpoint={
            **GIVEN_CAPACITY,
            "instanceType": "ml.c6i.large",
            "concurrency": {"maxScoringRequests": 4},
        }
    )
    assert message.startswith("decisionCpuEndpoint: ")
    assert "concurrency.maxScoringRequests 4" in message
    assert "concurrency.kvBytesPerToken" in message
    assert "ml.c6i.large's 4 GiB of memory" in message
    # The same settings fit a model of smaller cells (Gemma 3 270M: 18 layers, 1 KV head of 256).
    release(
        decisionCpuEndpoint={
            **GIVEN_CAPACITY,
            "instanceType": "ml.c6i.large",
            "concurrency": {"maxScoringRequests": 4, "kvBytesPerToken": 2 * 18 * 256 * 2},
        }
    )


def test_a_gpu_pool_is_checked_against_its_smallest_gpu():
    gpu = {**GIVEN_CAPACITY, "enabled": True, "nCtx": 32768, "concurrency": {"maxChatStreams": 4}}
    message = refusal(decisionGpuEndpoint=gpu)
    assert message.startswith("decisionGpuEndpoint: ")
    assert "concurrency.maxChatStreams 4" in message
    assert "ml.g6.2xlarge's 24 GiB of one GPU's memory" in message
    # 22.5 GiB of cache fits half of an L40S's 48 GiB: a pool of g6e alone is deployable.
    release(decisionGpuEndpoint={**gpu, "instancePool": ["ml.g6e.xlarge"]})


def test_the_async_endpoint_is_checked_too():
    message = refusal(
        decisionAsyncEndpoint={
            "enabled": True,
            "instanceType": "ml.c6i.large",
            "concurrency": {"maxScoringRequests": 8},
        }
    )
    assert message.startswith("decisionAsyncEndpoint: ")
    assert "ml.c6i.large" in message


def test_shared_chat_batches_need_more_than_one_stream():
    message = refusal(
        decisionCpuEndpoint={**GIVEN_CAPACITY, "concurrency": {"chatSharedBatches": True}}
    )
    assert message.startswith("decisionCpuEndpoint.concurrency: ")
    assert "chatSharedBatches needs maxChatStreams above 1" in message
