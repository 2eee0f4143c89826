"""OpenAI-compatible chat through the official `openai` client, on the real model."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from launcher import wait_until
from tests.support import bodies
from tests.support.fake_service import app_client


@pytest.fixture(scope="module")
def client(adapter):
    return openai.OpenAI(base_url=adapter.url + "/v1", api_key="unused", max_retries=0)


def test_chat_completion(client):
    completion = client.chat.completions.create(
        model="gemma",
        messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=8,
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in {"stop", "length"}
    assert completion.usage.prompt_tokens > 3
    assert 1 <= completion.usage.completion_tokens <= 8
    assert (
        completion.usage.total_tokens
        == completion.usage.prompt_tokens + completion.usage.completion_tokens
    )
    # The GGUF's hash and how chat meets the model: the decisions' context, one at a time.
    assert completion.system_fingerprint.startswith("fp_")
    assert completion.system_fingerprint.endswith("_alone")


def test_max_tokens_ends_with_length(client):
    completion = client.chat.completions.create(
        model="gemma",
        messages=[{"role": "user", "content": "Count from 1 to 100: 1, 2, 3,"}],
        max_tokens=5,
        temperature=0,
        stop=["@@@"],
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 5


# Greedy counting: ten tokens of digits, commas and spaces, none of which can start "@@@".
COUNTING = dict(
    model="gemma",
    messages=[{"role": "user", "content": "Count: 1, 2, 3,"}],
    max_tokens=10,
    temperature=0,
    stop=["@@@"],
)


def test_streaming_matches_the_non_streamed_answer(client):
    whole = client.chat.completions.create(**COUNTING).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, **COUNTING))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole and len(chunks) > 3
    assert chunks[-1].choices[0].finish_reason == "length"


def test_each_streamed_token_is_sent_as_soon_as_it_is_sampled(client):
    """Only text that could begin a stop string waits for the next token: counting on, no
    piece can start "@@@", so every chunk carries the text of exactly one token."""
    chunks = client.chat.completions.create(logprobs=True, stream=True, **COUNTING)
    texts = [c.choices[0] for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) == 10, [t.delta.content for t in texts]
    for chunk in texts:
        (token,) = chunk.logprobs.content
        assert chunk.delta.content == token.token


def test_stop_strings_end_the_answer(client):
    request = dict(
        model="gemma",
        messages=[{"role": "user", "content": "Count: 1, 2, 3,"}],
        max_tokens=20,
        temperature=0,
    )
    free = client.chat.completions.create(stop=["@@@"], **request).choices[0].message.content
    assert "5" in free, free  # the greedy continuation counts on
    stopped = client.chat.completions.create(stop=["5"], **request)
    assert stopped.choices[0].message.content == free[: free.index("5")]
    assert stopped.choices[0].finish_reason == "stop"


def test_a_clients_stop_strings_add_to_the_prompts_own(client):
    # The bundled model's completion-mode prompt stops at "\nUser:", where it would go on to
    # write the user's next turn itself; a client's own stop must not take that away.
    request = dict(
        model="gemma",
        messages=[{"role": "user", "content": "What is 2+2?"}],
        max_tokens=60,
        temperature=0,
    )
    alone = client.chat.completions.create(**request).choices[0]
    with_stop = client.chat.completions.create(stop=["@@@"], **request).choices[0]
    assert alone.finish_reason == "stop" and "User:" not in alone.message.content
    assert (with_stop.finish_reason, with_stop.message.content) == (
        alone.finish_reason,
        alone.message.content,
    )


def sampled_story(client, *, seed: int, top_k: int = 0) -> str:
    """A short answer sampled at a temperature where the seed and top_k show."""
    completion = client.chat.completions.create(
        model="gemma",
        messages=[{"role": "user", "content": "Tell me a story."}],
        max_tokens=12,
        temperature=1.5,
        seed=seed,
        stop=["@@@"],
        extra_body={"top_k": top_k},
    )
    return completion.choices[0].message.content


@pytest.mark.parametrize("seed", [0, 2**32 - 2])
def test_a_seed_reproduces_a_sampled_answer(client, seed):
    first = sampled_story(client, seed=seed)
    assert sampled_story(client, seed=seed) == first
    others = {sampled_story(client, seed=(seed + step) % (2**32 - 1)) for step in (1, 2, 3)}
    assert others != {first}  # the seed is used: at this temperature other seeds differ


def test_a_top_k_beyond_the_vocabulary_keeps_every_token(client):
    unrestricted = sampled_story(client, seed=11, top_k=10**6)  # more than the 262,144 tokens
    # Not wrapped into 32 bits (2**32 + 1 as 1, greedy).
    assert sampled_story(client, seed=11, top_k=2**32 + 1) == unrestricted
    assert sampled_story(client, seed=11, top_k=1) != unrestricted


def test_invocations_with_messages_is_chat(adapter):
    body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
    response = httpx.post(adapter.url + "/invocations", json=body, timeout=60)
    assert response.status_code == 200
    assert response.json()["object"] == "chat.completion"


def test_invocations_streams_server_sent_events(adapter):
    body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "stream": True}
    with httpx.stream("POST", adapter.url + "/invocations", json=body, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    first = json.loads(lines[0][6:])
    assert first["object"] == "chat.completion.chunk"
    assert first["system_fingerprint"].endswith("_alone")


@pytest.mark.parametrize(
    "body,field",
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": 9}, "temperature"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            | {"max_completion_tokens": 8},
            "max_completion_tokens",
        ),
        # llama.cpp would wrap these into 32 bits, or read the largest as "random".
        ({"messages": [{"role": "user", "content": "hi"}], "seed": -2}, "seed"),
        ({"messages": [{"role": "user", "content": "hi"}], "seed": 2**32 - 1}, "seed"),
        ({"messages": [{"role": "user", "content": "hi"}], "seed": 2**32 + 5}, "seed"),
    ],
)
def test_bad_chat_requests_name_the_field(body, field):
    with app_client() as in_process:  # validation needs no model: over a fake service
        response = in_process.post("/v1/chat/completions", json=body)
    assert response.status_code == 422 and response.json()["field"] == field


HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "changes,field",
    [
        # Strict types: no guessing what a string or a boolean meant.
        ({"stream": "yes"}, "stream"),
        ({"logprobs": "true"}, "logprobs"),
        ({"n": True}, "n"),
        ({"seed": True}, "seed"),
        ({"max_tokens": "4"}, "max_tokens"),
        ({"temperature": "0.5"}, "temperature"),
        # Message fields that would change the answer if they were read: refused, not dropped.
        ({"messages": [{**HI[0], "name": "alice"}]}, "messages[0].name"),
        (
            {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}]},
            "messages[0].tool_calls",
        ),
        ({"messages": [{**HI[0], "tool_call_id": "c"}]}, "messages[0].tool_call_id"),
        ({"messages": [{**HI[0], "mood": "curious"}]}, "messages[0].mood"),
    ],
)
def test_chat_fields_are_strict_and_unused_message_fields_are_refused(adapter, changes, field):
    body = {"messages": HI, "max_tokens": 1, **changes}
    response = httpx.post(adapter.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


def test_an_answer_echoed_back_into_the_conversation_is_accepted(client):
    # The SDK's message object carries refusal, tool_calls, ... as null: those are no request.
    request = dict(model="gemma", max_tokens=2, temperature=0, stop=["@@@"])
    first = client.chat.completions.create(messages=HI, **request).choices[0].message
    echoed = first.model_dump()
    assert "refusal" in echoed and echoed["tool_calls"] is None
    follow_up = HI + [echoed, {"role": "user", "content": "again"}]
    assert client.chat.completions.create(messages=follow_up, **request).choices


@pytest.mark.parametrize(
    "seed,expected", [(-1, None), (None, None), (0, 0), (2**32 - 2, 2**32 - 2)]
)
def test_seed_minus_one_asks_for_a_random_seed_as_in_llama_server(seed, expected):
    from decision_adapter.formats import openai_chat

    body = {"messages": [{"role": "user", "content": "hi"}], "seed": seed}
    assert openai_chat.FORMAT.parse(body).as_chat().seed == expected


def test_text_parts_are_joined_line_by_line_as_llama_server_joins_them():
    from decision_adapter.formats import openai_chat

    parts = [{"type": "text", "text": "Translate:"}, {"type": "text", "text": "Guten Tag"}]
    chat = openai_chat.FORMAT.parse({"messages": [{"role": "user", "content": parts}]}).as_chat()
    assert chat.messages == [("user", "Translate:\nGuten Tag")]


def test_each_request_logs_one_json_line_with_its_id(adapter):
    response = httpx.post(
        adapter.url + "/v1/chat/completions",
        timeout=60,
        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    )
    request_id = response.headers["x-request-id"]

    def logged() -> list[dict]:
        return [json.loads(line) for line in adapter.log().splitlines() if request_id in line]

    # The line is written once the response is sent: the client may read it first.
    wait_until(lambda: logged(), timeout=30, what=f"a log line for {request_id}")
    lines = logged()
    assert len(lines) == 1
    assert lines[0]["status"] == 200 and lines[0]["path"] == "/v1/chat/completions"
    assert lines[0]["duration_ms"] > 0 and lines[0]["completion_tokens"] >= 1


def test_the_model_is_free_as_soon_as_a_chat_answer_arrives(adapter):
    """A client alternating chat and decisions, one request at a time, is never refused."""
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    decision = bodies.decision()
    statuses = []
    with httpx.Client(base_url=adapter.url, timeout=60) as client:  # keep-alive: no pause between
        for _ in range(15):
            statuses.append(client.post("/invocations", json=chat).status_code)
            statuses.append(client.post("/invocations", json=decision).status_code)
    assert statuses == [200] * 30


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_chat_past_its_deadline_stops_and_answers_length(tmp_path, stream):
    """DECISION_CHAT_DEADLINE_S bounds how long one chat holds the model: a thousand tokens
    asked for, the deadline a second away, the answer is what was generated by then."""
    from launcher import running_adapter
    from tests.support.adapter_process import LONG_CHAT

    with running_adapter(tmp_path, DECISION_CHAT_DEADLINE_S="1") as adapter:
        url = adapter.url + "/v1/chat/completions"
        if not stream:
            reply = httpx.post(url, json=LONG_CHAT, timeout=120).json()
            (choice,) = reply["choices"]
            finish, tokens = choice["finish_reason"], reply["usage"]["completion_tokens"]
            assert choice["message"]["content"]
        else:
            chunks = []
            with httpx.stream("POST", url, json={**LONG_CHAT, "stream": True}, timeout=120) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        chunks.append(json.loads(line[6:]))
            finish = next(c["choices"][0]["finish_reason"] for c in chunks if c["choices"]
                          and c["choices"][0]["finish_reason"])  # fmt: skip
            tokens = next(c["usage"]["completion_tokens"] for c in chunks if c.get("usage"))
    assert finish == "length"
    assert 0 < tokens < LONG_CHAT["max_tokens"]
