"""Test fixtures over the launcher: the model held busy by a long chat, a request in flight,
a decision slow to read."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx

from launcher import Adapter
from tests.support.bodies import decision

LONG_CHAT = {
    "messages": [
        {
            "role": "user",
            "content": "Write every number from 1 to 1000, separated by commas, and nothing else.",
        }
    ],
    "max_tokens": 1000,
    "temperature": 0,
    "stop": ["@@@"],
}


@contextlib.contextmanager
def model_held(adapter: Adapter, **headers: str) -> Iterator[None]:
    """The model busy with a long chat while the body runs; the chat's client then leaves,
    which stops the generation, and the model is free again on exit."""
    body = json.dumps(LONG_CHAT).encode()
    parts = urlsplit(adapter.url)
    with socket.create_connection((parts.hostname, parts.port)) as connection:
        connection.sendall(
            b"POST /invocations HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        adapter.wait_until_in_flight(1, **headers)
        yield
    adapter.wait_until_in_flight(0, **headers)


def post_in_flight(adapter: Adapter, path: str, body: dict) -> Future[httpx.Response]:
    """POST `body` on a thread of its own; returns once the adapter counts it in flight."""
    executor = ThreadPoolExecutor(max_workers=1)
    reply = executor.submit(httpx.post, adapter.url + path, json=body, timeout=60)
    executor.shutdown(wait=False)  # the thread ends with its request
    adapter.wait_until_in_flight(1)
    return reply


def slow_decision(state_line: str, repeats: int, options=("data", "infra")) -> dict:
    """A decision on `state_line` repeated: a long state, whose prefill holds the model."""
    return decision(state_line * repeats, "Which team?", options, id="slow")


def post_together(url: str, bodies: list[dict]) -> list[httpx.Response]:
    """All bodies at once, each on its own connection and thread, released together."""
    replies: list = [None] * len(bodies)
    start = threading.Barrier(len(bodies))

    def send(index: int) -> None:
        start.wait()
        replies[index] = httpx.post(url, json=bodies[index], timeout=120)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return replies
