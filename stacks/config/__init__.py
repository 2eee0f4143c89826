"""The app's configuration: cdk.json context (and `-c key=value`) -> one validated, typed object.

Every top-level context key is one field of `AppConfig` (camelCase in cdk.json). The defaults
live here only: cdk.json holds just what a deployment overrides. Values given with `-c` arrive
as strings; object and list values may then be written as JSON.

One module per section, each importing only the ones below it:

- `base`: the section model (camelCase, frozen, no unknown key) and shared value types
- `images` (`dlc`, `decision*Image`), `builds` (`builds`, `modelDataUri`)
- `autoscaling`, `alarms`, `deployment`: what every endpoint's section holds
- `concurrency`, `chat`, `traffic`: the decision endpoints' sections
- `endpoint`: every endpoint's settings, and a measured endpoint's capacity
- `text_generation`: `textGenerationEndpoint`, the DLC's environment
- `decision_container`: the decision adapter's settings, each declared once, and the
  environment they render
- `decision_endpoints`: `decisionCpuEndpoint`, `decisionGpuEndpoint`, `decisionAsyncEndpoint`
- `app`: `AppConfig`, the top level and the rules across sections
"""

from .alarms import ALARM_PERIOD_S, Alarms, BaseAlarms, MeasuredAlarms
from .app import ENDPOINT_SUFFIXES, AppConfig
from .autoscaling import AsyncAutoscaling, Autoscaling, InstanceBounds, MeasuredAutoscaling
from .base import (
    AmiVersion,
    ContainerTimeout,
    Derivable,
    EndpointName,
    InstanceType,
    LogRetentionDays,
    S3Prefix,
    Section,
)
from .builds import Builds, ModelDataUri, release_model
from .chat import ChatLimits
from .concurrency import DEFAULT_KV_BYTES_PER_TOKEN, Concurrency
from .decision_container import DecisionContainer, Threads
from .decision_endpoints import (
    ASYNC_DEADLINE_S,
    DecisionAsyncEndpoint,
    DecisionCpuEndpoint,
    DecisionGpuEndpoint,
)
from .deployment import Deployment
from .endpoint import EndpointSettings, MeasuredEndpoint
from .images import (
    DEFAULT_DLC_CPU_DIGEST,
    DEFAULT_DLC_CUDA_DIGEST,
    DIGEST_PATTERN,
    DlcImages,
    EcrImage,
)
from .text_generation import HuggingFaceModel, TextGenerationEndpoint
from .traffic import Traffic

__all__ = [
    "ALARM_PERIOD_S",
    "ASYNC_DEADLINE_S",
    "DEFAULT_DLC_CPU_DIGEST",
    "DEFAULT_DLC_CUDA_DIGEST",
    "DEFAULT_KV_BYTES_PER_TOKEN",
    "DIGEST_PATTERN",
    "ENDPOINT_SUFFIXES",
    "Alarms",
    "AmiVersion",
    "AppConfig",
    "AsyncAutoscaling",
    "Autoscaling",
    "BaseAlarms",
    "Builds",
    "ChatLimits",
    "Concurrency",
    "ContainerTimeout",
    "DecisionAsyncEndpoint",
    "DecisionContainer",
    "DecisionCpuEndpoint",
    "DecisionGpuEndpoint",
    "Deployment",
    "Derivable",
    "DlcImages",
    "EcrImage",
    "EndpointName",
    "EndpointSettings",
    "HuggingFaceModel",
    "InstanceBounds",
    "InstanceType",
    "LogRetentionDays",
    "MeasuredAlarms",
    "MeasuredAutoscaling",
    "MeasuredEndpoint",
    "ModelDataUri",
    "S3Prefix",
    "Section",
    "TextGenerationEndpoint",
    "Threads",
    "Traffic",
    "release_model",
]
