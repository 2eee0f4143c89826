"""Tiny random-weight models of the families users deploy, each with its family's real
vocabulary and chat template: the suite's model matrix (docs/models.md, "The model matrix").

llama.cpp itself lays out each architecture's tensors: a model is created from metadata alone
(`llama_model_init_from_user`, as llama.cpp's tests/test-llama-archs.cpp does), filled with
seeded noise, saved, and converted to f16 by llama.cpp's quantizer. The metadata is the
family's real tokenizer, copied from `models/ggml-vocab-*.gguf`, its chat template from
`models/templates/`, and a narrow body (64-wide embedding, 2 layers). Both come from the
llama.cpp tree the engine was compiled from (bench.llama_server_build.vendored_llama_cpp).

Built once per machine into ~/.cache/decision-bench/model-matrix-<version>/ (`make models`,
which `make test` runs first; DECISION_BENCH_CACHE moves it), in seconds, no compiler needed.
"""

from __future__ import annotations

import ctypes
import os
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.llama_server_build import engine_version, vendored_llama_cpp
from launcher import cache_root
from tests.support.gguf_variants import with_chat_template

# Bump when a model's recipe changes: the cache directory is keyed by it.
RECIPE = 3
EMBEDDING = 64
LAYERS = 2
HEADS = 2
FEED_FORWARD = 128
CONTEXT = 8192
STDEV = 0.1


@dataclass(frozen=True)
class Family:
    """One model of the matrix: an architecture with a family's vocabulary and template."""

    name: str  # the file's stem and the tests' id
    architecture: str  # general.architecture
    vocabulary: str  # models/ggml-vocab-<vocabulary>.gguf
    template: str | None  # models/templates/<template>.jinja; None: no chat template
    memory: str  # the memory kind the engine reports; for a refused one, what it is
    hparams: Mapping[str, object] = field(default_factory=dict)  # "<architecture>." keys
    served: bool = True  # False: the adapter must refuse it at start-up

    @property
    def file_name(self) -> str:
        return f"{self.name}.gguf"


_ATTENTION = {"attention.head_count_kv": 1, "rope.dimension_count": EMBEDDING // HEADS}
FAMILIES = (
    Family(
        "qwen35",
        "qwen35",
        "qwen35",
        "Qwen3.5-4B",
        "hybrid",
        {
            "full_attention_interval": 2,  # layer 0 Gated DeltaNet, layer 1 attention
            "rope.dimension_sections": [8, 8, 8, 8],
            "ssm.conv_kernel": 4,
            "ssm.state_size": 32,
            "ssm.group_count": 2,
            "ssm.time_step_rank": 2,
            "ssm.inner_size": 64,
        },
    ),
    Family("qwen3", "qwen3", "qwen2", "Qwen-Qwen3-0.6B", "attention", _ATTENTION),
    Family(
        "llama", "llama", "llama-bpe", "meta-llama-Llama-3.2-3B-Instruct", "attention", _ATTENTION
    ),
    Family("phi3", "phi3", "phi-3", "microsoft-Phi-3.5-mini-instruct", "attention", _ATTENTION),
    Family(
        "qwen3moe",
        "qwen3moe",
        "qwen2",
        "Qwen-Qwen3-0.6B",
        "attention",
        {
            **_ATTENTION,
            "expert_count": 4,
            "expert_used_count": 2,
            "expert_feed_forward_length": FEED_FORWARD // 2,
        },
    ),
    # Refused at start-up (Engine: unservable).
    Family(
        "mamba",
        "mamba",
        "gpt-neox",
        None,
        "recurrent",
        {
            "ssm.conv_kernel": 4,
            "ssm.state_size": 16,
            "ssm.time_step_rank": 4,
            "ssm.inner_size": 2 * EMBEDDING,
        },
        served=False,
    ),
    Family(
        "t5encoder",
        "t5encoder",
        "llama-spm",
        None,
        "encoder-only",
        {
            "attention.layer_norm_epsilon": 1e-6,
            "attention.key_length": EMBEDDING // HEADS,
            "attention.value_length": EMBEDDING // HEADS,
            "attention.relative_buckets_count": 8,
        },
        served=False,
    ),
    Family("llada", "llada", "llama-bpe", None, "diffusion", _ATTENTION, served=False),
)
SERVED = tuple(family for family in FAMILIES if family.served)
REFUSED = tuple(family for family in FAMILIES if not family.served)
BY_NAME = {family.name: family for family in FAMILIES}


class MatrixError(RuntimeError):
    """A model of the matrix could not be built; the message says which and why."""


def matrix_directory(root: Path | None = None) -> Path:
    return (root or cache_root()) / f"model-matrix-{engine_version()}-r{RECIPE}"


def llama_cpp_models() -> Path:
    """models/ of the engine's llama.cpp tree: vocabularies, their test texts, templates."""
    return vendored_llama_cpp() / "models"


def vocabulary_file(name: str) -> Path:
    return llama_cpp_models() / f"ggml-vocab-{name}.gguf"


def template_text(name: str) -> str:
    return (llama_cpp_models() / "templates" / f"{name}.jinja").read_text()


def ensure_matrix(root: Path | None = None) -> dict[str, Path]:
    """Every family's GGUF, built now where the cache lacks it; by name."""
    directory = matrix_directory(root)
    paths = {family.name: directory / family.file_name for family in FAMILIES}
    missing = [family for family in FAMILIES if not paths[family.name].is_file()]
    if missing:
        directory.mkdir(parents=True, exist_ok=True)
        for family in missing:
            _build(family, paths[family.name])
    return paths


# --- building one model with llama.cpp -------------------------------------------------------
class _GgufInitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


_GGUF_TYPE_UINT32 = 4  # ggml's enum gguf_type


def _ggml():
    """ggml-base's GGUF and tensor functions, from the library llama-cpp-python ships."""
    import llama_cpp._ctypes_extensions as extensions

    lib = extensions.load_shared_library("ggml-base", Path(extensions.__file__).parent / "lib")
    signatures = {
        "gguf_init_empty": ([], ctypes.c_void_p),
        "gguf_init_from_file": ([ctypes.c_char_p, _GgufInitParams], ctypes.c_void_p),
        "gguf_free": ([ctypes.c_void_p], None),
        "gguf_set_kv": ([ctypes.c_void_p, ctypes.c_void_p], None),
        "gguf_get_n_kv": ([ctypes.c_void_p], ctypes.c_int64),
        "gguf_get_key": ([ctypes.c_void_p, ctypes.c_int64], ctypes.c_char_p),
        "gguf_remove_key": ([ctypes.c_void_p, ctypes.c_char_p], ctypes.c_int64),
        "gguf_set_val_u32": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32], None),
        "gguf_set_val_f32": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_float], None),
        "gguf_set_val_bool": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_bool], None),
        "gguf_set_val_str": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p], None),
        "gguf_set_arr_data": (
            [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t],
            None,
        ),
        "ggml_get_name": ([ctypes.c_void_p], ctypes.c_char_p),
        "ggml_nelements": ([ctypes.c_void_p], ctypes.c_int64),
        "ggml_nbytes": ([ctypes.c_void_p], ctypes.c_size_t),
        "ggml_backend_tensor_set": (
            [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t],
            None,
        ),
    }
    for name, (arguments, result) in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = arguments, result
    return lib


def _metadata(ggml, family: Family) -> int:
    """A GGUF context holding the family's tokenizer, template and hyperparameters."""
    vocabulary = ggml.gguf_init_from_file(
        str(vocabulary_file(family.vocabulary)).encode(), _GgufInitParams(True, None)
    )
    if not vocabulary:
        raise MatrixError(f"{family.name}: cannot read {vocabulary_file(family.vocabulary)}")
    context = ggml.gguf_init_empty()
    ggml.gguf_set_kv(context, vocabulary)
    ggml.gguf_free(vocabulary)
    keys = [ggml.gguf_get_key(context, i).decode() for i in range(ggml.gguf_get_n_kv(context))]
    for key in keys:  # the vocabulary file's own model and template go
        if not key.startswith("tokenizer.") or key == "tokenizer.chat_template":
            ggml.gguf_remove_key(context, key.encode())
    arch = family.architecture
    ggml.gguf_set_val_str(context, b"general.architecture", arch.encode())
    ggml.gguf_set_val_str(context, b"general.name", f"matrix-{family.name}".encode())
    body = {
        "context_length": CONTEXT,
        "embedding_length": EMBEDDING,
        "block_count": LAYERS,
        "feed_forward_length": FEED_FORWARD,
        "attention.head_count": HEADS,
        "attention.layer_norm_rms_epsilon": 1e-5,
        "rope.freq_base": 10000.0,
        **family.hparams,
    }
    for key, value in body.items():
        full = f"{arch}.{key}".encode()
        if isinstance(value, bool):
            ggml.gguf_set_val_bool(context, full, value)
        elif isinstance(value, int):
            ggml.gguf_set_val_u32(context, full, value)
        elif isinstance(value, float):
            ggml.gguf_set_val_f32(context, full, value)
        else:
            array = (ctypes.c_uint32 * len(value))(*value)
            ggml.gguf_set_arr_data(context, full, _GGUF_TYPE_UINT32, array, len(value))
    return context


def _build(family: Family, target: Path) -> None:
    import llama_cpp
    from decision_adapter.model.engine import silence_llama_logs

    silence_llama_logs()
    ggml = _ggml()

    not_f32: list[bytes] = []  # an exception cannot cross llama.cpp's frames: noted instead

    @llama_cpp.llama_model_set_tensor_data_t
    def fill(tensor, _user_data):
        name = ggml.ggml_get_name(tensor)
        count = ggml.ggml_nelements(tensor)
        values = np.random.default_rng(zlib.crc32(name)).normal(0.0, STDEV, count)
        if b"ssm_a" in name:  # a recurrent state must decay
            values = -np.abs(values)
        data = np.ascontiguousarray(values, dtype=np.float32)
        if data.nbytes != ggml.ggml_nbytes(tensor):  # llama.cpp creates them f32
            not_f32.append(name)
            return
        ggml.ggml_backend_tensor_set(tensor, data.ctypes.data, 0, data.nbytes)

    context = _metadata(ggml, family)
    parameters = llama_cpp.llama_model_default_params()
    parameters.n_gpu_layers = 0
    model = llama_cpp.llama_model_init_from_user(context, fill, None, parameters)
    ggml.gguf_free(context)
    if not model or not_f32:
        raise MatrixError(f"{family.name}: llama.cpp could not create the model {not_f32}")
    f32 = target.with_suffix(".f32.tmp")
    partial = target.with_suffix(".f16.tmp")
    try:
        llama_cpp.llama_model_save_to_file(model, str(f32).encode())
        llama_cpp.llama_model_free(model)
        quantize = llama_cpp.llama_model_quantize_default_params()
        quantize.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
        quantize.nthread = 1
        if llama_cpp.llama_model_quantize(
            str(f32).encode(), str(partial).encode(), ctypes.byref(quantize)
        ):
            raise MatrixError(f"{family.name}: llama.cpp could not convert it to f16")
        if family.template is None:
            os.replace(partial, target)  # whole or absent, for a concurrent reader
            return
        # llama.cpp's saver writes the vocabulary it loaded but not the chat template.
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            templated = with_chat_template(partial, Path(scratch), template_text(family.template))
            os.replace(templated, target)
    finally:
        f32.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)


if __name__ == "__main__":
    for name, path in ensure_matrix().items():
        print(f"{name}: {path} ({path.stat().st_size >> 20} MiB)")
