"""The OpenAI-facing surface through the real `openai` client (and System One's SDK beside
it), on the real bundled model: the model list, chat log-probabilities, unsupported fields."""

from __future__ import annotations

import openai
import pytest

SERVED = "gemma-3-270m-q4_k_m"


@pytest.fixture(scope="module")
def client(adapter):
    return openai.OpenAI(base_url=adapter.url + "/v1", api_key="unused", max_retries=0)


# --- GET /v1/models: one body, both clients -------------------------------------------------
def test_openai_client_lists_the_served_model_and_its_alias(client):
    listed = client.models.list()
    assert [model.id for model in listed.data] == [SERVED, "jev-latest"]
    for model in listed.data:
        assert model.object == "model" and model.owned_by == "local"
        assert model.created > 1_500_000_000  # the release date, in seconds
    assert client.models.list().data == listed.data  # stable between calls


def test_system_one_sdk_reads_the_same_body(adapter):
    from typesafe_sdk import TypeSafeClient

    with TypeSafeClient(api_key="ignored", base_url=adapter.url, timeout=120) as sdk:
        listed = sdk.models.list()
    assert [model.name for model in listed.models] == [SERVED, "jev-latest"]
    assert all(len(model.release_date) == 10 for model in listed.models)
