"""An endpoint's alarms (`alarms`): their thresholds, the latency one given or left to the
measurement, and the topic they notify."""

from __future__ import annotations

from typing import Generic

from pydantic import Field

from .base import Derivable, Section


class BaseAlarms(Section, Generic[Derivable]):
    """An endpoint's alarms: Alarms, or MeasuredAlarms' latency left to the measurement."""

    server_errors_per_5_minutes: int = Field(
        1, ge=1, description="Invocation5XXErrors alarm threshold (less backpressure 503s)"
    )
    # Decision endpoints: share of requests refused for backpressure (503) that alarms.
    overloaded_percent: float = Field(
        5.0,
        gt=0,
        le=100,
        description="decision endpoints: the share of requests refused for backpressure (503) "
        "that alarms",
    )
    model_latency_p90_ms: Derivable
    evaluation_periods: int = Field(
        2, ge=1, le=100, description="5-minute periods an alarm's condition must hold"
    )
    topic_arn: str | None = Field(
        None,
        pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$",
        description="an SNS topic the alarms notify; unset: none",
    )


class Alarms(BaseAlarms[int]):
    model_latency_p90_ms: int = Field(
        10_000, ge=1, le=3_600_000, description="the `ModelLatency` p90 that alarms"
    )


# A 5-minute alarm period (stacks/constructs/endpoint.py), in seconds.
ALARM_PERIOD_S = 300


class MeasuredAlarms(BaseAlarms[int | None]):
    model_latency_p90_ms: int | None = Field(
        None,
        ge=1,
        le=3_600_000,
        description="the `ModelLatency` p90 that alarms; unset: derived from the measurement",
    )
