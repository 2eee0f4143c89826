"""The CodeBuild projects of the stateful stack (`builds`), and the model archive a release
deploys (`modelDataUri`, what the model build prints), whose key names the model it holds."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from model_packaging.catalog import BUILTIN_SPECS, load_spec
from model_packaging.errors import SpecError
from stacks import capacity

from .base import LogRetentionDays, Section

_MODEL_DATA = re.compile(
    r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<key>[^\s]*[^/\s]\.tar\.gz)$"
)


def _model_data(value: str) -> str:
    if not _MODEL_DATA.match(value):
        raise ValueError(
            f"{value!r} is not a model archive URI: expected s3://<bucket>/<key>.tar.gz "
            "(the URI that `python -m ops build model` prints)"
        )
    return value


ModelDataUri = Annotated[str, AfterValidator(_model_data)]


class Builds(Section):
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
