"""What every endpoint's section has: its name, instance count, timeouts, log retention,
`deployment`, `autoscaling` and `alarms`; and what a measured endpoint adds, its capacity left
to the committed measurement of the release's model."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import Field, model_validator

from stacks import capacity

from .alarms import ALARM_PERIOD_S, BaseAlarms, MeasuredAlarms
from .autoscaling import InstanceBounds, MeasuredAutoscaling
from .base import ContainerTimeout, EndpointName, LogRetentionDays, Section
from .deployment import Deployment


class EndpointSettings(Section):
    enabled: bool = Field(True, description="deploy this endpoint")
    endpoint_name: EndpointName = Field(
        description="the endpoint's name; not given, it follows `stackPrefix`"
    )
    initial_instance_count: int = Field(
        1, ge=1, le=100, description="instances at creation, within the autoscaling bounds"
    )
    # The endpoint's log group (/aws/sagemaker/Endpoints/<name>) expires its events after this.
    log_retention_days: LogRetentionDays = Field(
        30, description="days the endpoint's log group keeps its events"
    )
    container_startup_timeout_seconds: ContainerTimeout = Field(
        600, description="`ContainerStartupHealthCheckTimeoutInSeconds`"
    )
    model_data_download_timeout_seconds: ContainerTimeout = Field(
        600, description="`ModelDataDownloadTimeoutInSeconds`"
    )
    deployment: Deployment = Deployment()
    # Each kind of endpoint's own (a subclass's).
    autoscaling: InstanceBounds
    alarms: BaseAlarms[Any]

    @model_validator(mode="after")
    def _alarms_fire_before_the_next_step(self) -> EndpointSettings:
        deployment = self.deployment
        least = self.alarms.evaluation_periods * ALARM_PERIOD_S
        stepped = deployment.traffic_routing != "ALL_AT_ONCE"
        if deployment.auto_rollback and stepped and deployment.wait_interval_seconds < least:
            raise ValueError(
                f"deployment.waitIntervalSeconds ({deployment.wait_interval_seconds}) is shorter "
                f"than alarms.evaluationPeriods x 5 min ({least} s): traffic would move on before "
                "an alarm on the new fleet could fire and roll it back"
            )
        return self

    @model_validator(mode="after")
    def _initial_count_within_scaling(self) -> EndpointSettings:
        scaling = self.autoscaling
        if not scaling.min_capacity <= self.initial_instance_count <= scaling.max_capacity:
            raise ValueError(
                f"initialInstanceCount ({self.initial_instance_count}) must lie within "
                f"autoscaling [{scaling.min_capacity}, {scaling.max_capacity}]"
            )
        return self


class MeasuredEndpoint(EndpointSettings):
    """An endpoint whose autoscaling target and latency threshold (and what a subclass adds to
    DERIVED) default to the derivation from the committed measurement of the release's model on
    its instance type; a value given in the config wins. AppConfig fills in what is not given
    (`with_capacity`) or refuses the release. `measuring` deploys it for its first measurement
    instead: one instance, capacity.MEASURING's values where none are given."""

    # Context key (below the endpoint's section) -> field path; the last name is also the
    # derivation's attribute.
    DERIVED: ClassVar[dict[str, tuple[str, ...]]] = {
        "autoscaling.invocationsPerInstance": ("autoscaling", "invocations_per_instance"),
        "alarms.modelLatencyP90Ms": ("alarms", "model_latency_p90_ms"),
    }
    measuring: bool = Field(
        False,
        description="deploy it to be measured: one instance, the measuring capacity values "
        "where none are given",
    )
    autoscaling: MeasuredAutoscaling = MeasuredAutoscaling()
    alarms: MeasuredAlarms = MeasuredAlarms()

    def unmeasured(self) -> list[str]:
        """The context keys of the derived settings that the config leaves to measurement."""
        unset = []
        for key, path in self.DERIVED.items():
            value: Any = self
            for name in path:
                value = getattr(value, name)
            if value is None:
                unset.append(key)
        return unset

    def with_capacity(self, derived: Any, **changes: Any) -> Self:
        """These settings with what the config left open taken from `derived` (validated)."""
        data = self.model_dump()
        for path in self.DERIVED.values():
            holder = data
            for name in path[:-1]:
                holder = holder[name]
            if holder[path[-1]] is None:
                holder[path[-1]] = getattr(derived, path[-1])
        for section, values in changes.items():
            data[section] = {**data[section], **values} if isinstance(values, dict) else values
        return self.model_validate(data)

    def for_measuring(self) -> Self:
        """Deployed to be measured: one instance, the measuring values where none are given."""
        one = {"min_capacity": 1, "max_capacity": 1}
        return self.with_capacity(capacity.MEASURING, initial_instance_count=1, autoscaling=one)

    @property
    def model_source(self) -> str:
        """Where the model a measurement is filed under comes from (for a refusal)."""
        return "the spec modelDataUri names, else builds.modelSpec"

    def measured_capacity(self, model: str) -> Any:
        """The derivation from the committed measurement (capacity.MissingMeasurement)."""
        raise NotImplementedError

    def placeholder_capacity(self) -> Any:
        """What a removal synthesizes with (any valid values: nothing is deployed)."""
        raise NotImplementedError
