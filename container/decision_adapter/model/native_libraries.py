"""What the model runs on, logged once at start-up as one line (event `model_loaded`).

The line holds the model, the instance's GPUs as the driver names them, how many of the
model's layers llama.cpp offloaded, the CPU backend llama.cpp runs (the variant the image's
runtime dispatch chose, its features, and the buffer types the weights went to: an extra one,
such as CPU_REPACK or AMX, changes the matrix kernels), and which llama.cpp shared libraries the
process really bound: the bindings describe one llama.cpp build; a different libllama or
libggml picked up through LD_LIBRARY_PATH (the DLC base image sets one) corrupts memory
instead of failing. The dynamic loader's choice is only visible in the process's own memory
map, so it is read there.
`python -m ops status` finds this line in the endpoint's log group by its event name.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .gpu_devices import gpu_devices

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("decision_adapter")
_PREFIXES = ("libllama", "libggml")
MODEL_LOADED = "model_loaded"


def loaded_llama_libraries(maps: Path = Path("/proc/self/maps")) -> list[str]:
    """Paths of the libllama*/libggml* shared objects mapped into this process."""
    found = set()
    for line in maps.read_text().splitlines():
        fields = line.split(maxsplit=5)  # address perms offset dev inode [path]
        if len(fields) == 6:
            name = os.path.basename(fields[5])
            if name.startswith(_PREFIXES) and ".so" in name:
                found.add(fields[5])
    return sorted(found)


# The CPU backend libraries of a build with runtime dispatch: libggml-cpu-<variant>.so.
_CPU_VARIANT = re.compile(r"^libggml-cpu-(.+?)\.so")


def cpu_features(system_info: str) -> list[str]:
    """The CPU backend's features llama.cpp reports as on (`CPU : AVX2 = 1 | ...`)."""
    match = re.search(r"CPU : ([^\n]*)", system_info)
    if not match:
        return []
    pairs = (part.split("=") for part in match.group(1).split("|") if "=" in part)
    return [name.strip() for name, value in pairs if value.strip() == "1"]


def cpu_extra_buffer_types(libraries: list[str]) -> list[str] | None:
    """The extra buffer types the CPU device offers (ggml's backend registry), or None where
    the process bound no libggml."""
    ggml = next((p for p in libraries if os.path.basename(p).startswith("libggml.so")), None)
    if ggml is None:
        return None
    lib = ctypes.CDLL(ggml)
    lib.ggml_backend_dev_by_type.restype = ctypes.c_void_p
    lib.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    lib.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
    lib.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    lib.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.ggml_backend_buft_name.restype = ctypes.c_char_p
    lib.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
    device = lib.ggml_backend_dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
    if not device:
        return []
    registry = lib.ggml_backend_dev_backend_reg(device)
    address = lib.ggml_backend_reg_get_proc_address(registry, b"ggml_backend_dev_get_extra_bufts")
    if not address:
        return []
    extra_bufts = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)
    types = extra_bufts(device)
    names = []
    for index in range(64):  # a NULL-terminated list of a handful
        if not types or not types[index]:
            break
        names.append(lib.ggml_backend_buft_name(types[index]).decode())
    return names


def cpu_backend(libraries: list[str], model_buffers: dict[str, float]) -> dict[str, Any]:
    """Which CPU code llama.cpp runs: the dispatched variant ("built in" for a build with one
    CPU backend), its features, the extra buffer types offered and the ones the weights use."""
    import llama_cpp

    variants = [m.group(1) for p in libraries if (m := _CPU_VARIANT.match(os.path.basename(p)))]
    extra = cpu_extra_buffer_types(libraries) or []
    return {
        "variant": variants[0] if variants else "built in",
        "features": cpu_features(llama_cpp.llama_print_system_info().decode(errors="replace")),
        "extra_buffer_types": extra,
        "model_buffers_mib": model_buffers,
        "extra_buffer_types_in_use": sorted(name for name in model_buffers if name in extra),
    }


def offloaded_layers(engine: Engine | None, n_gpu_layers: int) -> dict[str, int] | None:
    """Layers on the GPU of all, as llama.cpp counts them in its "offloaded N/M layers to GPU"
    line: the repeating layers plus the output layer, the request clamped to that; none on a
    build without a GPU backend. -1 asks for every layer. None: a service without a llama.cpp
    engine (the in-process test service)."""
    import llama_cpp

    if engine is None:
        return None
    total = llama_cpp.llama_model_n_layer(engine.model) + 1
    if not engine.gpu_offload:
        return {"offloaded": 0, "total": total}
    requested = total if n_gpu_layers < 0 else n_gpu_layers
    return {"offloaded": min(requested, total), "total": total}


def log_model_loaded(
    model_info: dict[str, Any],
    engine: Engine | None,
    n_gpu_layers: int,
    memory: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Log the one start-up line and return its fields."""
    import llama_cpp

    libraries = loaded_llama_libraries()
    fields = {
        "event": MODEL_LOADED,
        "model": model_info,
        "gpus": gpu_devices(),
        "layers": offloaded_layers(engine, n_gpu_layers),
        "cpu_backend": cpu_backend(libraries, getattr(engine, "model_buffers", {})),
        "llama_libraries": libraries,
        "llama_cpp_package": str(Path(llama_cpp.__file__).parent),
        "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""),
        **(memory or {}),
    }
    log.info("model loaded", extra={"fields": fields})
    return fields
