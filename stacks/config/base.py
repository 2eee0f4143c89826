"""What every section of the configuration is built of: the section model itself (camelCase
keys, frozen, no unknown key) and the value types more than one section checks."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

_INSTANCE_TYPE = re.compile(r"^ml\.[a-z0-9-]+\.[a-z0-9]+$")
ENDPOINT_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


def matches(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return check


InstanceType = Annotated[
    str, AfterValidator(matches(_INSTANCE_TYPE, "a SageMaker instance type (ml.<family>.<size>)"))
]
EndpointName = Annotated[
    str,
    AfterValidator(matches(ENDPOINT_NAME, "a SageMaker endpoint name (1-63 of [a-zA-Z0-9-])")),
]
# Both ContainerStartupHealthCheckTimeoutInSeconds and ModelDataDownloadTimeoutInSeconds.
ContainerTimeout = Annotated[int, Field(ge=60, le=3600)]
AmiVersion = Annotated[str, Field(pattern=r"^al2[a-z0-9-]*-ami-sagemaker-inference-gpu-[0-9-]+$")]
S3Prefix = Annotated[str, Field(pattern=r"^[a-zA-Z0-9!_.*'()-]+(/[a-zA-Z0-9!_.*'()-]+)*$")]
LogRetentionDays = Literal[7, 14, 30, 60, 90, 180, 365]

# A setting a measured endpoint may leave to its measurement: `int` where it may not, `int | None`
# where it may (None: derived from the measurement).
Derivable = TypeVar("Derivable", int, int | None)


class Section(BaseModel):
    """One object of the context: its keys camelCase, its values frozen, an unknown key refused."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )
