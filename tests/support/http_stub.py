"""A local HTTP server for the ops HTTP tests: it answers POSTs from a script and records each
request."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[int, dict[str, str], bytes]  # status, headers, body


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: Message
    body: bytes


@dataclass
class HttpStub:
    """Gives `answers` in turn, the last one to every request after it."""

    url: str
    answers: list[Answer]
    received: list[Received] = field(default_factory=list)

    def next_answer(self) -> Answer:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def json_answer(status: int, payload: Any, **headers: str) -> Answer:
    return status, {**headers, "Content-Type": "application/json"}, json.dumps(payload).encode()


@contextlib.contextmanager
def http_stub(*answers: Answer) -> Iterator[HttpStub]:
    """A server on a free local port; without answers, each request gets an empty 200."""
    stub = HttpStub("", list(answers) or [(200, {}, b"")])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            # The path as sent: http.server folds a leading "//" into "/", other servers
            # would not.
            sent = self.requestline.split()[1]
            stub.received.append(Received(self.command, sent, self.headers, body))
            status, headers, data = stub.next_answer()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    stub.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
