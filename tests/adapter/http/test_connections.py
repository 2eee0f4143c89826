"""Slow, idle and numerous connections: bounded in time, count, logging and memory."""

from __future__ import annotations

import contextlib
import json
import resource
import selectors
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
from decision_adapter.http.openapi import DECISION_EXAMPLE as DECISION

from launcher import running_adapter, wait_until

# Asserts on wall-clock time: runs in make test's serial part, alone on the machine.
pytestmark = pytest.mark.serial

HEADER_TIMEOUT_S = 1.0


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def _half_a_head(url: str) -> socket.socket:
    connection = _connect(url)
    connection.sendall(b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Ty")
    return connection


def _read_all(connection: socket.socket) -> bytes:
    data = b""
    while chunk := connection.recv(65536):
        data += chunk
    return data


def _decide(adapter) -> httpx.Response:
    return httpx.post(adapter.url + "/invocations", json=DECISION, timeout=30)


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def strict_adapter(tmp_path_factory):
    """A short deadline for request heads; a long one for bodies (the memory test's uploads)."""
    with running_adapter(
        tmp_path_factory.mktemp("strict"),
        DECISION_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
        DECISION_BODY_TIMEOUT_S="60",
    ) as adapter:
        yield adapter


def test_half_a_request_head_gets_a_408_and_is_closed(strict_adapter):
    connection = _half_a_head(strict_adapter.url)
    started = time.monotonic()
    reply = _read_all(connection)  # the server closes it: no recv timeout
    took = time.monotonic() - started
    connection.close()
    assert reply.startswith(b"HTTP/1.1 408 ")
    assert b"DECISION_HEADER_TIMEOUT_S" in reply
    assert HEADER_TIMEOUT_S - 0.1 < took < HEADER_TIMEOUT_S + 3


def test_a_kept_alive_connection_gets_the_same_deadline_for_its_next_head(strict_adapter):
    with _connect(strict_adapter.url) as connection:
        connection.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        first = connection.recv(65536)
        connection.sendall(b"GET /ping HTTP/1.1\r\nHost:")  # then nothing more
        replies = first + _read_all(connection)
    assert replies.startswith(b"HTTP/1.1 200 ")
    assert replies.count(b"HTTP/1.1 ") == 2 and b"HTTP/1.1 408 " in replies


def _lower_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_more_connections_than_descriptors_are_refused_cleanly(tmp_path):
    with running_adapter(
        tmp_path, preexec_fn=_lower_file_limit, DECISION_HEADER_TIMEOUT_S="3"
    ) as adapter:
        hoarders = [_half_a_head(adapter.url) for _ in range(400)]
        # A refusal is written as the connection is taken: every one is readable at once, long
        # before the header deadline answers the hoarders the server kept.
        refused = []
        with selectors.DefaultSelector() as selector:
            for connection in hoarders:
                selector.register(connection, selectors.EVENT_READ)
            while ready := selector.select(timeout=0.5):
                for key, _ in ready:
                    selector.unregister(key.fileobj)
                    head = key.fileobj.recv(65536)
                    if head.startswith(b"HTTP/1.1 503 "):
                        refused.append(head)
        assert refused, "connections beyond the cap must be refused at once"
        _, _, rest = refused[0].partition(b"\r\n")
        assert b"Retry-After: 1" in rest
        refusal = json.loads(rest.partition(b"\r\n\r\n")[2])
        assert refusal["retryable"] is True and refusal["retry_after_s"] == 1

        def overloaded() -> list[dict]:  # the refusals' EMF records: backpressure 503s too
            lines = [json.loads(line) for line in adapter.log().splitlines() if line[:1] == "{"]
            return [line for line in lines if line.get("message") == "connections refused"]

        wait_until(lambda: sum(r["Overloaded"] for r in overloaded()) >= len(refused), timeout=10)
        for record in overloaded():
            (directive,) = record["_aws"]["CloudWatchMetrics"]
            assert directive["Namespace"] == "DecisionAdapter" and record["Endpoint"] == "local"
            assert record["Admitted"] == 0 and record["Overloaded"] == record["refused"] > 0
        for connection in hoarders:  # the header deadline closes every hoarded connection
            connection.settimeout(30)
            with contextlib.suppress(ConnectionResetError):
                _read_all(connection)
        started = time.monotonic()
        assert httpx.get(adapter.url + "/ping", timeout=2).status_code == 200
        assert time.monotonic() - started < 2
        assert _decide(adapter).status_code == 200
        for connection in hoarders:
            connection.close()
        log = adapter.log()
    assert log.count("out of system resource") + log.count("out of file descriptors") <= 1


def test_memory_returns_after_many_large_unfinished_bodies(strict_adapter):
    size, connections = 1_000_000, 800
    assert _decide(strict_adapter).status_code == 200
    before = _rss_mib(strict_adapter.process.pid)
    uploads = []
    for _ in range(connections):
        upload = _connect(strict_adapter.url)
        upload.sendall(
            b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: "
            b"application/json\r\nContent-Length: %d\r\n\r\n" % size
        )
        uploads.append(upload)
    chunk = b" " * 65536
    for upload in uploads:
        for _ in range((size - 100_000) // len(chunk)):
            upload.sendall(chunk)
    grown = _settled_rss(strict_adapter.process.pid, until=lambda rss: rss > before + 150)
    for upload in uploads:
        upload.close()
    assert _decide(strict_adapter).status_code == 200
    # Back within seconds of the closes, not whenever glibc happens to trim its heap.
    after = _settled_rss(
        strict_adapter.process.pid, until=lambda rss: rss < before * 1.10, within_s=8
    )
    assert grown > before + 150, "the bodies must be buffered, or the test measures nothing"
    assert after < before * 1.10, (
        f"{before:.0f} MiB before, {grown:.0f} with the bodies, " f"{after:.0f} after"
    )


def _settled_rss(pid: int, until, within_s: float = 20) -> float:
    """Resident memory once `until(rss)` holds, or the last value after `within_s`."""
    deadline = time.monotonic() + within_s
    while not until(rss := _rss_mib(pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return rss


BODY_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def deadline_adapter(tmp_path_factory):
    """Short deadlines for heads and bodies, both under uvicorn's 5 s keep-alive timeout."""
    with running_adapter(
        tmp_path_factory.mktemp("deadlines"),
        DECISION_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
        DECISION_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
    ) as adapter:
        yield adapter


def _responses_until_closed(connection: socket.socket, *, trickle: float | None = None) -> bytes:
    """Everything the server sends until it closes the connection; with `trickle`, one more
    body byte every `trickle` seconds meanwhile (as a client dragging its body out would)."""
    connection.settimeout(trickle or 30)
    data = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            chunk = connection.recv(65536)
        except TimeoutError:
            connection.sendall(b"x")
            continue
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"still open after 30 s, having sent {data!r}")


@pytest.mark.parametrize(
    "head",
    [
        # Answered at once, though its body has not arrived (/ping reads none).
        b"GET /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
        # Answered with a 408 once the body deadline passed.
        b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{",
    ],
    ids=["early-answer", "body-timeout"],
)
def test_a_body_still_trickling_after_its_answer_is_cut_off(deadline_adapter, head):
    with _connect(deadline_adapter.url) as connection:
        connection.sendall(head)
        started = time.monotonic()
        replies = _responses_until_closed(connection, trickle=0.5)
        took = time.monotonic() - started
    assert replies.count(b"HTTP/1.1 ") == 1, replies
    # The answer, then at most one body deadline more: trickling bytes do not extend it.
    assert took < 2 * BODY_TIMEOUT_S + 3, f"closed after {took:.1f} s"


def test_a_body_ending_after_its_answer_starts_a_cycle_with_its_own_head_deadline(
    deadline_adapter,
):
    with _connect(deadline_adapter.url) as connection:
        connection.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
        first = b""
        while not first.endswith(b"}"):  # the whole answer: its head, then its JSON body
            first += connection.recv(65536)
        # Past the head deadline armed before the answer, within the body deadline after it.
        time.sleep(HEADER_TIMEOUT_S + 0.3)
        connection.sendall(b"x")
        time.sleep(0.3)
        connection.sendall(b"xGET /ping HTTP/1.1\r\nHo")  # the body's end, half a head
        started = time.monotonic()
        rest = _read_all(connection)
        took = time.monotonic() - started
    assert first.startswith(b"HTTP/1.1 200 ")
    assert rest.startswith(b"HTTP/1.1 408 ") and b"DECISION_HEADER_TIMEOUT_S" in rest
    assert took < HEADER_TIMEOUT_S + 3


def test_an_idle_kept_alive_connection_is_closed_without_an_unprompted_408(deadline_adapter):
    with _connect(deadline_adapter.url) as connection:
        connection.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        replies = _responses_until_closed(connection)
    assert replies.startswith(b"HTTP/1.1 200 ") and replies.count(b"HTTP/1.1 ") == 1, replies


def test_a_request_head_over_16_kb_gets_a_json_400(deadline_adapter):
    with _connect(deadline_adapter.url) as connection:
        # Still incomplete past h11's 16 KiB: refused without waiting for the rest.
        connection.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 17_000)
        reply = _read_all(connection)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"Content-Type: application/json" in head
    error = json.loads(body)
    assert error["error"] == "request head: more than 16384 bytes"
    assert error["error_type"] == "invalid_request" and error["retryable"] is False


WRITE_TIMEOUT_S = 2.0


def test_a_client_that_never_reads_its_answers_is_disconnected_after_the_write_deadline(
    tmp_path,
):
    """Pipelined requests whose answers the client never reads fill the socket's buffers; the
    answer then waits on the client with no end of its own. The write deadline closes it."""
    with running_adapter(
        tmp_path, DECISION_WRITE_TIMEOUT_S=str(WRITE_TIMEOUT_S), DECISION_MAX_CONNECTIONS="8"
    ) as adapter:
        parts = urlsplit(adapter.url)
        connection = socket.socket()
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        connection.connect((parts.hostname, parts.port))
        request = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n"
        connection.sendall(request * 200)
        try:
            wait_until(
                lambda: "its client stopped reading the answer" in adapter.log(),
                timeout=WRITE_TIMEOUT_S + 20,
            )
            # Closed by the server: what it had sent drains, then the connection ends.
            connection.settimeout(10)
            with contextlib.suppress(ConnectionResetError):
                while connection.recv(1 << 20):
                    pass
        finally:
            connection.close()
        assert _decide(adapter).status_code == 200
