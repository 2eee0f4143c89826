"""SIGTERM with connections still in the listen backlog (completed by the kernel, not yet
accepted): each is answered with a retryable 503, never reset by the listener's close."""

from __future__ import annotations

import signal
import socket
from urllib.parse import urlsplit

from decision_adapter.http.connections import answer_backlog, shutting_down

from launcher import running_adapter

PING = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"


def _read_until_closed(connection: socket.socket) -> bytes:
    data = b""
    while chunk := connection.recv(65536):
        data += chunk
    return data


def test_each_connection_waiting_in_the_backlog_gets_the_503():
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        clients = [socket.create_connection(listener.getsockname(), timeout=5) for _ in range(3)]
        for client in clients:
            client.sendall(PING)
        assert answer_backlog([listener], retry_after_s=4) == 3
        for client in clients:
            with client:
                assert _read_until_closed(client) == shutting_down(4)
        assert (
            answer_backlog([listener], retry_after_s=4) == 0
        )  # nothing left; the listener still open
        assert listener.fileno() >= 0


def test_sigterm_answers_the_connections_a_stopped_server_had_not_accepted(tmp_path):
    """The adapter is stopped (SIGSTOP) while three clients connect and send, so they wait in
    the backlog; then SIGTERM and SIGCONT. Each gets an HTTP answer, none a reset."""
    with running_adapter(tmp_path) as adapter:
        parts = urlsplit(adapter.url)
        adapter.process.send_signal(signal.SIGSTOP)
        try:
            clients = [
                socket.create_connection((parts.hostname, parts.port), timeout=30) for _ in range(3)
            ]
            for client in clients:
                client.sendall(PING)
            adapter.process.send_signal(signal.SIGTERM)
        finally:
            adapter.process.send_signal(signal.SIGCONT)
        answers = []
        for client in clients:
            with client:
                answers.append(_read_until_closed(client))
        assert adapter.process.wait(timeout=60) == 0
    assert all(answer.startswith(b"HTTP/1.1 ") for answer in answers), answers
