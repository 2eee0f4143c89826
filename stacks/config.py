"""The app's configuration: cdk.json context (and `-c key=value`) -> one validated, typed object.

Every top-level context key below is one field of `AppConfig` (camelCase in cdk.json). The
defaults live here only: cdk.json holds just what a deployment overrides. Values given with
`-c` arrive as strings; object and list values may then be written as JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Generic, Literal, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from model_packaging.catalog import BUILTIN_SPECS, load_spec
from model_packaging.errors import SpecError
from stacks import capacity, text_generation_capacity
from stacks.dlc_registry import DLC_ACCOUNTS, UnsupportedRegion
from stacks.gpu_instances import COMPUTE_CAPABILITY, cuda_architectures, unknown_gpu_types
from stacks.inference_amis import check_ami_runs_cuda
from stacks.kv_memory import check_fits

DIGEST_PATTERN = r"sha256:[0-9a-f]{64}"
_DIGEST = re.compile(rf"^{DIGEST_PATTERN}$")
# A private ECR image pinned by digest: what the image build prints and SageMaker can pull.
_ECR_IMAGE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z]{2}(-[a-z]+)+-\d)\.amazonaws\.com(\.cn)?"
    rf"/(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)@(?P<digest>{DIGEST_PATTERN})$"
)
_MODEL_DATA = re.compile(
    r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<key>[^\s]*[^/\s]\.tar\.gz)$"
)
_INSTANCE_TYPE = re.compile(r"^ml\.[a-z0-9-]+\.[a-z0-9]+$")
_ENDPOINT_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_LLAMA_FLAG = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_GPU_FAMILIES = ("ml.g", "ml.p")

DEFAULT_DLC_CPU_DIGEST = "sha256:1f19c220f5f169228f20cdddca00f4838be22a3a1ce9002bc444006adc3d6d43"
DEFAULT_DLC_CUDA_DIGEST = "sha256:9f2eb2d9cbdc3172c2046117c4a43401bc95dbabdc3e2aeaa35daa11565c8b36"


def _not_pinned(reference: str, *, repository: str, tag: str, registry: str = "") -> str:
    registry_id = f"--registry-id {registry} " if registry else ""
    return (
        f"{reference!r} is not pinned by digest (sha256:<64 hex>); tags move, digests do not. "
        f"Get the digest with `aws ecr describe-images {registry_id}--repository-name {repository} "
        f"--image-ids imageTag={tag} --query 'imageDetails[0].imageDigest' --output text`"
    )


def _ecr_image(value: str) -> str:
    if "@" not in value:
        path, _, tag = value.partition("/")[2].partition(":")
        raise ValueError(
            _not_pinned(value, repository=path or "REPOSITORY", tag=tag or "TAG")
            + ", or use the URI that `python -m ops build cpu-image|gpu-image` prints"
        )
    if not _ECR_IMAGE.match(value):
        raise ValueError(
            f"{value!r} is not a private ECR image pinned by digest "
            "(<account>.dkr.ecr.<region>.amazonaws.com/<repository>@sha256:<64 hex>)"
        )
    return value


def _model_data(value: str) -> str:
    if not _MODEL_DATA.match(value):
        raise ValueError(
            f"{value!r} is not a model archive URI: expected s3://<bucket>/<key>.tar.gz "
            "(the URI that `python -m ops build model` prints)"
        )
    return value


def _matches(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return check


EcrImage = Annotated[str, AfterValidator(_ecr_image)]
ModelDataUri = Annotated[str, AfterValidator(_model_data)]
InstanceType = Annotated[
    str, AfterValidator(_matches(_INSTANCE_TYPE, "a SageMaker instance type (ml.<family>.<size>)"))
]
EndpointName = Annotated[
    str,
    AfterValidator(_matches(_ENDPOINT_NAME, "a SageMaker endpoint name (1-63 of [a-zA-Z0-9-])")),
]
# Both ContainerStartupHealthCheckTimeoutInSeconds and ModelDataDownloadTimeoutInSeconds.
ContainerTimeout = Annotated[int, Field(ge=60, le=3600)]
AmiVersion = Annotated[str, Field(pattern=r"^al2[a-z0-9-]*-ami-sagemaker-inference-gpu-[0-9-]+$")]
S3Prefix = Annotated[str, Field(pattern=r"^[a-zA-Z0-9!_.*'()-]+(/[a-zA-Z0-9!_.*'()-]+)*$")]


class _Config(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class DlcImages(_Config):
    """The llama.cpp Deep Learning Container images, pulled from the regional DLC registry."""

    repository: str = Field(
        "llama-cpp",
        pattern=r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*$",
        description="the DLC's repository in the regional DLC registry",
    )
    cpu_digest: str = Field(
        DEFAULT_DLC_CPU_DIGEST,
        description="the CPU DLC image (`server-sagemaker-cpu-v1`), pinned by digest",
    )  # llama-cpp:server-sagemaker-cpu-v1
    cuda_digest: str = Field(
        DEFAULT_DLC_CUDA_DIGEST,
        description="the CUDA DLC image (`server-sagemaker-cuda-v1`), pinned by digest",
    )  # llama-cpp:server-sagemaker-cuda-v1
    # The CUDA major version of the image at cuda_digest (FROM nvidia/cuda:13.0.2-runtime):
    # GPU endpoints need an inference AMI whose driver runs it. Refresh with the digest.
    cuda_major_version: int = Field(
        13,
        ge=11,
        description="the CUDA major version of the image at `cudaDigest`: GPU endpoints need an "
        "inference AMI whose driver runs it; refresh with the digest",
    )

    @field_validator("cpu_digest", "cuda_digest")
    @classmethod
    def _pinned(cls, value: str, info: ValidationInfo) -> str:
        if not _DIGEST.match(value):
            flavour = "cpu" if info.field_name == "cpu_digest" else "cuda"
            tag = value.rpartition(":")[2] if ":" in value else f"server-sagemaker-{flavour}-v1"
            raise ValueError(
                _not_pinned(
                    value,
                    repository=info.data.get("repository", "llama-cpp"),
                    tag=tag,
                    registry="<DLC account of the region, 763104351884 in most>",
                )
            )
        return value


class Builds(_Config):
    """The CodeBuild projects of the stateful stack."""

    model_spec: str = Field(
        "qwen3.5-4b-q4_k_m",
        min_length=1,
        description="the model the model build packages: a built-in spec's name or a spec file in"
        " the repository",
    )
    artifact_prefix: str = Field(
        "models",
        pattern=r"^[a-zA-Z0-9!_.*'()-]+(/[a-zA-Z0-9!_.*'()-]+)*$",
        description="the artifact bucket's prefix for model archives",
    )
    # CodeBuild accepts 5..2160 minutes. CI's build job (6 hours at most) waits for the model
    # build beside the two image builds in series: both sums fit (tests/deploy/test_ci_workflow.py).
    timeout_minutes: int = Field(
        60,
        ge=5,
        le=2160,
        description="the model and CPU image projects' timeout (the CPU image compiles in minutes;"
        " raise it for a model of many GB)",
    )
    # The CUDA compile's documented worst case is 3 hours; the CPU variants the GPU image also
    # compiles add minutes (docs/deploy.md, "What each step does"); a third more is the margin.
    gpu_image_timeout_minutes: int = Field(
        240,
        ge=5,
        le=2160,
        description="the GPU image project's timeout (the CUDA compile's worst case, 3 hours, and"
        " a margin)",
    )
    log_retention_days: LogRetentionDays = Field(30, description="days the build logs are kept")
    # What the GPU image compiles llama.cpp's CUDA kernels for (CMake's list): the compute
    # capabilities of the default GPU pool (stacks/gpu_instances.py). A pool type whose GPU is
    # not in it is refused at synthesis; a pool narrowed to one type (to measure it) leaves it.
    cuda_architectures: str = Field(
        "75;86;89",
        pattern=r"^[0-9]{2,3}(;[0-9]{2,3})*$",
        description="CUDA compute capabilities the GPU image is compiled for (CMake's list); a "
        "GPU pool type outside it is refused at synthesis",
    )

    @property
    def model(self) -> str:
        """The model the build packages as its manifest names it (`spec`): a built-in spec's
        name, or the `name` inside a spec file of the repository."""
        spec_file = capacity.ROOT / self.model_spec
        if self.model_spec in BUILTIN_SPECS or not spec_file.is_file():
            return self.model_spec
        try:
            return load_spec(str(spec_file)).name
        except SpecError as error:
            raise ValueError(f"builds.modelSpec: {error}") from None


class _Capacity(_Config):
    """The instance count's bounds: each kind of scaling sets their defaults and limits."""

    min_capacity: int = Field(description="the fewest instances")
    max_capacity: int = Field(description="the most instances, at least `minCapacity`")

    @model_validator(mode="after")
    def _ordered(self) -> _Capacity:
        if self.max_capacity < self.min_capacity:
            raise ValueError(
                f"maxCapacity ({self.max_capacity}) is below minCapacity ({self.min_capacity})"
            )
        return self


# A setting a measured endpoint may leave to its measurement: `int` where it may not, `int | None`
# where it may (None: derived from the measurement).
Derivable = TypeVar("Derivable", int, int | None)


class _Autoscaling(_Capacity, Generic[Derivable]):
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


class _Alarms(_Config, Generic[Derivable]):
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


class Alarms(_Alarms[int]):
    model_latency_p90_ms: int = Field(
        10_000, ge=1, le=3_600_000, description="the `ModelLatency` p90 that alarms"
    )


LogRetentionDays = Literal[7, 14, 30, 60, 90, 180, 365]


# A 5-minute alarm period (stacks/constructs/endpoint.py), in seconds.
ALARM_PERIOD_S = 300


class Deployment(_Config):
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


class EndpointSettings(_Config):
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
    autoscaling: _Capacity
    alarms: _Alarms[Any]

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


def _gguf_in_repository(value: str) -> str:
    parts = value.split("/")
    if not value.endswith(".gguf") or any(p in ("", ".", "..") or p.strip() != p for p in parts):
        raise ValueError(
            f"{value!r} is not a GGUF file path within the repository "
            "(e.g. Qwen3.5-4B-Q4_K_M.gguf; relative, ending in .gguf)"
        )
    return value


class HuggingFaceModel(_Config):
    """A GGUF the DLC downloads from the Hugging Face Hub at start (llama-server's --hf-repo
    and --hf-file): the endpoint then needs internet egress, and the pinned image digest no
    longer pins the weights."""

    repo: Annotated[
        str,
        AfterValidator(_matches(_HF_REPO, "a Hugging Face repository id (owner/name)")),
    ] = Field(description="a Hugging Face repository id (owner/name)")
    file: Annotated[str, AfterValidator(_gguf_in_repository)] = Field(
        description="the GGUF's path within the repository"
    )


class MeasuredAutoscaling(_Autoscaling[int | None]):
    invocations_per_instance: int | None = Field(
        None, ge=1, description="per minute, target tracking; None: from measurement"
    )


class MeasuredAlarms(_Alarms[int | None]):
    model_latency_p90_ms: int | None = Field(
        None,
        ge=1,
        le=3_600_000,
        description="the `ModelLatency` p90 that alarms; unset: derived from the measurement",
    )


class _MeasuredEndpoint(EndpointSettings):
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


# llama-server flags the configuration sets itself; in llamaServerArgs they would fight it.
_MODEL_FLAGS = ("model", "model-dir", "hf-repo", "hf-file", "model-url", "alias")


def _flag_value(value: str | int | bool) -> str:
    """A llama-server flag's value as the DLC reads it from SM_LLAMA_CPP_<FLAG> (true: bare)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _llama_server_defaults() -> dict[str, str | int | bool]:
    return {"ctx-size": 8192, "threads": 8, "parallel": 2, "n-predict": 256}


class TextGenerationEndpoint(_MeasuredEndpoint):
    """The standard llama.cpp endpoint: the DLC image as published, chat completions. Its
    autoscaling target and latency threshold derive from the measurement of the release's
    model on its instance type at its llama-server flags (stacks/text_generation_capacity.py)."""

    endpoint_name: EndpointName = Field(
        "decision-models-text-generation",
        description="the endpoint's name; not given, it follows `stackPrefix`",
    )
    instance_type: InstanceType = Field(
        "ml.c6i.2xlarge", description="the instance type (`ml.g*`/`ml.p*` with the `cuda` image)"
    )
    image: Literal["cpu", "cuda"] = Field(
        "cpu", description="the DLC image: `cuda` on GPU types, `cpu` elsewhere"
    )
    # llama-server flags; the DLC turns each into SM_LLAMA_CPP_<FLAG> (true: bare flag).
    # n-predict: the most tokens one completion generates, which the capacity is measured at;
    # 256 keeps one 4B completion on ml.c6i.2xlarge inside InvokeEndpoint's 60 s.
    llama_server_args: dict[str, str | int | bool] = Field(
        default_factory=_llama_server_defaults,
        description="llama-server flags (name to value; `true`: the bare flag); the DLC turns "
        "each into `SM_LLAMA_CPP_<FLAG>`; not the model flags; `n-predict` caps an answer's "
        "tokens and is what the endpoint is measured at",
    )
    # Only applied to the cuda image: its driver must run the image's CUDA (checked at synth).
    inference_ami_version: AmiVersion = Field(
        "al2023-ami-sagemaker-inference-gpu-4-1",
        description="the inference AMI on the `cuda` image; its driver must run the image's CUDA "
        "(checked at synthesis)",
    )
    # Instead of the release's model archive: the DLC downloads this GGUF at start.
    hugging_face: HuggingFaceModel | None = Field(
        None,
        description="a GGUF the DLC downloads at start instead of the release's archive: the "
        "endpoint then needs internet egress",
    )

    @model_validator(mode="after")
    def _image_fits_instance(self) -> TextGenerationEndpoint:
        for flag in self.llama_server_args:
            if not _LLAMA_FLAG.match(flag):
                raise ValueError(f"{flag!r} is not a llama-server flag name such as 'ctx-size'")
            if flag in _MODEL_FLAGS:
                raise ValueError(
                    f"llamaServerArgs sets {flag!r}: the model comes from the release's archive "
                    "(modelDataUri) or from huggingFace {repo, file}, not from both"
                )
        if "n-predict" not in self.llama_server_args:
            raise ValueError(
                "llamaServerArgs needs 'n-predict', the most tokens one completion generates: "
                "without it a completion has no bound, and the capacity is measured at it"
            )
        gpu = self.instance_type.startswith(_GPU_FAMILIES)
        if gpu != (self.image == "cuda"):
            raise ValueError(
                f"image {self.image!r} does not fit instance type {self.instance_type!r}: "
                "use 'cuda' on ml.g*/ml.p* and 'cpu' elsewhere"
            )
        return self

    @property
    def server_args(self) -> dict[str, str]:
        """The llama-server flags as the DLC reads them (what a measurement is taken at)."""
        return {flag: _flag_value(value) for flag, value in self.llama_server_args.items()}

    @property
    def model_source(self) -> str:
        if self.hugging_face is not None:
            return "huggingFace.file"
        return super().model_source

    def served_model(self, release_model: str) -> str:
        """The name it serves its model under (llama-server's --alias), which its measurement
        is filed under: the release's model, or the Hub file's name without `.gguf`."""
        if self.hugging_face is not None:
            return Path(self.hugging_face.file).stem
        return release_model

    def measured_capacity(self, model: str) -> text_generation_capacity.Capacity:
        return text_generation_capacity.for_release(
            self.served_model(model), self.instance_type, self.server_args
        )

    def placeholder_capacity(self) -> text_generation_capacity.Capacity:
        return text_generation_capacity.derive(text_generation_capacity.DESTROY_PLACEHOLDER)


# One KV cell of a Qwen3-4B-class model in f16: K and V (2) of 36 layers of 8 KV heads of 128
# dimensions, 2 bytes each. A hybrid model such as Qwen3.5 takes less; a larger one, more.
DEFAULT_KV_BYTES_PER_TOKEN = 2 * 36 * 8 * 128 * 2


class Concurrency(_Config):
    """How many requests the decision adapter serves at once (docs/scoring.md, "Requests at
    once"), rendered into its environment. A measurement is of one setting: synthesis refuses
    one taken at another, since the rate it derives from would not be this one's."""

    max_scoring_requests: int = Field(
        1,
        ge=1,
        le=64,
        description="`DECISION_MAX_SCORING_REQUESTS`: decision requests scored at once, sharing "
        "batches; the asynchronous endpoint sends each instance that many at once",
    )
    max_chat_streams: int = Field(
        1, ge=1, le=64, description="`DECISION_MAX_CHAT_STREAMS`: chat streams generating at once"
    )
    chat_shared_batches: bool = Field(
        False,
        description="`DECISION_CHAT_SHARED_BATCHES`: the chat streams' next tokens in one "
        "micro-batch (needs `maxChatStreams` above 1)",
    )
    kv_bytes_per_token: int = Field(
        DEFAULT_KV_BYTES_PER_TOKEN,
        ge=1,
        description="bytes of KV cache one context token takes on the release's model (2 x "
        "layers x KV heads x head dimensions x 2 in f16); the cache of every stream must fit in "
        "half the instance's memory (checked at synthesis)",
    )

    @model_validator(mode="after")
    def _shared_batches_need_streams(self) -> Concurrency:
        if self.chat_shared_batches and self.max_chat_streams == 1:
            raise ValueError(
                "chatSharedBatches needs maxChatStreams above 1: one stream shares no batch"
            )
        return self

    def measured_settings(self) -> dict[str, int | bool]:
        """What a measurement records of it (stacks/capacity.py DEFAULT_CONCURRENCY's keys)."""
        return self.model_dump(exclude={"kv_bytes_per_token"})

    def environment(self) -> dict[str, str]:
        """The adapter's variables for it (settings.py reads them)."""
        return {
            "DECISION_MAX_SCORING_REQUESTS": str(self.max_scoring_requests),
            "DECISION_MAX_CHAT_STREAMS": str(self.max_chat_streams),
            "DECISION_CHAT_SHARED_BATCHES": "true" if self.chat_shared_batches else "false",
        }


class ChatLimits(_Config):
    """Chat on a real-time decision endpoint: it holds the model a decision would have, so it is
    capped in tokens and time. Long chat belongs on the text-generation endpoint."""

    max_tokens: int = Field(
        256,
        ge=1,
        le=8192,
        description="`DECISION_MAX_CHAT_TOKENS`: a chat's default and largest " "`max_tokens`",
    )
    deadline_s: float | None = Field(
        None,
        gt=0,
        le=50,
        description="`DECISION_CHAT_DEADLINE_S`: a chat stops generating this long after it "
        "arrived; unset: the endpoint's `admissionWaitS` (at least 1 s), so a decision that "
        "arrives behind a chat is admitted within its wait",
    )

    def environment(self, admission_wait_s: float) -> dict[str, str]:
        """The adapter's variables for it, the deadline following the admission wait."""
        deadline = self.deadline_s if self.deadline_s is not None else max(1.0, admission_wait_s)
        return {
            "DECISION_MAX_CHAT_TOKENS": str(self.max_tokens),
            "DECISION_CHAT_DEADLINE_S": str(deadline),
        }


class Traffic(_Config):
    """The requests a decision endpoint is expected to serve. Synthesis refuses a measurement of
    other requests: latency grows with length, and chat holds the model longer."""

    input_tokens: int | None = Field(
        None,
        ge=1,
        description="the median request's input tokens; a measurement whose median lies over "
        "25% away is refused; unset: not checked",
    )
    chat_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="the share of chats among the requests; a measurement's must lie within "
        "0.05 of it",
    )


class _DecisionAdapter(_Config):
    """An endpoint that runs the decision adapter: its concurrency, and a KV cache for it that
    fits the memory of every instance type it may land on."""

    if TYPE_CHECKING:  # each subclass's field, described there
        n_ctx: int
    concurrency: Concurrency = Concurrency()

    @property
    def memory_types(self) -> list[str]:
        """The instance types whose memory the KV cache must fit."""
        raise NotImplementedError

    @property
    def kv_on_gpu(self) -> bool:
        return False

    @model_validator(mode="after")
    def _kv_cache_fits(self) -> Self:
        check_fits(
            self.memory_types,
            on_gpu=self.kv_on_gpu,
            n_ctx=self.n_ctx,
            scoring_requests=self.concurrency.max_scoring_requests,
            chat_streams=self.concurrency.max_chat_streams,
            bytes_per_token=self.concurrency.kv_bytes_per_token,
        )
        return self


class _MeasuredDecisionEndpoint(_MeasuredEndpoint, _DecisionAdapter):
    """A decision endpoint: its admission queue and wait derive from the measurement too
    (stacks/capacity.py)."""

    DERIVED: ClassVar[dict[str, tuple[str, ...]]] = {
        "maxQueue": ("max_queue",),
        "admissionWaitS": ("admission_wait_s",),
        **_MeasuredEndpoint.DERIVED,
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


class DecisionCpuEndpoint(_MeasuredDecisionEndpoint):
    """The decision endpoint on one fixed CPU instance type."""

    endpoint_name: EndpointName = Field(
        "decision-models-decision-cpu",
        description="the endpoint's name; not given, it follows `stackPrefix`",
    )
    instance_type: InstanceType = Field("ml.c6i.2xlarge", description="a CPU instance type")
    n_threads: int = Field(8, ge=1, le=192, description="`DECISION_N_THREADS`")
    n_ctx: int = Field(4096, ge=256, le=262_144, description="`DECISION_N_CTX`")
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
        if self.instance_type.startswith(_GPU_FAMILIES):
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
    n_threads: int = Field(4, ge=1, le=192, description="`DECISION_N_THREADS`")
    n_ctx: int = Field(4096, ge=256, le=262_144, description="`DECISION_N_CTX`")
    n_gpu_layers: int = Field(-1, ge=-1, description="-1 offloads every layer")

    @property
    def instance_types(self) -> list[str]:
        return list(self.instance_pool)

    @model_validator(mode="after")
    def _gpu_pool(self) -> DecisionGpuEndpoint:
        duplicates = sorted({t for t in self.instance_pool if self.instance_pool.count(t) > 1})
        if duplicates:
            raise ValueError(f"instancePool lists {', '.join(duplicates)} more than once")
        not_gpu = [t for t in self.instance_pool if not t.startswith(_GPU_FAMILIES)]
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
    def kv_on_gpu(self) -> bool:
        return self.n_gpu_layers != 0

    @property
    def cuda_architectures(self) -> str:
        """What the GPU image compiles llama.cpp's CUDA kernels for, e.g. `75;86;89`."""
        return cuda_architectures(self.instance_pool)


class AsyncAutoscaling(_Capacity):
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


# `ops submit`'s InvocationTimeoutSeconds (SageMaker's most), less a minute for the answer's
# upload to S3.
ASYNC_DEADLINE_S = 3540


class DecisionAsyncEndpoint(EndpointSettings, _DecisionAdapter):
    """An asynchronous decision endpoint on the CPU decision image: requests and answers in the
    artifact bucket (the model archive's) under their own prefixes, SNS notifications, and
    scaling on the backlog down to zero. Off by default."""

    enabled: bool = Field(False, description="deploy this endpoint")
    endpoint_name: EndpointName = Field(
        "decision-models-decision-async",
        description="the endpoint's name; not given, it follows `stackPrefix`",
    )
    instance_type: InstanceType = Field("ml.c6i.2xlarge", description="a CPU instance type")
    n_threads: int = Field(8, ge=1, le=192, description="`DECISION_N_THREADS`")
    n_ctx: int = Field(4096, ge=256, le=262_144, description="`DECISION_N_CTX`")
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

    @model_validator(mode="after")
    def _cpu_instance_and_separate_prefixes(self) -> DecisionAsyncEndpoint:
        if self.instance_type.startswith(_GPU_FAMILIES):
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


def release_model(model_data_uri: str, builds: Builds) -> str:
    """The model a release deploys, which its capacity is looked up by: the spec its archive was
    packaged from (the manifest's `spec`), which the model build writes into the archive's key,
    `<artifactPrefix>/<spec>/<sha256>/model.tar.gz`; an archive whose key does not name it (one
    uploaded by hand, or before keys did), or a URI that is no S3 archive, is taken to hold
    builds.modelSpec's model."""
    matched = _MODEL_DATA.match(model_data_uri)
    if matched is None:  # the config's modelDataUri is validated against it; a model's may not be
        return builds.model
    key = matched["key"]
    named = re.fullmatch(
        rf"{re.escape(builds.artifact_prefix)}/(?P<spec>[A-Za-z0-9][A-Za-z0-9._-]*)"
        r"/[0-9a-f]{64}/model\.tar\.gz",
        key,
    )
    return named["spec"] if named else builds.model


# Each endpoint's name after the stack prefix, `<prefix in kebab case>-<suffix>`.
ENDPOINT_SUFFIXES = {
    "text_generation_endpoint": "text-generation",
    "decision_cpu_endpoint": "decision-cpu",
    "decision_gpu_endpoint": "decision-gpu",
    "decision_async_endpoint": "decision-async",
}


class AppConfig(_Config):
    """Everything the app reads from context.

    Build outputs (`modelDataUri`, `decision*Image`) are absent until the builds ran; without
    `modelDataUri` the app synthesizes the stateful stack only.
    """

    stack_prefix: str = Field(
        "DecisionModels",
        pattern=r"^[A-Za-z][A-Za-z0-9-]{0,80}$",
        description="the stacks' name prefix (`<prefix>-Stateful`, `<prefix>-Endpoints`); "
        "endpoint names not given follow it in kebab case",
    )
    # Optional: pin both stacks to one region. The DLC registry is then resolved (and a region
    # without the DLC refused) at synthesis; without it the stacks stay environment-agnostic
    # and a template rule refuses such a region at deployment.
    region: str | None = Field(
        None,
        description="pins both stacks to one region, the DLC registry then resolved at synthesis;"
        " unset keeps the stacks environment-agnostic, a template rule refusing a "
        "region without the DLC",
    )
    retain_artifacts: bool = Field(
        True,
        description="keep the artifact bucket and the image repository when the stateful stack is"
        " deleted",
    )
    # Asynchronous requests, answers and failures, and batch inputs and outputs, are work, not
    # artifacts: the bucket expires them this many days after they were written.
    work_retention_days: int = Field(
        30,
        ge=1,
        le=3650,
        description="days after which the artifact bucket expires the endpoints' work objects "
        "(asynchronous and batch prefixes); archives are kept",
    )
    # Unset: CloudFormation generates the ECR repository's name, so a retained repository
    # never blocks a fresh deploy. Set it for a stable name (and for moto, which rejects the
    # generated one; see docs/development.md, "What is rehearsed offline").
    image_repository_name: str | None = Field(
        None,
        pattern=r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$",
        min_length=2,
        max_length=256,
        description="the ECR repository's name; unset: CloudFormation generates one, so a "
        "retained repository never blocks a fresh deploy",
    )
    dlc: DlcImages = DlcImages()
    builds: Builds = Builds()
    model_data_uri: ModelDataUri | None = Field(
        None,
        description="the release's model archive (`s3://.../model.tar.gz`, printed by `ops build "
        "model`); unset: the app holds the stateful stack only",
    )
    decision_cpu_image: EcrImage | None = Field(
        None,
        description="the CPU decision image, pinned by digest (printed by `ops build cpu-image`)",
    )
    decision_gpu_image: EcrImage | None = Field(
        None,
        description="the GPU decision image, pinned by digest (printed by `ops build gpu-image`)",
    )
    # Set by `make destroy`: the stacks are synthesized only to be found and deleted, so an
    # endpoint without a committed measurement gets placeholder capacity instead of a refusal
    # (a clean-up must never depend on capacity values).
    for_destroy: bool = Field(
        False,
        description="set by `make destroy`: endpoints without a committed measurement get "
        "placeholder capacity, so a clean-up never depends on capacity values",
    )
    # Endpoint names not given follow stackPrefix (`DecisionModels`: decision-models-...), so
    # two copies of the app in one account and region do not collide.
    text_generation_endpoint: TextGenerationEndpoint = Field(
        default_factory=TextGenerationEndpoint, validate_default=True
    )
    # Validated also when absent: a release fills in their measured capacity.
    decision_cpu_endpoint: DecisionCpuEndpoint = Field(
        default_factory=DecisionCpuEndpoint, validate_default=True
    )
    decision_gpu_endpoint: DecisionGpuEndpoint = Field(
        default_factory=DecisionGpuEndpoint, validate_default=True
    )
    decision_async_endpoint: DecisionAsyncEndpoint = Field(
        default_factory=DecisionAsyncEndpoint, validate_default=True
    )
    invoker_role_arns: list[
        Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/[A-Za-z0-9_+=,.@/-]+$")]
    ] = Field(
        default_factory=list,
        description="IAM roles granted `InvokeEndpoint` on every endpoint (on the asynchronous "
        "one `InvokeEndpointAsync` and its prefixes)",
    )

    @field_validator("region")
    @classmethod
    def _region_has_the_dlc(cls, value: str | None) -> str | None:
        if value is not None and value not in DLC_ACCOUNTS:
            raise UnsupportedRegion(value)
        return value

    @field_validator(
        "dlc",
        "builds",
        "text_generation_endpoint",
        "decision_cpu_endpoint",
        "decision_gpu_endpoint",
        "decision_async_endpoint",
        "invoker_role_arns",
        mode="before",
    )
    @classmethod
    def _json_from_command_line(cls, value: Any) -> Any:
        """`-c key=value` gives strings; accept JSON there for objects and lists."""
        if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
            return json.loads(value)
        return value

    @field_validator(*ENDPOINT_SUFFIXES, mode="after")
    @classmethod
    def _named_after_the_stacks(cls, endpoint: EndpointSettings, info: ValidationInfo) -> Any:
        """An endpoint whose name was not given is named after stackPrefix."""
        if "endpoint_name" in endpoint.model_fields_set or "stack_prefix" not in info.data:
            return endpoint
        assert info.field_name is not None  # a field validator's
        prefix = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", info.data["stack_prefix"]).lower()
        name = f"{prefix}-{ENDPOINT_SUFFIXES[info.field_name]}"
        if not _ENDPOINT_NAME.fullmatch(name):
            raise ValueError(
                f"stackPrefix {info.data['stack_prefix']!r} makes the endpoint name {name!r}, "
                "not a SageMaker endpoint name (at most 63 of [a-zA-Z0-9-]); give endpointName"
            )
        return endpoint.model_copy(update={"endpoint_name": name})

    @field_validator("text_generation_endpoint", "decision_cpu_endpoint", "decision_gpu_endpoint")
    @classmethod
    def _measured_capacity(cls, endpoint: _MeasuredEndpoint, info: ValidationInfo) -> Any:
        """A release's endpoint takes what its config leaves open from the measurement of the
        release's model on its instance types, or is refused without one; switched to
        `measuring`, it is deployed to be measured instead."""
        builds = info.data.get("builds")  # absent when invalid, and reported as such
        model_data_uri = info.data.get("model_data_uri")
        if not (endpoint.enabled and model_data_uri and builds):
            return endpoint
        if endpoint.measuring:
            return endpoint.for_measuring()
        missing = endpoint.unmeasured()
        if not missing:
            return endpoint
        if info.data.get("for_destroy"):
            return endpoint.with_capacity(endpoint.placeholder_capacity())
        try:
            derived = endpoint.measured_capacity(release_model(model_data_uri, builds))
        except capacity.MissingMeasurement as absent:
            assert info.field_name is not None  # a field validator's
            section = to_camel(info.field_name)
            keys = [f"{section}.{key}" for key in missing]
            raise ValueError(
                f"{absent} (the model is {endpoint.model_source}). Until it is measured, deploy it "
                f"to be measured (`python -m ops context set {section}.measuring=true`) or give "
                f"{', '.join(keys[:-1])}{' and ' if len(keys) > 1 else ''}{keys[-1]}; then "
                f"`python -m ops measure --endpoint {endpoint.endpoint_name}` on the deployed "
                "endpoint writes the file of the instance type it runs on (commit it, and "
                f"unset {section}.measuring or the values given)"
            ) from None
        return endpoint.with_capacity(derived)

    @model_validator(mode="after")
    def _release_complete(self) -> AppConfig:
        endpoints = (
            self.text_generation_endpoint,
            self.decision_cpu_endpoint,
            self.decision_gpu_endpoint,
            self.decision_async_endpoint,
        )
        names = [e.endpoint_name for e in endpoints if e.enabled]
        if len(names) != len(set(names)):
            raise ValueError(f"endpoint names must differ: {names}")
        self._amis_run_the_cuda_image()
        self._pool_runs_the_gpu_image()
        images = (
            (self.decision_cpu_endpoint, self.decision_cpu_image, "decisionCpuImage", "cpu-image"),
            (self.decision_gpu_endpoint, self.decision_gpu_image, "decisionGpuImage", "gpu-image"),
            (
                self.decision_async_endpoint,
                self.decision_cpu_image,
                "decisionCpuImage",
                "cpu-image",
            ),
        )
        if self.model_data_uri is None:
            given = [key for _, image, key, _ in images if image is not None]
            if given:
                raise ValueError(
                    f"{', '.join(given)} given without modelDataUri: run `python -m ops build "
                    "model` and pass -c modelDataUri=<printed URI> (the endpoints need both)"
                )
            return self
        for endpoint, image, key, build in images:
            if endpoint.enabled and image is None:
                raise ValueError(
                    f"{key} is required while {endpoint.endpoint_name} is enabled: run "
                    f"`python -m ops build {build}` and pass -c {key}=<printed URI>, or disable "
                    "the endpoint with enabled=false"
                )
        return self

    def _pool_runs_the_gpu_image(self) -> None:
        """Every type of an enabled GPU pool has a GPU the GPU image is compiled for."""
        gpu = self.decision_gpu_endpoint
        built = self.builds.cuda_architectures.split(";")
        if not gpu.enabled:
            return
        for instance_type in gpu.instance_pool:
            needed = cuda_architectures([instance_type])
            if needed not in built:
                raise ValueError(
                    f"decisionGpuEndpoint.instancePool: {instance_type} needs CUDA architecture "
                    f"{needed}, which the GPU image is not compiled for (builds.cudaArchitectures "
                    f"{self.builds.cuda_architectures}): add it there, deploy the stateful stack "
                    "and build the GPU image again, or leave the type out of the pool"
                )

    def _amis_run_the_cuda_image(self) -> None:
        """Every enabled endpoint on the CUDA image gets an AMI whose driver runs its CUDA."""
        text, gpu = self.text_generation_endpoint, self.decision_gpu_endpoint
        for key, endpoint, on_cuda in (
            ("textGenerationEndpoint", text, text.image == "cuda"),
            ("decisionGpuEndpoint", gpu, True),
        ):
            if endpoint.enabled and on_cuda:
                try:
                    check_ami_runs_cuda(endpoint.inference_ami_version, self.dlc.cuda_major_version)
                except ValueError as error:
                    raise ValueError(f"{key}.{error}") from None

    @property
    def release_model(self) -> str:
        """The model the release deploys (see `release_model`); needs modelDataUri."""
        assert self.model_data_uri is not None
        return release_model(self.model_data_uri, self.builds)

    @property
    def deploys_endpoints(self) -> bool:
        return self.model_data_uri is not None

    @property
    def work_prefixes(self) -> list[str]:
        """The artifact bucket's prefixes of work the endpoints read and write (expiring)."""
        asynchronous = self.decision_async_endpoint
        prefixes: list[str | None] = [asynchronous.input_prefix, asynchronous.output_prefix]
        prefixes += [asynchronous.failure_prefix, self.decision_cpu_endpoint.batch_prefix]
        return sorted({prefix for prefix in prefixes if prefix is not None})

    @classmethod
    def from_context(cls, context: Callable[[str], Any] | Mapping[str, Any]) -> AppConfig:
        """Read each field's camelCase key; `context` is `node.try_get_context` or a mapping."""
        get = context.get if isinstance(context, Mapping) else context
        values = {
            field.alias: value
            for name, field in cls.model_fields.items()
            if (value := get(field.alias or name)) is not None
        }
        return cls.model_validate(values)
