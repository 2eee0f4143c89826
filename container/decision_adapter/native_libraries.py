"""What the model runs on, logged once at start-up as one line (event `model_loaded`).

The line holds the model, the instance's GPUs as the driver names them, how many of the
model's layers llama.cpp offloaded, and which llama.cpp shared libraries the process really
bound: the bindings describe one llama.cpp build; a different libllama or libggml picked up
through LD_LIBRARY_PATH (the DLC base image sets one) corrupts memory instead of failing. The
dynamic loader's choice is only visible in the process's own memory map, so it is read there.
`python -m ops status` finds this line in the endpoint's log group by its event name.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from .gpu_devices import gpu_devices

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


def offloaded_layers(engine, n_gpu_layers: int) -> dict[str, int] | None:
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


def log_model_loaded(model_info: dict[str, Any], engine, n_gpu_layers: int) -> dict[str, Any]:
    """Log the one start-up line and return its fields."""
    import llama_cpp

    fields = {
        "event": MODEL_LOADED,
        "model": model_info,
        "gpus": gpu_devices(),
        "layers": offloaded_layers(engine, n_gpu_layers),
        "llama_libraries": loaded_llama_libraries(),
        "llama_cpp_package": str(Path(llama_cpp.__file__).parent),
        "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""),
    }
    log.info("model loaded", extra={"fields": fields})
    return fields
