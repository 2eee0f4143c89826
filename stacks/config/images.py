"""The images the endpoints run: the llama.cpp DLC the text-generation endpoint runs as
published (and the decision images are built FROM), and the decision images, each pinned by
digest."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from .base import Section

DIGEST_PATTERN = r"sha256:[0-9a-f]{64}"
_DIGEST = re.compile(rf"^{DIGEST_PATTERN}$")
# A private ECR image pinned by digest: what the image build prints and SageMaker can pull.
_ECR_IMAGE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z]{2}(-[a-z]+)+-\d)\.amazonaws\.com(\.cn)?"
    rf"/(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)@(?P<digest>{DIGEST_PATTERN})$"
)
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


EcrImage = Annotated[str, AfterValidator(_ecr_image)]


class DlcImages(Section):
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
