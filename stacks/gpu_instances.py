"""The GPU of each SageMaker GPU instance family, as the CUDA compute capability it has.

The CUDA image compiles llama.cpp's kernels for exactly the capabilities its pool can land on:
each extra architecture costs build time and memory on the CodeBuild host, and a missing one
makes the image unusable on that instance type.
"""

from __future__ import annotations

# Instance family (ml.<family>.<size>) -> compute capability of its NVIDIA GPU. x86-64 only:
# the images are built for x86-64, so Graviton families (g5g) are not listed. CUDA 13 runs
# Turing (7.5) and newer, so pre-Turing families (p3, V100) are not listed either.
COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "g4dn": (7, 5),  # NVIDIA T4
    "g5": (8, 6),  # NVIDIA A10G
    "g6": (8, 9),  # NVIDIA L4
    "g6e": (8, 9),  # NVIDIA L40S
    "p4d": (8, 0),  # NVIDIA A100 40 GB
    "p4de": (8, 0),  # NVIDIA A100 80 GB
    "p5": (9, 0),  # NVIDIA H100
    "p5e": (9, 0),  # NVIDIA H200
    "p5en": (9, 0),  # NVIDIA H200
}


def instance_family(instance_type: str) -> str:
    """`ml.g6e.xlarge` -> `g6e`."""
    return instance_type.split(".")[1]


def unknown_gpu_types(instance_types: list[str]) -> list[str]:
    return [t for t in instance_types if instance_family(t) not in COMPUTE_CAPABILITY]


def cuda_architectures(instance_types: list[str]) -> str:
    """CMake's CUDA_ARCHITECTURES for these types, e.g. `75;86;89`: each GPU's real arch once."""
    capabilities = sorted({COMPUTE_CAPABILITY[instance_family(t)] for t in instance_types})
    return ";".join(f"{major}{minor}" for major, minor in capabilities)


def is_gpu_instance(instance_type: str) -> bool:
    """Whether a SageMaker instance type has a GPU: the `ml.g*` and `ml.p*` families."""
    return instance_type.startswith(("ml.g", "ml.p"))
