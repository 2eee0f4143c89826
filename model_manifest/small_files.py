"""Reading a small file a model directory holds (the manifest, calibration.json) safely.

Whatever such a path names is read only if it is a regular file, and only up to a bound: a FIFO
would block the start-up until a writer came, a link to /dev/zero would never end, and a 1 GB
"manifest" read whole would hold the memory of one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class SmallFileError(ValueError):
    """The file cannot be read, is not a regular file, or is larger than its bound."""


def read_small_file(path: Path, max_bytes: int, what: str) -> bytes:
    """Its bytes, at most `max_bytes`. Opened without blocking (opening a FIFO blocks until a
    writer comes), then anything but a regular file is refused; FileNotFoundError as it is."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise SmallFileError(f"{path}: not a regular file")
            data = file.read(max_bytes + 1)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise SmallFileError(f"{path}: {error.strerror or error}") from None
    if len(data) > max_bytes:
        raise SmallFileError(f"{path}: over {max_bytes} bytes, not {what}")
    return data
