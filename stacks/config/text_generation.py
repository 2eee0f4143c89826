"""The text-generation endpoint (`textGenerationEndpoint`): the llama.cpp DLC as published,
llama-server's flags rendered into its environment."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from stacks import text_generation_capacity
from stacks.gpu_instances import is_gpu_instance

from .base import AmiVersion, EndpointName, InstanceType, Section, matches
from .endpoint import MeasuredEndpoint

_HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_LLAMA_FLAG = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def _gguf_in_repository(value: str) -> str:
    parts = value.split("/")
    if not value.endswith(".gguf") or any(p in ("", ".", "..") or p.strip() != p for p in parts):
        raise ValueError(
            f"{value!r} is not a GGUF file path within the repository "
            "(e.g. Qwen3.5-4B-Q4_K_M.gguf; relative, ending in .gguf)"
        )
    return value


class HuggingFaceModel(Section):
    """A GGUF the DLC downloads from the Hugging Face Hub at start (llama-server's --hf-repo
    and --hf-file): the endpoint then needs internet egress, and the pinned image digest no
    longer pins the weights."""

    repo: Annotated[
        str,
        AfterValidator(matches(_HF_REPO, "a Hugging Face repository id (owner/name)")),
    ] = Field(description="a Hugging Face repository id (owner/name)")
    file: Annotated[str, AfterValidator(_gguf_in_repository)] = Field(
        description="the GGUF's path within the repository"
    )


# llama-server flags the configuration sets itself; in llamaServerArgs they would fight it.
_MODEL_FLAGS = ("model", "model-dir", "hf-repo", "hf-file", "model-url", "alias")


def _flag_value(value: str | int | bool) -> str:
    """A llama-server flag's value as the DLC reads it from SM_LLAMA_CPP_<FLAG> (true: bare)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _llama_server_defaults() -> dict[str, str | int | bool]:
    return {"ctx-size": 8192, "threads": 8, "parallel": 2, "n-predict": 256}


class TextGenerationEndpoint(MeasuredEndpoint):
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
        gpu = is_gpu_instance(self.instance_type)
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

    def environment(self, release_model: str) -> dict[str, str]:
        """The DLC's variables: SM_LLAMA_CPP_FOO_BAR=value becomes llama-server's --foo-bar value.
        The alias names the model in every answer: `ops measure` files its measurement so."""
        server_args = {**self.server_args, "alias": self.served_model(release_model)}
        environment = {
            "SM_LLAMA_CPP_" + flag.upper().replace("-", "_"): value
            for flag, value in server_args.items()
        }
        hub = self.hugging_face
        if hub is not None:
            environment |= {"SM_LLAMA_CPP_HF_REPO": hub.repo, "SM_LLAMA_CPP_HF_FILE": hub.file}
        return environment

    def measured_capacity(self, model: str) -> text_generation_capacity.Capacity:
        return text_generation_capacity.for_release(
            self.served_model(model), self.instance_type, self.server_args
        )

    def placeholder_capacity(self) -> text_generation_capacity.Capacity:
        return text_generation_capacity.derive(text_generation_capacity.DESTROY_PLACEHOLDER)
