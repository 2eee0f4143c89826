"""The app's configuration (`AppConfig`): every top-level context key, the sections within it
validated by their own modules, and the rules across sections (endpoint names, the images a
release needs, the GPU image's architectures, the AMIs' CUDA)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from stacks import capacity
from stacks.dlc_registry import DLC_ACCOUNTS, UnsupportedRegion
from stacks.gpu_instances import cuda_architectures
from stacks.inference_amis import check_ami_runs_cuda

from .base import ENDPOINT_NAME, Section
from .builds import Builds, ModelDataUri, release_model
from .decision_endpoints import DecisionAsyncEndpoint, DecisionCpuEndpoint, DecisionGpuEndpoint
from .endpoint import EndpointSettings, MeasuredEndpoint
from .images import DlcImages, EcrImage
from .text_generation import TextGenerationEndpoint

# Each endpoint's name after the stack prefix, `<prefix in kebab case>-<suffix>`.
ENDPOINT_SUFFIXES = {
    "text_generation_endpoint": "text-generation",
    "decision_cpu_endpoint": "decision-cpu",
    "decision_gpu_endpoint": "decision-gpu",
    "decision_async_endpoint": "decision-async",
}


class AppConfig(Section):
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
        if not ENDPOINT_NAME.fullmatch(name):
            raise ValueError(
                f"stackPrefix {info.data['stack_prefix']!r} makes the endpoint name {name!r}, "
                "not a SageMaker endpoint name (at most 63 of [a-zA-Z0-9-]); give endpointName"
            )
        return endpoint.model_copy(update={"endpoint_name": name})

    @field_validator("text_generation_endpoint", "decision_cpu_endpoint", "decision_gpu_endpoint")
    @classmethod
    def _measured_capacity(cls, endpoint: MeasuredEndpoint, info: ValidationInfo) -> Any:
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
