"""An endpoint's instance count (`autoscaling`): the bounds every kind of scaling has, target
tracking on invocations for the real-time endpoints (given, or left to the measurement), and
scaling on the backlog down to zero for the asynchronous one."""

from __future__ import annotations

from typing import Generic

from pydantic import Field, model_validator

from .base import Derivable, Section


class InstanceBounds(Section):
    """The instance count's bounds: each kind of scaling sets their defaults and limits."""

    min_capacity: int = Field(description="the fewest instances")
    max_capacity: int = Field(description="the most instances, at least `minCapacity`")

    @model_validator(mode="after")
    def _ordered(self) -> InstanceBounds:
        if self.max_capacity < self.min_capacity:
            raise ValueError(
                f"maxCapacity ({self.max_capacity}) is below minCapacity ({self.min_capacity})"
            )
        return self


class _Autoscaling(InstanceBounds, Generic[Derivable]):
    """Target tracking on invocations: Autoscaling, or MeasuredAutoscaling's target left to
    the measurement."""

    min_capacity: int = Field(1, ge=1, le=100, description="the fewest instances")
    max_capacity: int = Field(
        2, ge=1, le=100, description="the most instances, at least `minCapacity`"
    )
    invocations_per_instance: Derivable
    scale_in_cooldown_seconds: int = Field(
        300, ge=0, le=3600, description="seconds after a scale-in before the next"
    )
    scale_out_cooldown_seconds: int = Field(
        60, ge=0, le=3600, description="seconds after a scale-out before the next"
    )


class Autoscaling(_Autoscaling[int]):
    invocations_per_instance: int = Field(60, ge=1, description="per minute, target tracking")


class MeasuredAutoscaling(_Autoscaling[int | None]):
    invocations_per_instance: int | None = Field(
        None, ge=1, description="per minute, target tracking; None: from measurement"
    )


class AsyncAutoscaling(InstanceBounds):
    """Scaling on the request backlog, down to zero instances when there is none."""

    min_capacity: int = Field(
        0, ge=0, le=100, description="the fewest instances (0: none while there is no backlog)"
    )
    max_capacity: int = Field(
        2, ge=1, le=100, description="the most instances, at least `minCapacity`"
    )
    # ApproximateBacklogSizePerInstance to hold (target tracking): queued requests per instance.
    backlog_per_instance: float = Field(
        5,
        gt=0,
        le=10_000,
        description="`ApproximateBacklogSizePerInstance` to hold (target tracking): queued "
        "requests per instance",
    )
    scale_in_cooldown_seconds: int = Field(
        600, ge=0, le=3600, description="seconds after a scale-in before the next"
    )
    scale_out_cooldown_seconds: int = Field(
        120, ge=0, le=3600, description="seconds after a scale-out before the next"
    )
