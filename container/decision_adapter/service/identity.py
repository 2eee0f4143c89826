"""The served model's identity, read once at load from its file, manifest and engine."""

from __future__ import annotations

import importlib.metadata
from datetime import UTC, datetime
from typing import Any

from .. import __version__
from ..calibration import Calibration
from ..contract import ModelIdentity, ModelService
from ..model import native_libraries
from ..model.decision_head import DecisionHead
from ..model.engine import Engine
from ..model.files import ModelFile
from ..scoring.prompts import PROMPT_VERSION
from ..settings import Settings

# llama.cpp's `general.file_type` values for the quantizations people actually serve.
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    28: "IQ4_XS",
    32: "BF16",
}


def release_date(model_file: ModelFile) -> str:
    """When this model was packaged (its manifest), else the GGUF file's date."""
    if model_file.manifest is not None:
        return model_file.manifest.created_at.date().isoformat()
    modified = model_file.path.stat().st_mtime
    return datetime.fromtimestamp(modified, UTC).date().isoformat()


def model_identity(
    model_file: ModelFile,
    engine: Engine,
    settings: Settings,
    *,
    prompt_mode: str,
    calibration: Calibration,
    decision_batching: str = "alone",
    decisions_at_once: int = 1,
    chat_batching: str = "alone",
    decision_head: DecisionHead | None = None,
) -> ModelIdentity:
    manifest = model_file.manifest
    name = manifest.model.name if manifest is not None else model_file.path.stem
    file_type = engine.metadata("general.file_type")
    info = {
        "name": name,
        "gguf_file": model_file.path.name,
        "gguf_bytes": model_file.size_bytes,
        "gguf_sha256": model_file.sha256,
        "gguf_source": model_file.source,
        "description": engine.description,
        "architecture": engine.architecture,
        "memory": engine.memory_kind,
        "quantization": FILE_TYPES.get(int(file_type), file_type) if file_type else None,
        "context_tokens": engine.n_ctx,
        "threads": settings.n_threads,
        "gpu_layers": settings.n_gpu_layers,
        "gpu_offload_supported": engine.gpu_offload,
        "prompt_mode": "systemone" if decision_head is not None else prompt_mode,
        # A trained decision model's type and temperatures (model/decision_head.py); None: a
        # generic model, read by a prompt readout.
        "decision_type": decision_head.type if decision_head is not None else None,
        "decision_head": decision_head.as_dict() if decision_head is not None else None,
        # How decisions meet the model (docs/scoring.md, "Requests at once"); either way an
        # answer has the bits of the same request alone.
        "decision_batching": decision_batching,
        "decisions_at_once": decisions_at_once,
        # How chat streams meet the model: `alone` (in the decisions' context), `turns` (a
        # context of their own, a token each in turn) or `shared` (one micro-batch: the last
        # bits of a token's logits follow the streams beside it).
        "chat_batching": chat_batching,
        "manifest": None
        if manifest is None
        else {
            "spec": manifest.spec,
            "manifest_version": manifest.manifest_version,
            "model": manifest.model.model_dump(),
            "tool": manifest.tool.model_dump(),
            "created_at": manifest.created_at.isoformat(),
        },
        "llama_cpp_python_version": importlib.metadata.version("llama-cpp-python"),
        "adapter_version": __version__,
    }
    how = (
        f"{decision_head.type} decision head"
        if decision_head is not None
        else f"{prompt_mode} prompt"
    )
    return ModelIdentity(
        name=name,
        description=f"{engine.description} ({how}), served by llama.cpp",
        release_date=release_date(model_file),
        prompt_version=PROMPT_VERSION,
        calibration=calibration,
        info=info,
    )


def log_model_loaded(service: ModelService, n_gpu_layers: int) -> dict[str, Any]:
    """The one start-up line (model/native_libraries.py) for a service just loaded."""
    engine = getattr(service, "engine", None)  # the in-process test service has none
    # What DECISION_MAX_SCORING_REQUESTS and DECISION_MAX_CHAT_STREAMS reserved at start-up
    # (0: decisions, or chats, one at a time).
    memory = {name: getattr(service, name, 0) for name in ("shared_kv_bytes", "chat_kv_bytes")}
    return native_libraries.log_model_loaded(service.identity.info, engine, n_gpu_layers, memory)
