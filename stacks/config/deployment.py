"""How a release replaces an endpoint's instances (`deployment`): blue/green in steps."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Section


class Deployment(Section):
    """How a release replaces an endpoint's instances: blue/green, the traffic shifted to the new
    fleet in steps (`CANARY`: one step, then the rest; `LINEAR`: equal steps), rolled back when
    the endpoint's 5XX or latency alarm fires while it shifts or bakes."""

    traffic_routing: Literal["ALL_AT_ONCE", "CANARY", "LINEAR"] = Field(
        "CANARY",
        description="`TrafficRoutingConfiguration.Type`: how traffic moves to the new fleet",
    )
    step_percent: int = Field(
        10,
        ge=1,
        le=99,
        description="the canary's or each linear step's share of the new fleet's capacity "
        "(`CAPACITY_PERCENT`)",
    )
    wait_interval_seconds: int = Field(
        600,
        ge=0,
        le=3600,
        description="`WaitIntervalInSeconds`: between steps, at least the alarms' "
        "`evaluationPeriods` x 5 min so an alarm can fire before the next step",
    )
    termination_wait_seconds: int = Field(
        600,
        ge=0,
        le=3600,
        description="`TerminationWaitInSeconds`: the old fleet is kept this long after the "
        "shift, and a fired alarm still rolls back to it",
    )
    auto_rollback: bool = Field(
        True,
        description="roll back when the endpoint's 5XX or latency alarm fires "
        "(`AutoRollbackConfiguration`)",
    )
