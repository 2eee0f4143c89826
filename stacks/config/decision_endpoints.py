"""The decision endpoints: real-time on one CPU type (`decisionCpuEndpoint`) or on a pool of
GPU types (`decisionGpuEndpoint`), their capacity measured; and asynchronous on the CPU image
(`decisionAsyncEndpoint`). Each is a DecisionContainer, which renders its environment."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from stacks import capacity
from stacks.gpu_instances import (
    COMPUTE_CAPABILITY,
    cuda_architectures,
    is_gpu_instance,
    unknown_gpu_types,
)

from .alarms import Alarms
from .autoscaling import AsyncAutoscaling
from .base import AmiVersion, EndpointName, InstanceType, S3Prefix
from .chat import ChatLimits
from .decision_container import DecisionContainer, Threads
from .endpoint import MeasuredEndpoint
from .traffic import Traffic


class _MeasuredDecisionEndpoint(MeasuredEndpoint, DecisionContainer):
    """A decision endpoint: its admission queue and wait derive from the measurement too
    (stacks/capacity.py)."""

    DERIVED: ClassVar[dict[str, tuple[str, ...]]] = {
        "maxQueue": ("max_queue",),
        "admissionWaitS": ("admission_wait_s",),
        **MeasuredEndpoint.DERIVED,
    }
    max_queue: int | None = Field(
        None, ge=0, le=1024, description="`DECISION_MAX_QUEUE`; unset: derived from the measurement"
    )
    chat: ChatLimits = ChatLimits()
    traffic: Traffic = Traffic()
    admission_wait_s: float | None = Field(
        None,
        ge=0.0,
        le=60.0,
        description="`DECISION_ADMISSION_WAIT_S`; unset: derived from the measurement",
    )

    @property
    def instance_types(self) -> list[str]:
        """The types its measurement is looked up for (the subclass's type, or its pool's)."""
        raise NotImplementedError

    @property
    def memory_types(self) -> list[str]:
        return self.instance_types

    def measured_capacity(self, model: str) -> capacity.Capacity:
        expected = capacity.Traffic(
            input_tokens=self.traffic.input_tokens,
            chat_share=self.traffic.chat_share,
            decisions_at_once=self.concurrency.max_scoring_requests,
        )
        return capacity.for_release(
            model,
            self.instance_types,
            concurrency=self.concurrency.measured_settings(),
            traffic=expected,
        )

    def placeholder_capacity(self) -> capacity.Capacity:
        return capacity.derive(capacity.DESTROY_PLACEHOLDER)

    def environment(self) -> dict[str, str]:
        """The adapter's variables, with its admission queue and wait, and chat's caps: chat
        holds the model a decision would have (long chat belongs on text generation)."""
        wait_s = self.admission_wait_s
        assert wait_s is not None  # AppConfig fills it in from measurement, or refuses
        return {
            **super().environment(),
            "DECISION_MAX_QUEUE": str(self.max_queue),
            "DECISION_ADMISSION_WAIT_S": str(wait_s),
            **self.chat.environment(wait_s),
        }


class DecisionCpuEndpoint(_MeasuredDecisionEndpoint):
    """The decision endpoint on one fixed CPU instance type."""

    endpoint_name: EndpointName = Field(
        "decision-models-decision-cpu",
        description="the endpoint's name; not given, it follows `stackPrefix`",
    )
    instance_type: InstanceType = Field("ml.c6i.2xlarge", description="a CPU instance type")
    # Batch transform jobs on this endpoint's model (`python -m ops batch`) read
    # <prefix>/<job>/input/ and write <prefix>/<job>/output/ of the artifact bucket with its
    # role; None: no such rights.
    batch_prefix: S3Prefix | None = Field(
        "batch",
        description="batch transform jobs (`ops batch`) read `<prefix>/<job>/input/` and write "
        "`<prefix>/<job>/output/` of the artifact bucket; unset: no such rights",
    )

    @property
    def instance_types(self) -> list[str]:
        return [self.instance_type]

    @model_validator(mode="after")
    def _cpu_instance(self) -> DecisionCpuEndpoint:
        if is_gpu_instance(self.instance_type):
            raise ValueError(f"{self.instance_type!r} is a GPU type; use decisionGpuEndpoint")
        return self


class DecisionGpuEndpoint(_MeasuredDecisionEndpoint):
    """The decision endpoint on an ordered pool of GPU types (first available wins). Off by
    default: a new account has no endpoint quota for most GPU types, and a quota refusal is
    no capacity shortage a pool falls back from, so it fails (and rolls back) the deploy."""

    enabled: bool = Field(
        False,
        description="deploy this endpoint (off: a new account has no endpoint quota for most GPU "
        "types)",
    )
    endpoint_name: EndpointName = Field(
        "decision-models-decision-gpu",
        description="the endpoint's name; not given, it follows `stackPrefix`",
    )
    instance_pool: list[InstanceType] = Field(
        default_factory=lambda: [
            "ml.g6e.xlarge",
            "ml.g6.2xlarge",
            "ml.g5.2xlarge",
            "ml.g4dn.2xlarge",
        ],
        min_length=1,
        max_length=5,
        description="GPU instance types in order of preference, the first available wins; the "
        "image is compiled for their GPUs",
    )
    # VariantInstanceProvisionTimeoutInSeconds: 300..3600.
    provision_timeout_seconds: int = Field(
        900, ge=300, le=3600, description="`VariantInstanceProvisionTimeoutInSeconds`"
    )
    # The CUDA DLC needs a driver for CUDA 13 (580+); only the AL2023 GPU 4.x AMI has one.
    inference_ami_version: AmiVersion = Field(
        "al2023-ami-sagemaker-inference-gpu-4-1",
        description="the inference AMI; its driver must run the CUDA DLC's version (checked at "
        "synthesis)",
    )
    n_threads: Threads = 4  # the GPU runs the model; an xlarge has 4 vCPUs
    n_gpu_layers: int = Field(-1, ge=-1, description="-1 offloads every layer")

    @property
    def instance_types(self) -> list[str]:
        return list(self.instance_pool)

    @model_validator(mode="after")
    def _gpu_pool(self) -> DecisionGpuEndpoint:
        duplicates = sorted({t for t in self.instance_pool if self.instance_pool.count(t) > 1})
        if duplicates:
            raise ValueError(f"instancePool lists {', '.join(duplicates)} more than once")
        not_gpu = [t for t in self.instance_pool if not is_gpu_instance(t)]
        if not_gpu:
            raise ValueError(f"instancePool holds non-GPU types: {', '.join(not_gpu)}")
        # The image is compiled for the pool's GPUs only, so each type's GPU must be known.
        unknown = unknown_gpu_types(self.instance_pool)
        if unknown:
            raise ValueError(
                f"instancePool holds types whose GPU architecture is not known: "
                f"{', '.join(unknown)}; known families (stacks/gpu_instances.py): "
                f"{', '.join(COMPUTE_CAPABILITY)}"
            )
        return self

    @property
    def offloaded_layers(self) -> int:
        return self.n_gpu_layers

    @property
    def cuda_architectures(self) -> str:
        """What the GPU image compiles llama.cpp's CUDA kernels for, e.g. `75;86;89`."""
        return cuda_architectures(self.instance_pool)


# `ops submit`'s InvocationTimeoutSeconds (SageMaker's most), less a minute for the answer's
# upload to S3.
ASYNC_DEADLINE_S = 3540


class DecisionAsyncEndpoint(DecisionContainer):
    """An asynchronous decision endpoint on the CPU decision image: requests and answers in the
    artifact bucket (the model archive's) under their own prefixes, SNS notifications, and
    scaling on the backlog down to zero. Off by default."""

    enabled: bool = Field(False, description="deploy this endpoint")
    endpoint_name: EndpointName = Field(
        "decision-models-decision-async",
        description="the endpoint's name; not given, it follows `stackPrefix`",
    )
    instance_type: InstanceType = Field("ml.c6i.2xlarge", description="a CPU instance type")
    input_prefix: S3Prefix = Field(
        "async/input",
        description="the artifact bucket's prefix of requests; no prefix may lie within another",
    )
    output_prefix: S3Prefix = Field(
        "async/output", description="the artifact bucket's prefix of answers"
    )
    failure_prefix: S3Prefix = Field(
        "async/failure", description="the artifact bucket's prefix of failures"
    )
    autoscaling: AsyncAutoscaling = AsyncAutoscaling()

    @property
    def memory_types(self) -> list[str]:
        return [self.instance_type]

    # How long the adapter works on one request here (its scoring, JSON Lines and chat
    # deadlines): inside the hour `ops submit` asks SageMaker for (InvocationTimeoutSeconds
    # 3600), so the request ends with the adapter's own retryable error, not SageMaker's cut.
    request_deadline_s: int = Field(
        ASYNC_DEADLINE_S,
        ge=1,
        le=3600,
        description="how long the adapter works on one request (its scoring, JSON Lines and chat "
        "deadlines), inside the hour `ops submit` asks SageMaker for",
    )
    # Its own alarm: a p90 near the deadline means requests are failing on time, whereas the
    # real-time endpoints' 10 s would sit in ALARM for every long request.
    alarms: Alarms = Alarms(model_latency_p90_ms=ASYNC_DEADLINE_S * 1000)

    def environment(self) -> dict[str, str]:
        """The adapter's variables, its deadlines all the request deadline."""
        deadlines = (
            "DECISION_SCORING_DEADLINE_S",
            "DECISION_JSONLINES_TIMEOUT_S",
            "DECISION_CHAT_DEADLINE_S",
        )
        return {
            **super().environment(),
            **{variable: str(self.request_deadline_s) for variable in deadlines},
        }

    @model_validator(mode="after")
    def _cpu_instance_and_separate_prefixes(self) -> DecisionAsyncEndpoint:
        if is_gpu_instance(self.instance_type):
            raise ValueError(
                f"{self.instance_type!r} is a GPU type; the asynchronous endpoint runs the CPU "
                "decision image"
            )
        prefixes = {
            "inputPrefix": self.input_prefix,
            "outputPrefix": self.output_prefix,
            "failurePrefix": self.failure_prefix,
        }
        for key, prefix in prefixes.items():
            for other_key, other in prefixes.items():
                if key != other_key and (prefix + "/").startswith(other + "/"):
                    raise ValueError(
                        f"{key} ({prefix!r}) lies within {other_key} ({other!r}): the role's "
                        "read and write rights would overlap"
                    )
        return self
