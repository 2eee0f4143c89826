"""The OpenAI-facing surface through the real `openai` client (and System One's SDK beside
it), on the real bundled model: the model list, chat log-probabilities, unsupported fields."""

from __future__ import annotations

import math

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


# --- chat log-probabilities ---------------------------------------------------------------
GREEDY = dict(
    model="gemma",
    messages=[{"role": "user", "content": "Count: 1, 2, 3,"}],
    max_tokens=6,
    temperature=0,
    stop=["@@@"],
    logprobs=True,
    top_logprobs=3,
)


def check_greedy_logprobs(content, text: str) -> None:
    """Greedy decoding samples each step's likeliest token: it is the first alternative, with
    the same log-probability; together the tokens' bytes are the answer's text."""
    assert b"".join(bytes(entry.bytes) for entry in content).decode() == text
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        best = entry.top_logprobs[0]
        assert (best.token, best.logprob) == (entry.token, entry.logprob)
        alternatives = [alt.logprob for alt in entry.top_logprobs]
        assert alternatives == sorted(alternatives, reverse=True)
        assert sum(math.exp(lp) for lp in alternatives) <= 1 + 1e-6


def test_chat_returns_each_tokens_logprobs(client):
    completion = client.chat.completions.create(**GREEDY)
    choice = completion.choices[0]
    content = choice.logprobs.content
    assert len(content) == completion.usage.completion_tokens == 6
    check_greedy_logprobs(content, choice.message.content)


def test_streamed_chat_returns_the_same_logprobs(client):
    whole = client.chat.completions.create(**GREEDY).choices[0]
    chunks = list(client.chat.completions.create(stream=True, **GREEDY))
    streamed = [
        entry
        for chunk in chunks
        if chunk.choices and chunk.choices[0].logprobs
        for entry in chunk.choices[0].logprobs.content
    ]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert [(e.token, e.logprob) for e in streamed] == [
        (e.token, e.logprob) for e in whole.logprobs.content
    ]
    check_greedy_logprobs(streamed, text)


def test_without_logprobs_none_are_returned(client):
    request = {**GREEDY, "logprobs": False}
    del request["top_logprobs"]
    assert client.chat.completions.create(**request).choices[0].logprobs is None


def test_top_logprobs_zero_gives_the_tokens_alone(client):
    content = client.chat.completions.create(**{**GREEDY, "top_logprobs": 0}).choices[0]
    assert all(entry.top_logprobs == [] for entry in content.logprobs.content)


# --- fields the server does not implement are refused, naming the field ------------------
HELLO = dict(model="gemma", messages=[{"role": "user", "content": "Hi"}], max_tokens=1)


@pytest.mark.parametrize(
    "extra,field",
    [
        ({"n": 2}, "n"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
        ({"parallel_tool_calls": False}, "parallel_tool_calls"),
        ({"modalities": ["text"]}, "modalities"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs: true
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"extra_body": {"mirostat": 2}}, "mirostat"),  # a field no schema knows
    ],
)
def test_an_unsupported_field_is_a_422_naming_it(client, extra, field):
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        client.chat.completions.create(**HELLO, **extra)
    # The client hands over the body's `error` (a message naming the field first).
    assert raised.value.body.startswith(f"{field}:")
    assert raised.value.response.json()["field"] == field


def test_fields_without_effect_here_are_accepted(client):
    completion = client.chat.completions.create(
        **HELLO,
        user="u-1",
        store=False,
        metadata={"team": "support"},
        frequency_penalty=0,
        extra_body={"prompt_cache_key": "k"},
    )
    assert completion.choices[0].finish_reason in {"stop", "length"}
