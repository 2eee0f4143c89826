"""The memory a decision endpoint's KV cache may take on an instance type: main memory on a CPU
type, one GPU's memory where the model is offloaded to the GPU.

A CPU type's memory follows from its family's letter and its size (SageMaker's c, m and r
families have 2, 4 and 8 GiB per vCPU; `large` is 2 vCPUs, `xlarge` 4, `Nxlarge` 4N). A GPU
family's memory per GPU is listed: llama.cpp places one model's context on one GPU by default.
"""

from __future__ import annotations

import re

from stacks.gpu_instances import instance_family

CPU_GIB_PER_VCPU = {"c": 2, "m": 4, "r": 8}
GPU_GIB = {
    "g4dn": 16,  # NVIDIA T4
    "g5": 24,  # NVIDIA A10G
    "g6": 24,  # NVIDIA L4
    "g6e": 48,  # NVIDIA L40S
    "p4d": 40,  # NVIDIA A100 40 GB
    "p4de": 80,  # NVIDIA A100 80 GB
    "p5": 80,  # NVIDIA H100
    "p5e": 141,  # NVIDIA H200
    "p5en": 141,  # NVIDIA H200
}
_SIZE = re.compile(r"^(?P<times>[0-9]*)x?large$")


class UnknownMemory(ValueError):
    """An instance type whose memory this module does not know."""


def memory_gib(instance_type: str, *, on_gpu: bool) -> int:
    """GiB the KV cache shares with the weights: one GPU's on a GPU, else the instance's."""
    family, size = instance_family(instance_type), instance_type.rsplit(".", 1)[1]
    if on_gpu:
        if family not in GPU_GIB:
            raise UnknownMemory(f"the GPU memory of {instance_type} is not known")
        return GPU_GIB[family]
    matched = _SIZE.match(size)
    if family[0] not in CPU_GIB_PER_VCPU or matched is None:
        raise UnknownMemory(
            f"the memory of {instance_type} is not known (c, m and r families of size large, "
            "xlarge or Nxlarge are)"
        )
    vcpus = 2 if size == "large" else 4 * int(matched["times"] or 1)
    return vcpus * CPU_GIB_PER_VCPU[family[0]]
