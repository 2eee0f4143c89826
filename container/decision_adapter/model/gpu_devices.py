"""The instance's NVIDIA GPUs as the driver reports them (NVML), for the start-up line.

NVML ships with the driver (`libnvidia-ml.so.1`; SageMaker's GPU hosts mount it into the
container), so it names the GPU the instance really has. Without a driver the answer is None:
a CPU instance is no error, and nothing here may stop the adapter from starting.
"""

from __future__ import annotations

import ctypes
from typing import TypedDict

NVML_LIBRARY = "libnvidia-ml.so.1"
_NVML_SUCCESS = 0


class GpuDevice(TypedDict):
    name: str
    memory_bytes: int


class _Memory(ctypes.Structure):  # nvmlMemory_t
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


def gpu_devices(library: str = NVML_LIBRARY) -> list[GpuDevice] | None:
    """[{name, memory_bytes}] per GPU; None when there is no driver or it answers an error."""
    try:
        nvml = ctypes.CDLL(library)
    except OSError:
        return None
    try:
        if nvml.nvmlInit_v2() != _NVML_SUCCESS:
            return None
    except AttributeError:
        return None
    try:
        return _devices(nvml)
    except AttributeError:
        return None
    finally:
        nvml.nvmlShutdown()


def _devices(nvml: ctypes.CDLL) -> list[GpuDevice] | None:
    count = ctypes.c_uint()
    if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_SUCCESS:
        return None
    devices: list[GpuDevice] = []
    for index in range(count.value):
        handle = ctypes.c_void_p()
        name = ctypes.create_string_buffer(96)  # NVML_DEVICE_NAME_V2_BUFFER_SIZE
        memory = _Memory()
        if (
            nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != _NVML_SUCCESS
            or nvml.nvmlDeviceGetName(handle, name, len(name)) != _NVML_SUCCESS
            or nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != _NVML_SUCCESS
        ):
            return None
        devices.append(
            {"name": name.value.decode("utf-8", "replace"), "memory_bytes": memory.total}
        )
    return devices
