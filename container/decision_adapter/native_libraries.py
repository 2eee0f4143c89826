"""Which llama.cpp shared libraries the process really bound, logged once at start-up.

The bindings describe one llama.cpp build; a different libllama or libggml picked up through
LD_LIBRARY_PATH (the DLC base image sets one) corrupts memory instead of failing. The dynamic
loader's choice is only visible in the process's own memory map, so it is read from there.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("decision_adapter")
_PREFIXES = ("libllama", "libggml")


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


def log_llama_libraries() -> list[str]:
    """Load llama.cpp's bindings (which load libllama and libggml) and log what was bound."""
    import llama_cpp

    files = loaded_llama_libraries()
    log.info(
        "llama.cpp libraries loaded",
        extra={
            "fields": {
                "llama_libraries": files,
                "llama_cpp_package": str(Path(llama_cpp.__file__).parent),
                "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""),
            }
        },
    )
    return files
