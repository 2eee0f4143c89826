"""The adapter's own metrics, written into its JSON log lines in CloudWatch's embedded metric
format (EMF): CloudWatch Logs turns each record into metric data points, no agent or API call.

THE NAMES ARE A CONTRACT with the endpoint's alarms: namespace `DecisionAdapter`, dimension
`Endpoint` on every metric and `Kind` also on the latency; `Overloaded` and `Admitted` (Count),
`QueueWaitMs` and `DecisionLatencyMs` (Milliseconds). One record per request that reached
admission, merged into the request's log line.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("decision_adapter")

NAMESPACE = "DecisionAdapter"
KINDS = ("decision", "decisions", "systemone", "chat")


@dataclass
class AdmissionOutcome:
    """What admission did with one request: filled in by the admission, read by the log."""

    admitted: bool = False
    overloaded: int = 0  # 503s for backpressure: 0 or 1 for a request, a count for refusals
    queue_wait_ms: float = 0.0


# Set by the request log for each request (its own task), so admission can report to it
# without the service knowing about HTTP.
_current: contextvars.ContextVar[AdmissionOutcome | None] = contextvars.ContextVar(
    "admission_outcome", default=None
)


def start_request() -> AdmissionOutcome:
    outcome = AdmissionOutcome()
    _current.set(outcome)
    return outcome


def record_admitted(queue_wait_ms: float) -> None:
    if (outcome := _current.get()) is not None:
        outcome.admitted, outcome.queue_wait_ms = True, queue_wait_ms


def record_overloaded() -> None:
    if (outcome := _current.get()) is not None:
        outcome.overloaded = 1


def emf_fields(
    endpoint: str,
    outcome: AdmissionOutcome,
    *,
    kind: str | None,
    latency_ms: float,
    now_ms: int | None = None,
) -> dict[str, Any]:
    """The EMF members to merge into a request's log line; empty when the request never
    reached admission (pings, bad requests), which count for nothing here."""
    if not (outcome.admitted or outcome.overloaded):
        return {}
    fields: dict[str, Any] = {
        "Endpoint": endpoint,
        "Overloaded": outcome.overloaded,
        "Admitted": int(outcome.admitted),
    }
    metrics = [
        {"Name": "Overloaded", "Unit": "Count"},
        {"Name": "Admitted", "Unit": "Count"},
    ]
    directives = [{"Namespace": NAMESPACE, "Dimensions": [["Endpoint"]], "Metrics": metrics}]
    if outcome.admitted:
        fields["QueueWaitMs"] = round(outcome.queue_wait_ms, 3)
        metrics.append({"Name": "QueueWaitMs", "Unit": "Milliseconds"})
        if kind in KINDS:
            fields["Kind"] = kind
            fields["DecisionLatencyMs"] = round(latency_ms, 3)
            directives.append(
                {
                    "Namespace": NAMESPACE,
                    "Dimensions": [["Endpoint", "Kind"]],
                    "Metrics": [{"Name": "DecisionLatencyMs", "Unit": "Milliseconds"}],
                }
            )
    timestamp = now_ms if now_ms is not None else int(time.time() * 1000)
    return {"_aws": {"Timestamp": timestamp, "CloudWatchMetrics": directives}, **fields}


class ConnectionRefusals:
    """Connections refused at the connection cap (a 503 before any request is read) count as
    `Overloaded` too: one log line with their EMF record per second at most, however many."""

    def __init__(self, endpoint: str, interval_s: float = 1.0) -> None:
        self.endpoint, self.interval_s = endpoint, interval_s
        self.pending = 0

    def refused(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.pending == 0:
            loop.call_later(self.interval_s, self._flush)
        self.pending += 1

    def _flush(self) -> None:
        count, self.pending = self.pending, 0
        record = emf_fields(
            self.endpoint, AdmissionOutcome(overloaded=count), kind=None, latency_ms=0
        )
        log.warning("connections refused", extra={"fields": {"refused": count, **record}})
