"""A test fixture over the launcher: the model held busy by a long chat."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

from launcher import Adapter

LONG_CHAT = {
    "messages": [{"role": "user", "content": "Count from 1 to 1000: 1, 2, 3,"}],
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
