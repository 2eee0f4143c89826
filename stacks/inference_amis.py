"""SageMaker's inference AMIs and the NVIDIA driver and CUDA version each one ships.

The table is read from botocore's service model, where AWS documents every value of
`ProductionVariantInferenceAmiVersion` with its driver and CUDA version. Reading it at synth
keeps the check in step with the pinned botocore instead of a hand-copied list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import botocore.session

# <dt>name</dt> <dd> <ul> <li> <p>Key: value</p> </li> ... </ul> </dd>
_ENTRY = re.compile(r"<dt>(?P<name>[^<]+)</dt>\s*<dd>(?P<body>.*?)</dd>", re.S)
_ITEM = re.compile(r"<li>\s*<p>(?P<text>[^<]+)</p>\s*</li>")


@dataclass(frozen=True)
class InferenceAmi:
    name: str
    accelerator: str
    nvidia_driver: int | None
    cuda: tuple[int, int] | None

    @property
    def cuda_major(self) -> int | None:
        return self.cuda[0] if self.cuda else None


def parse_ami_documentation(documentation: str) -> dict[str, InferenceAmi]:
    """The AMIs described in the documentation of ProductionVariant.InferenceAmiVersion."""
    amis = {}
    for entry in _ENTRY.finditer(documentation):
        facts: dict[str, str] = {}
        for item in _ITEM.finditer(entry["body"]):
            key, colon, value = item["text"].partition(":")
            if colon:
                facts[key.strip().lower()] = value.strip()
        driver = facts.get("nvidia driver version")
        cuda = facts.get("cuda version")
        major_minor = tuple(int(part) for part in cuda.split(".")[:2]) if cuda else None
        name = entry["name"].strip()
        amis[name] = InferenceAmi(
            name=name,
            accelerator=facts.get("accelerator", ""),
            nvidia_driver=int(driver) if driver else None,
            cuda=major_minor,  # type: ignore[arg-type]
        )
    return amis


@cache
def inference_amis() -> dict[str, InferenceAmi]:
    """Every documented AMI, checked against the API's enum so no value goes unexplained."""
    model = botocore.session.get_session().get_service_model("sagemaker")
    member = model.shape_for("ProductionVariant").members["InferenceAmiVersion"]
    amis = parse_ami_documentation(member.documentation)
    undocumented = set(member.enum) - set(amis)
    if undocumented:
        raise RuntimeError(
            "botocore lists InferenceAmiVersion values it does not document: "
            + ", ".join(sorted(undocumented))
        )
    return {name: amis[name] for name in member.enum}


def check_ami_runs_cuda(ami_version: str, cuda_major: int) -> None:
    """Raise ValueError unless the AMI's driver runs an image built for CUDA `cuda_major`.

    A driver runs CUDA up to its own version; forward compatibility would need the image's
    CUDA-compat libraries, which these AMIs either do not mount or do not promise. So the AMI's
    CUDA major version must be at least the image's.
    """
    amis = inference_amis()
    ami = amis.get(ami_version)
    if ami is None:
        raise ValueError(
            f"inferenceAmiVersion {ami_version!r} is not one SageMaker knows: "
            + ", ".join(sorted(amis))
        )
    fitting = sorted(
        name for name, a in amis.items() if a.cuda_major is not None and a.cuda_major >= cuda_major
    )
    if ami.cuda_major is None or ami.cuda_major < cuda_major:
        has = (
            f"NVIDIA driver {ami.nvidia_driver}, CUDA {'.'.join(map(str, ami.cuda))}"
            if ami.cuda
            else f"no CUDA ({ami.accelerator})"
        )
        raise ValueError(
            f"inferenceAmiVersion {ami_version!r} has {has}; the image needs CUDA {cuda_major}: "
            f"use {' or '.join(fitting) or 'an AMI with a newer driver'}"
        )
