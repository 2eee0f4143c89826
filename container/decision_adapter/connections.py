"""Limits on connections that uvicorn leaves open-ended.

uvicorn times out idle keep-alive connections, but not one that sends half a request head, and
it accepts connections until the process runs out of file descriptors (asyncio then logs every
failed accept()). So: each request head must arrive within a deadline (else 408 and close), open
connections are capped below the descriptor limit (the next one gets a 503 and is closed at
once), and the event loop logs running out of descriptors at most once per interval.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import resource
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .metrics import ConnectionRefusals

log = logging.getLogger("decision_adapter")

# Descriptors kept free for everything that is not a client: the model file, logs, the
# listening socket, what libraries open.
RESERVED_DESCRIPTORS = 64
ACCEPT_ERROR_LOG_INTERVAL_S = 10.0


def _raw_response(
    status: str, message: str, error_type: str, *, retryable: bool, retry_after_s: int | None = None
) -> bytes:
    """A whole response written before (or instead of) h11: the connection closes after it.
    A Retry-After is also in the body, where clients behind SageMaker can read it."""
    fields: dict = {"error": message, "error_type": error_type, "retryable": retryable}
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
        try:
            self._malloc_trim = ctypes.CDLL(None).malloc_trim
        except AttributeError:  # not glibc: nothing to do
            self._malloc_trim = None
        self._delay_s = delay_s
        self._scheduled = False

    def soon(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._malloc_trim is not None and not self._scheduled:
            self._scheduled = True
            loop.call_later(self._delay_s, self._trim)

    def _trim(self) -> None:
        self._scheduled = False
        self._malloc_trim(0)


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
    retry_after_s: int,
    metrics_endpoint: str = "local",
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a request-head deadline and a connection cap."""
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
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= max_connections:
                self._refused = True
                transport.write(refusal)
                transport.close()
                refusals.refused(self.loop)
                return
            super().connection_made(transport)
            self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            if not self._refused:
                super().connection_lost(exc)
                trimmer.soon(self.loop)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_head_deadline()  # the next request on this connection gets its own

        def _arm_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            self._head_deadline = self.loop.call_later(header_timeout_s, self._head_overdue)

        def _head_overdue(self) -> None:
            # IDLE on the client's side: no complete request head since the deadline was set.
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.write(too_slow)
                self.transport.close()

    return GuardedH11Protocol


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
