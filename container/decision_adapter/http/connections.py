"""Limits on connections that uvicorn leaves open-ended.

uvicorn times out idle keep-alive connections, but not one that sends half a request head, nor
one that trickles the rest of a body after its answer (any byte resets uvicorn's keep-alive
timer), and it accepts connections until the process runs out of file descriptors (asyncio then
logs every failed accept()). So: each request head must arrive within a deadline (else 408 and
close), a body left unread after its answer must end within the body deadline (else the
connection is closed), an answer the client stops reading is dropped with its connection after
the write deadline, open connections are capped below the descriptor limit (the next one gets
a 503 and is closed at once), and the event loop logs running out of descriptors at most once per
interval.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import resource
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..metrics import ConnectionRefusals

log = logging.getLogger("decision_adapter")

# Descriptors kept free for everything that is not a client: the model file, logs, the
# listening socket, what libraries open.
RESERVED_DESCRIPTORS = 64
ACCEPT_ERROR_LOG_INTERVAL_S = 10.0
# What a connection waits for from its client; each phase gets its deadline as it begins.
HEAD, REQUEST, UNREAD_BODY = "head", "request", "unread body"


def _raw_response(
    status: str, message: str, error_type: str, *, retryable: bool, retry_after_s: int | None = None
) -> bytes:
    """A whole response written before (or instead of) h11: the connection closes after it.
    A Retry-After is also in the body, where clients behind SageMaker can read it."""
    fields: dict[str, Any] = {"error": message, "error_type": error_type, "retryable": retryable}
    extra = ""
    if retry_after_s is not None:
        fields["retry_after_s"] = retry_after_s
        extra = f"Retry-After: {retry_after_s}\r\n"
    body = json.dumps(fields).encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\n"
        f"{extra}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class HeapTrimmer:
    """Hands freed heap pages back to the system a moment after connections close.

    Request bodies and socket buffers of many concurrent connections are interleaved in the heap
    with objects that live on; glibc keeps the free pages between them (measured here: 800
    connections sending 900 KB each left 200 MiB behind). malloc_trim(0) releases them; it runs
    at most once per interval, after the closes, not per connection.
    """

    def __init__(self, delay_s: float = 1.0) -> None:
        self._malloc_trim: Callable[[int], int] | None
        try:
            self._malloc_trim = ctypes.CDLL(None).malloc_trim
        except AttributeError:  # not glibc: nothing to do
            self._malloc_trim = None
        self._delay_s = delay_s
        self._scheduled = False

    def soon(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._malloc_trim is not None and not self._scheduled:
            self._scheduled = True
            loop.call_later(self._delay_s, self._trim, self._malloc_trim)

    def _trim(self, malloc_trim: Callable[[int], int]) -> None:
        self._scheduled = False
        malloc_trim(0)


def connection_limit(configured: int) -> int:
    """The configured cap, lowered to fit the process's file-descriptor limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, soft - RESERVED_DESCRIPTORS))


def guarded_protocol(
    *,
    max_connections: int,
    header_timeout_s: float,
    body_timeout_s: float,
    retry_after_s: int,
    write_timeout_s: float = 10.0,
    metrics_endpoint: str = "local",
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a request-head deadline, a deadline for a body still arriving
    after its answer, a deadline for an answer the client stopped reading, a connection cap,
    and JSON for the requests h11 cannot parse."""
    refusal = _raw_response(
        "503 Service Unavailable",
        f"too many open connections (at most {max_connections}, DECISION_MAX_CONNECTIONS); retry",
        "connection_limit",
        retryable=True,
        retry_after_s=retry_after_s,
    )
    too_slow = _raw_response(
        "408 Request Timeout",
        f"request head not received within {header_timeout_s:g} s (DECISION_HEADER_TIMEOUT_S)",
        "header_timeout",
        retryable=False,
    )

    trimmer = HeapTrimmer()
    refusals = ConnectionRefusals(metrics_endpoint)

    class GuardedH11Protocol(H11Protocol):
        _refused = False
        _answered = False  # a response went out: the connection is a kept-alive one
        _phase: str | None = None
        _deadline: asyncio.TimerHandle | None = None
        _write_stalled: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= max_connections:
                self._refused = True
                transport.write(refusal)
                transport.close()
                refusals.refused(self.loop)
                return
            super().connection_made(transport)
            self._watch()

        def pause_writing(self) -> None:
            # The transport's buffer is past its high-water mark: the client is not reading.
            # uvicorn then waits for it (FlowControl.drain) without a bound; this is the bound.
            super().pause_writing()
            if self._write_stalled is None:
                self._write_stalled = self.loop.call_later(write_timeout_s, self._abandon)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._write_stalled is not None:
                self._write_stalled.cancel()
                self._write_stalled = None

        def _abandon(self) -> None:
            """Closed at once, the unsent answer dropped: closing gracefully would wait for the
            client to read it. uvicorn's connection_lost wakes the answer still waiting."""
            self._write_stalled = None
            log.warning(
                "connection closed: its client stopped reading the answer",
                extra={"fields": {"write_timeout_s": write_timeout_s}},
            )
            self.transport.abort()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._write_stalled is not None:
                self._write_stalled.cancel()
            if self._deadline is not None:
                self._deadline.cancel()
            if not self._refused:
                super().connection_lost(exc)
                trimmer.soon(self.loop)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch()  # the end of an unread body starts the next request cycle

        def on_response_complete(self) -> None:
            self._answered = True
            super().on_response_complete()
            self._watch()

        def send_400_response(self, msg: str) -> None:
            # h11 could not parse the request: uvicorn answers plain text; every other
            # refusal of this server is JSON.
            buffered = len(self.conn.trailing_data[0])
            limit = self.config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
            if buffered > limit:
                message = f"request head: more than {limit} bytes"
            else:
                message = "request head: not a valid HTTP/1.1 request"
            self.transport.write(
                _raw_response("400 Bad Request", message, "invalid_request", retryable=False)
            )
            self.transport.close()

        def _watch(self) -> None:
            """Arm the deadline of the phase the connection is in, as that phase begins."""
            if self.transport.is_closing():
                return
            phase = self._current_phase()
            if phase == self._phase:
                return
            self._phase = phase
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            if phase == HEAD:
                self._deadline = self.loop.call_later(header_timeout_s, self._head_overdue)
            elif phase == UNREAD_BODY:
                self._deadline = self.loop.call_later(body_timeout_s, self._close)
            # REQUEST: the route bounds its own body reading (DECISION_BODY_TIMEOUT_S) and work.

        def _current_phase(self) -> str:
            if self.conn.their_state is h11.IDLE:
                return HEAD
            if self.conn.our_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED):
                return UNREAD_BODY  # answered (at once, or a 408/413) while the body arrives
            return REQUEST

        def _head_overdue(self) -> None:
            if self.transport.is_closing():
                return
            # A kept-alive connection with nothing of a next request is idle, not slow: it is
            # closed as uvicorn's keep-alive timeout closes it, without an unprompted 408.
            if self._answered and not self.conn.trailing_data[0]:
                self._close()
                return
            self.transport.write(too_slow)
            self.transport.close()

        def _close(self) -> None:
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol


def shutting_down(retry_after_s: int) -> bytes:
    return _raw_response(
        "503 Service Unavailable",
        "the server is shutting down; retry (another instance answers)",
        "shutting_down",
        retryable=True,
        retry_after_s=retry_after_s,
    )


def answer_backlog(listeners: Iterable[Any], retry_after_s: int) -> int:
    """Connections the kernel completed but the server has not accepted yet (the listen
    backlog) are reset when the listener closes, and their clients see a connection error,
    not an answer. At shutdown each is accepted now, answered a retryable 503 (with the
    server's Retry-After) and closed; how many were. `listeners`: the listening sockets
    (anything with fileno())."""
    response = shutting_down(retry_after_s)
    answered = 0
    for listener in listeners:
        # A duplicate of the descriptor, non-blocking: closing it leaves the server's own.
        with socket.socket(fileno=os.dup(listener.fileno())) as accepting:
            accepting.setblocking(False)
            while True:
                try:
                    connection, _ = accepting.accept()
                except OSError:  # BlockingIOError: the backlog is empty
                    break
                with connection:
                    _answer_and_close(connection, response)
                answered += 1
    return answered


def _answer_and_close(connection: socket.socket, response: bytes) -> None:
    connection.settimeout(0.2)  # an empty send buffer takes a few hundred bytes at once
    try:
        connection.sendall(response)
        connection.shutdown(socket.SHUT_WR)
        # What the client sent is read and dropped: closing with unread bytes would reset
        # the connection, and the client could lose the answer.
        connection.setblocking(False)
        while connection.recv(65536):
            pass
    except OSError:
        pass


def limit_accept_error_logs(loop: asyncio.AbstractEventLoop) -> None:
    """Out of descriptors, asyncio reports every failed accept(): log one line per interval."""
    default = loop.get_exception_handler()
    last = {"at": float("-inf"), "suppressed": 0}

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if "out of system resource" not in context.get("message", ""):
            if default is not None:
                default(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - last["at"] < ACCEPT_ERROR_LOG_INTERVAL_S:
            last["suppressed"] += 1
            return
        log.error(
            "accept() failed: out of file descriptors",
            extra={
                "fields": {
                    "error": str(context.get("exception")),
                    "suppressed_since_last": last["suppressed"],
                }
            },
        )
        last.update(at=now, suppressed=0)

    loop.set_exception_handler(handler)
