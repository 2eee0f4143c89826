"""Structured JSON logs: one line per request, plus start-up and shutdown events."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import uuid

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import metrics

log = logging.getLogger("decision_adapter")


# A log line is one CloudWatch event (at most 256 KB, or it and its EMF metrics are lost); a field
# a client can fill (an identifier, a name) is cut to this many characters, and says so.
MAX_FIELD_CHARS = 1024


def _capped(value: object) -> object:
    if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
        return f"{value[:MAX_FIELD_CHARS]}... ({len(value)} characters)"
    return value


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: _capped(v) for k, v in getattr(record, "fields", {}).items()})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # replaced by RequestLog


# A caller's own request id (a proxy's or a tracer's) is kept, so its logs and ours join up;
# anything but a short token of visible characters gets a fresh id instead of reaching the log.
CALLER_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")


def request_id_of(scope: Scope) -> str:
    """The caller's X-Request-Id when it is such a token, else a new one."""
    caller = Headers(scope=scope).get("x-request-id", "")
    return caller if CALLER_REQUEST_ID.fullmatch(caller) else uuid.uuid4().hex


class RequestLog:
    """ASGI middleware: assigns a request id (or keeps the caller's) and logs one line when the
    response is done.

    Routes may add fields (timings, counts) to `scope["state"]["log_fields"]`. A request that
    reached admission also carries its EMF metrics (metrics.py), under `endpoint`'s name.
    """

    def __init__(self, app: ASGIApp, endpoint: str = "local") -> None:
        self.app = app
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        scope["state"]["log_fields"] = {}
        status = {"code": 500}
        started = time.perf_counter()
        outcome = metrics.start_request()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            duration_ms = (time.perf_counter() - started) * 1000
            fields = {
                "request_id": request_id,
                "method": scope["method"],
                "path": scope["path"],
                "status": status["code"],
                "duration_ms": round(duration_ms, 3),
                **scope["state"]["log_fields"],
            }
            kind = scope["state"]["log_fields"].get("kind")
            fields.update(
                metrics.emf_fields(self.endpoint, outcome, kind=kind, latency_ms=duration_ms)
            )
            # SageMaker pings every few seconds; healthy pings only at DEBUG.
            quiet = scope["path"] == "/ping" and status["code"] == 200
            log.log(logging.DEBUG if quiet else logging.INFO, "request", extra={"fields": fields})
