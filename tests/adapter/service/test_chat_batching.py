"""Chat streams admitted together (DECISION_MAX_CHAT_STREAMS above 1) share each token's batch, on
the real bundled model: each stream's text and log-probabilities are the same bits alone and
beside others, the batches are fewer, admission stays bounded (503 beyond it), a departed
client's stream is dropped, decisions answered between the rounds keep their bits, and the
deadline and SIGTERM end batched streams as they end one."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest

from launcher import running_adapter, wait_until
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


def test_streams_beside_each_other_read_the_same_bits_as_alone_in_fewer_batches(batching):
    url = batching.url + "/v1/chat/completions"
    before = batching.stats()["engine"]["decode_calls"]
    alone = [answer(httpx.post(url, json=body, timeout=120).json()) for body in BODIES]
    between = batching.stats()["engine"]["decode_calls"]
    together = [answer(reply.json()) for reply in post_together(url, BODIES)]
    after = batching.stats()["engine"]["decode_calls"]
    assert together == alone
    assert all(text for text, _, _ in alone)
    assert alone[0][2] is not None and alone[1][1] in ("stop", "length")
    # One token of every running stream per batch: fewer batches than one stream at a time.
    assert after - between < (between - before) * 0.8, (between - before, after - between)


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
