"""The GPU part of the start-up line: NVML read through ctypes, never a crash without it.

This machine has no NVIDIA driver. The NVML path is exercised against a stand-in library
compiled here from NVML's documented prototypes (nvml.h): it checks the calls' arguments and
struct layout as the real driver reads them, and each failure return the driver can give.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from decision_adapter.model.gpu_devices import gpu_devices

STANDIN = r"""
#include <string.h>
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef void *nvmlDevice_t;
static int devices[2];
int nvmlInit_v2(void) { return FAIL_INIT; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (index > 1) return 2;  /* NVML_ERROR_INVALID_ARGUMENT */
    *device = &devices[index];
    return 0;
}
int nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    const char *text = device == &devices[0] ? "NVIDIA L40S" : "NVIDIA A10G";
    if (length < 96) return 7;  /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(name, text);
    return 0;
}
int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    memory->total = device == &devices[0] ? 48305799168ULL : 24146608128ULL;
    memory->free = 1; memory->used = 2;
    return FAIL_MEMORY;
}
"""


def standin(tmp_path: Path, *, fail_init: int = 0, fail_memory: int = 0) -> str:
    if shutil.which("cc") is None:
        pytest.fail("a C compiler is needed to build the NVML stand-in")
    source = tmp_path / "nvml.c"
    source.write_text(STANDIN)
    library = tmp_path / f"libnvidia-ml-{fail_init}-{fail_memory}.so.1"
    subprocess.run(
        ["cc", "-shared", "-fPIC", f"-DFAIL_INIT={fail_init}", f"-DFAIL_MEMORY={fail_memory}"]
        + ["-o", str(library), str(source)],
        check=True,
    )
    return str(library)


def test_each_gpu_is_named_with_its_memory(tmp_path):
    assert gpu_devices(standin(tmp_path)) == [
        {"name": "NVIDIA L40S", "memory_bytes": 48305799168},
        {"name": "NVIDIA A10G", "memory_bytes": 24146608128},
    ]


@pytest.mark.parametrize("failure", [{"fail_init": 9}, {"fail_memory": 3}])
def test_a_driver_that_answers_an_error_gives_none(tmp_path, failure):
    """NVML_ERROR_DRIVER_NOT_LOADED (9) at init, NVML_ERROR_NOT_SUPPORTED (3) later."""
    assert gpu_devices(standin(tmp_path, **failure)) is None


def test_no_driver_or_not_nvml_gives_none():
    assert gpu_devices("libnvidia-ml-absent.so.1") is None
    assert gpu_devices("libc.so.6") is None  # loads, but has no nvmlInit_v2
