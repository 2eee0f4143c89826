"""Tiny random-weight decision models (`<arch>.decision.type`), one per type that llama.cpp's
llama-server answers on POST /v1/systemone (research/decision_models/README.md is the spec).

Each model is built the way tests/support/model_matrix.py builds the matrix: llama.cpp lays the
architecture's tensors out from metadata alone (`llama_model_init_from_user`), seeded noise
fills them, llama.cpp saves the file. Its vocabulary is a real one from the engine's tree
(`models/ggml-vocab-*.gguf`). llama.cpp's saver writes neither chat templates nor the
`decision.*` keys nor the mask token id, so the saved header is then rewritten (weights copied
as bytes) with what the published GGUFs carry: the key names come from the tree's own gguf-py
(`gguf-py/gguf/constants.py`: `Keys.Decision`, `Keys.Tokenizer.CHAT_TEMPLATE_N`), and the
`systemone` template is rendered by the tree's own conversion code (`conversion/{qwen,lev,bert,
clef}.py`, `_systemone_template`), read from the source without importing it (it needs torch
and transformers, which the venv does not have).

    build(kind, directory) -> Path     one GGUF, in seconds
    TYPES                              the kinds that build and serve

Kinds: openjev, lev, nimble (Qwen3.5 torso and vocabulary, label logits), kev (Qwen3.5 with
the pointer head `classifier.out_proj`, 2 x 16 wide), laya and julia (ModernBERT encoder with a
decision head, BERT WordPiece vocabulary: [CLS] [SEP] [MASK]). UNSERVED lists the ones this
llama.cpp cannot serve and why (clef: see the README; pplx-decider, lfm2-d1: not in the tree).
"""

from __future__ import annotations

import ast
import ctypes
import dataclasses
import importlib.util
import json
import mmap
import shutil
import struct
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.llama_server_build import vendored_llama_cpp
from tests.support import model_matrix
from tests.support.model_matrix import EMBEDDING, FEED_FORWARD, STDEV, Family

KEV_HEAD_DIM = 16  # the published kev has 256; n_embd_out = 2 * head_dim
LAYA_MAX_HEAD_TOKENS = 256  # conversion/bert.py: head_max_len, default 256
_GGUF_ALIGNMENT_KEY = "general.alignment"
_GGUF_DEFAULT_ALIGNMENT = 32


class DecisionModelError(RuntimeError):
    """A decision model could not be built; the message says which and why."""


# --- the tree's own gguf-py constants and conversion templates -------------------------------
def tree() -> Path:
    return vendored_llama_cpp()


_constants_module = None


def gguf_constants():
    """The tree's gguf-py/gguf/constants.py, loaded on its own (the venv's gguf 0.19.0 from PyPI
    has no decision keys, and importing the tree's whole package would shadow it)."""
    global _constants_module
    if _constants_module is None:
        path = tree() / "gguf-py" / "gguf" / "constants.py"
        spec = importlib.util.spec_from_file_location("_tree_gguf_constants", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _constants_module = module
    return _constants_module


def _module_function(file: Path, name: str):
    source = file.read_text()
    node = next(
        n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name
    )
    namespace: dict = {}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(file), "exec"), namespace)
    return namespace[name]


def conversion_class(file: str, name: str) -> type:
    """The class `name` of conversion/`file`, reduced to its private constants (the system
    prompt, letters, temperatures), `_systemone_template` and `_json`: exactly the text that
    converts the published checkpoints, run without torch."""
    path = tree() / "conversion" / file
    cls = next(
        n
        for n in ast.parse(path.read_text()).body
        if isinstance(n, ast.ClassDef) and n.name == name
    )
    kept = [
        n
        for n in cls.body
        if (
            isinstance(n, ast.Assign)
            and all(isinstance(t, ast.Name) and t.id.startswith("_") for t in n.targets)
        )
        or (isinstance(n, ast.FunctionDef) and n.name in ("_systemone_template", "_json"))
    ]
    reduced = ast.ClassDef(name=name, bases=[], keywords=[], body=kept, decorator_list=[])
    module = ast.fix_missing_locations(ast.Module(body=[reduced], type_ignores=[]))
    namespace = {
        "json": json,
        "jinja_str_or_json": _module_function(
            tree() / "conversion" / "base.py", "jinja_str_or_json"
        ),
    }
    exec(compile(module, str(path), "exec"), namespace)
    return namespace[name]


def _bert_template(architecture: str | None) -> str:
    """conversion/bert.py ModernBertDecisionModel: the template reads the checkpoint's
    tokenizer_config.json (cls/sep/mask token texts) and its decision config's architecture
    ("JuliaDecisionModel" for Julia-1)."""
    cls = conversion_class("bert.py", "ModernBertDecisionModel")
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "tokenizer").mkdir()
        (Path(scratch) / "tokenizer" / "tokenizer_config.json").write_text(
            json.dumps({"cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"})
        )
        model = cls.__new__(cls)
        model.dir_model = Path(scratch)
        model.hparams = {"decision": {"architecture": architecture}}
        return model._systemone_template()


def systemone_template(kind: str) -> str:
    """The `systemone` template the tree's conversion code writes for this kind."""
    if kind == "openjev":
        cls = conversion_class("qwen.py", "OpenJevModel")
    elif kind == "lev":
        cls = conversion_class("lev.py", "LevModel")
    elif kind == "kev":
        cls = conversion_class("lev.py", "KevModel")
    elif kind == "nimble":
        cls = conversion_class("lev.py", "NimbleModel")
    elif kind == "clef":
        return conversion_class("clef.py", "ClefModel")._systemone_template()
    elif kind == "laya":
        return _bert_template(None)
    elif kind == "julia":
        return _bert_template("JuliaDecisionModel")
    else:
        raise DecisionModelError(f"no systemone template for {kind!r}")
    return cls._systemone_template(cls)


# --- the kinds ------------------------------------------------------------------------------
_QWEN35 = model_matrix.BY_NAME["qwen35"]


@dataclass(frozen=True)
class Kind:
    name: str  # the kind, and the file's stem
    decision_type: str  # <arch>.decision.type
    family: Family  # architecture, vocabulary, body (model_matrix's recipe)
    temperatures: dict[str, float] = field(default_factory=dict)  # decision.temperature.<name>
    default_template: str | None = None  # models/templates/<name>.jinja as tokenizer.chat_template
    extra_tokenizer_u32: dict[str, int] = field(default_factory=dict)  # set before creating it


def _openjev_temperatures() -> dict[str, float]:
    cls = conversion_class("qwen.py", "OpenJevModel")  # conversion/qwen.py:707-712
    return {
        "choice": cls._TEMPERATURE,
        "score": cls._TEMPERATURE,
        "noul": cls._TEMPERATURE * cls._TEMPERATURE_NOUL,
    }


def _qwen35(name: str, **hparams) -> Family:
    return Family(
        name,
        "qwen35",
        "qwen35",
        None,
        "hybrid",
        {**_QWEN35.hparams, **hparams},
    )


_ENCODER_LAYERS = 2
_HEAD_LAYERS = 1


def _modern_bert(name: str) -> Family:
    return Family(
        name,
        "modern-bert",
        "bert-bge",
        None,
        "encoder-only",
        {
            # model_matrix's body is 2 layers; the decision head's blocks come after the encoder's
            "block_count": _ENCODER_LAYERS + _HEAD_LAYERS,
            "feed_forward_length": [FEED_FORWARD] * _ENCODER_LAYERS
            + [4 * EMBEDDING] * _HEAD_LAYERS,
            "attention.layer_norm_epsilon": 1e-5,
            "attention.causal": False,
            "decision.block_count": _HEAD_LAYERS,
        },
    )


def _kinds() -> dict[str, Kind]:
    return {
        "openjev": Kind(
            "openjev",
            "openjev",
            _qwen35("decision-openjev"),
            _openjev_temperatures(),
            "Qwen3.5-4B",
        ),
        "lev": Kind(
            "lev",
            "lev",
            _qwen35("decision-lev"),
            # the names conversion/lev.py:141-148 writes from calibration.json ("choice:A:small")
            {"choice.small": 1.1, "choice.mid": 1.2, "score.small": 1.05, "noul": 0.9},
            "Qwen3.5-4B",
        ),
        "nimble": Kind("nimble", "nimble", _qwen35("decision-nimble"), {}, "Qwen3.5-4B"),
        "kev": Kind(
            "kev",
            "kev",
            _qwen35("decision-kev", embedding_length_out=2 * KEV_HEAD_DIM),
            # conversion/lev.py:200-201: one temperature (head.pt) for the three types
            {"choice": 1.3, "score": 1.3, "noul": 1.3},
            "Qwen3.5-4B",
        ),
        "laya": Kind(
            "laya",
            "laya",
            _modern_bert("decision-laya"),
            # conversion/bert.py:721-725: per type, then per option-count bucket
            {"choice": 1.2, "score": 1.1, "noul": 1.0, "choice.3_5": 1.4, "score.3_5": 0.9},
            None,
            {"tokenizer.ggml.token_type_count": 3},  # one token type per question type
        ),
        "julia": Kind(
            "julia",
            "laya",  # Julia-1 converts to the laya type (conversion/bert.py:678-725)
            _modern_bert("decision-julia"),
            {"choice": 1.2, "score": 1.1, "noul": 1.0},
            None,
            {"tokenizer.ggml.token_type_count": 3},
        ),
    }


KINDS = _kinds()
TYPES = tuple(KINDS)
UNSERVED = {
    "clef": "its head's widths are read from tensors in the file (src/models/clef.cpp:31-36, "
    "llama_model_loader::get_weight): llama_model_init_from_user stops with 'the decision head "
    "is missing'; and llama-server feeds it through llama_batch_ext_set_decision_order, a C++ "
    "symbol of src/llama-ext.h",
    "pplx-decider": "not a decision type of this tree (common/common.cpp:1165-1172): "
    "llama-server refuses to load it, 'unsupported decision model type'",
    "lfm2-d1": "not a decision type of this tree (common/common.cpp:1165-1172): "
    "llama-server refuses to load it, 'unsupported decision model type'",
}


# --- building --------------------------------------------------------------------------------
def build(
    kind: str,
    directory: Path,
    *,
    decision_type: str | None = None,
    shape: Mapping[str, object] | None = None,
) -> Path:
    """Write `directory/decision-<kind>.gguf` and return its path. `decision_type` overrides
    the `<arch>.decision.type` written (for refusals: an unknown type); `shape` overrides the
    body's hyperparameters (`embedding_length`, `block_count`, ...: a model of a realistic
    size for benchmarks)."""
    if kind not in KINDS:
        raise DecisionModelError(f"{kind}: not a kind that builds ({UNSERVED.get(kind, '?')})")
    spec = KINDS[kind]
    if shape:
        family = dataclasses.replace(spec.family, hparams={**spec.family.hparams, **shape})
        spec = dataclasses.replace(spec, family=family)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"decision-{kind}.gguf"
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        saved = Path(scratch) / "saved.gguf"
        created = _create(spec, saved)
        _rewrite(
            saved, target, _decision_metadata(spec, decision_type or spec.decision_type), created
        )
    return target


class _GgmlTensorHead(ctypes.Structure):  # the start of ggml.h's struct ggml_tensor
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4)]


def _values(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor's seeded noise, f32, ggml's order (ne[0] fastest)."""
    count = int(np.prod(shape))
    values = np.random.default_rng(zlib.crc32(name.encode())).normal(0.0, STDEV, count)
    if "ssm_a" in name:  # a recurrent state must decay
        values = -np.abs(values)
    if name.endswith("norm.weight"):  # layer norms near 1, as trained ones are
        values = 1.0 + values
    if name.endswith("scale"):  # optional per-tensor scales llama.cpp creates: neutral
        values = np.ones(count)
    return np.ascontiguousarray(values, dtype=np.float32)


def _create(spec: Kind, target: Path) -> dict[str, tuple[int, ...]]:
    """llama.cpp lays the architecture out from the metadata; seeded noise fills it; saved f32.
    Returns every tensor llama.cpp created, by name, with its shape (ne)."""
    created: dict[str, tuple[int, ...]] = {}
    import llama_cpp
    from decision_adapter.model.engine import silence_llama_logs

    silence_llama_logs()
    ggml = model_matrix._ggml()
    not_f32: list[bytes] = []

    @llama_cpp.llama_model_set_tensor_data_t
    def fill(tensor, _user_data):
        name = ggml.ggml_get_name(tensor)
        shape = tuple(_GgmlTensorHead.from_address(tensor).ne)
        data = _values(name.decode(), shape)
        created[name.decode()] = shape
        if data.nbytes != ggml.ggml_nbytes(tensor):
            not_f32.append(name)
            return
        ggml.ggml_backend_tensor_set(tensor, data.ctypes.data, 0, data.nbytes)

    context = model_matrix._metadata(ggml, spec.family)
    if spec.family.vocabulary == "qwen35":
        _name_qwen_added_tokens(ggml, context)
    for key, value in spec.extra_tokenizer_u32.items():
        ggml.gguf_set_val_u32(context, key.encode(), value)
    parameters = llama_cpp.llama_model_default_params()
    parameters.n_gpu_layers = 0
    model = llama_cpp.llama_model_init_from_user(context, fill, None, parameters)
    ggml.gguf_free(context)
    if not model or not_f32:
        raise DecisionModelError(f"{spec.name}: llama.cpp could not create the model {not_f32}")
    try:
        llama_cpp.llama_model_save_to_file(model, str(target).encode())
    finally:
        llama_cpp.llama_model_free(model)
    return created


# The tree's ggml-vocab-qwen35.gguf holds Qwen2's 151,936 entries with only <|endoftext|>,
# <|im_start|> and <|im_end|> named; ids 151646-151935 are "[PAD<id>]" placeholders. The Qwen
# models the decision models start from name the first of them (tokenizer_config.json,
# added_tokens_decoder of Qwen2.5 and Qwen3): kev reads <|box_end|>, its template writes
# <|fim_prefix|> <|fim_middle|> <|fim_suffix|> <|box_start|>, the others end with <think></think>.
QWEN_ADDED_TOKENS = {
    151646: ("<|object_ref_start|>", 3),
    151647: ("<|object_ref_end|>", 3),
    151648: ("<|box_start|>", 3),
    151649: ("<|box_end|>", 3),
    151650: ("<|quad_start|>", 3),
    151651: ("<|quad_end|>", 3),
    151652: ("<|vision_start|>", 3),
    151653: ("<|vision_end|>", 3),
    151654: ("<|vision_pad|>", 3),
    151655: ("<|image_pad|>", 3),
    151656: ("<|video_pad|>", 3),
    151657: ("<tool_call>", 4),
    151658: ("</tool_call>", 4),
    151659: ("<|fim_prefix|>", 3),
    151660: ("<|fim_middle|>", 3),
    151661: ("<|fim_suffix|>", 3),
    151662: ("<|fim_pad|>", 3),
    151663: ("<|repo_name|>", 3),
    151664: ("<|file_sep|>", 3),
    151665: ("<tool_response>", 4),
    151666: ("</tool_response>", 4),
    151667: ("<think>", 4),
    151668: ("</think>", 4),
}  # 3: CONTROL, 4: USER_DEFINED (llama.cpp's token types)
_GGUF_INT32 = 5


def _name_qwen_added_tokens(ggml, context: int) -> None:
    signatures = {
        "gguf_find_key": ([ctypes.c_void_p, ctypes.c_char_p], ctypes.c_int64),
        "gguf_get_arr_n": ([ctypes.c_void_p, ctypes.c_int64], ctypes.c_size_t),
        "gguf_get_arr_str": ([ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t], ctypes.c_char_p),
        "gguf_get_arr_data": ([ctypes.c_void_p, ctypes.c_int64], ctypes.c_void_p),
        "gguf_set_arr_str": (
            [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t],
            None,
        ),
    }
    for name, (arguments, result) in signatures.items():
        function = getattr(ggml, name)
        function.argtypes, function.restype = arguments, result
    tokens_id = ggml.gguf_find_key(context, b"tokenizer.ggml.tokens")
    types_id = ggml.gguf_find_key(context, b"tokenizer.ggml.token_type")
    count = ggml.gguf_get_arr_n(context, tokens_id)
    tokens = [ggml.gguf_get_arr_str(context, tokens_id, i) for i in range(count)]
    types = np.ctypeslib.as_array(
        ctypes.cast(ggml.gguf_get_arr_data(context, types_id), ctypes.POINTER(ctypes.c_int32)),
        (count,),
    ).copy()
    for token_id, (text, kind) in QWEN_ADDED_TOKENS.items():
        if tokens[token_id] != f"[PAD{token_id}]".encode():
            raise DecisionModelError(f"qwen35 vocabulary: id {token_id} is {tokens[token_id]!r}")
        tokens[token_id], types[token_id] = text.encode(), kind
    ggml.gguf_set_arr_str(
        context, b"tokenizer.ggml.tokens", (ctypes.c_char_p * count)(*tokens), count
    )
    ggml.gguf_set_arr_data(
        context, b"tokenizer.ggml.token_type", _GGUF_INT32, types.ctypes.data, count
    )


def _decision_metadata(spec: Kind, decision_type: str) -> list[tuple[str, int, object]]:
    """(key, GGUF value type, value) for what the saver drops: the decision keys, the chat
    templates, and (a BERT vocabulary) the mask token id."""
    constants = gguf_constants()
    keys, kinds = constants.Keys, constants.GGUFValueType
    arch = spec.family.architecture
    entries: list[tuple[str, int, object]] = [
        (keys.Decision.TYPE.format(arch=arch), kinds.STRING, decision_type)
    ]
    for name, value in spec.temperatures.items():
        entries.append(
            (keys.Decision.TEMPERATURE.format(arch=arch, name=name), kinds.FLOAT32, value)
        )
    if spec.family.architecture == "modern-bert":
        entries += [
            (keys.Decision.BLOCK_COUNT.format(arch=arch), kinds.UINT32, _HEAD_LAYERS),
            (keys.Decision.MAX_HEAD_TOKENS.format(arch=arch), kinds.UINT32, LAYA_MAX_HEAD_TOKENS),
        ]
        mask = _vocabulary_u32(spec.family.vocabulary, keys.Tokenizer.MASK_ID)
        entries.append((keys.Tokenizer.MASK_ID, kinds.UINT32, mask))
    if spec.default_template is not None:
        entries.append(
            (
                keys.Tokenizer.CHAT_TEMPLATE,
                kinds.STRING,
                model_matrix.template_text(spec.default_template),
            )
        )
    entries += [
        (
            keys.Tokenizer.CHAT_TEMPLATE_N.format(name="systemone"),
            kinds.STRING,
            systemone_template(spec.name),
        ),
        (keys.Tokenizer.CHAT_TEMPLATES, kinds.ARRAY, ["systemone"]),
    ]
    return entries


def _vocabulary_u32(vocabulary: str, key: str) -> int:
    ggml = model_matrix._ggml()
    ggml.gguf_find_key.argtypes, ggml.gguf_find_key.restype = (
        [ctypes.c_void_p, ctypes.c_char_p],
        ctypes.c_int64,
    )
    ggml.gguf_get_val_u32.argtypes, ggml.gguf_get_val_u32.restype = (
        [ctypes.c_void_p, ctypes.c_int64],
        ctypes.c_uint32,
    )
    path = model_matrix.vocabulary_file(vocabulary)
    context = ggml.gguf_init_from_file(str(path).encode(), model_matrix._GgufInitParams(True, None))
    try:
        index = ggml.gguf_find_key(context, key.encode())
        if index < 0:
            raise DecisionModelError(f"{path.name} has no {key}")
        return int(ggml.gguf_get_val_u32(context, index))
    finally:
        ggml.gguf_free(context)


# --- rewriting a GGUF header (spec: ggml/docs/gguf.md), the weights copied as bytes ------------
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32, _FLOAT32 = 8, 9, 4, 6


def _string(text: str) -> bytes:
    encoded = text.encode()
    return struct.pack("<Q", len(encoded)) + encoded


def _value(kind: int, value) -> bytes:
    if kind == _STRING:
        return _string(value)
    if kind == _UINT32:
        return struct.pack("<I", value)
    if kind == _FLOAT32:
        return struct.pack("<f", value)
    if kind == _ARRAY:  # of strings
        return struct.pack("<IQ", _STRING, len(value)) + b"".join(_string(v) for v in value)
    raise DecisionModelError(f"GGUF value type {kind} is not written here")


def _rewrite(
    source: Path,
    target: Path,
    entries: list[tuple[str, int, object]],
    created: dict[str, tuple[int, ...]],
) -> None:
    """`source` with `entries` set (replacing keys of the same name), and the tensors of
    `created` that llama.cpp's saver left out appended (f32, their seeded noise). The saver
    (src/llama-model-saver.cpp, add_tensors_from_model) writes token_embd only beside a separate
    output matrix, and never cls.norm.bias: an encoder such as ModernBERT loses both."""
    replaced = {key for key, _, _ in entries}
    with source.open("rb") as src, mmap.mmap(src.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        offset = 0

        def take(layout: str) -> tuple:
            nonlocal offset
            values = struct.unpack_from("<" + layout, buf, offset)
            offset += struct.calcsize("<" + layout)
            return values

        def skip_string() -> bytes:
            nonlocal offset
            (length,) = take("Q")
            offset += length
            return bytes(buf[offset - length : offset])

        magic, version, n_tensors, n_kv = take("IIQQ")
        kept, alignment = [], _GGUF_DEFAULT_ALIGNMENT
        for _ in range(n_kv):
            start = offset
            key = skip_string().decode()
            (kind,) = take("I")
            if key == _GGUF_ALIGNMENT_KEY:
                (alignment,) = take("I")
            elif kind == _STRING:
                skip_string()
            elif kind == _ARRAY:
                item, count = take("IQ")
                if item == _STRING:
                    for _ in range(count):
                        skip_string()
                else:
                    offset += count * _SCALAR_BYTES[item]
            else:
                offset += _SCALAR_BYTES[kind]
            if key not in replaced:
                kept.append(buf[start:offset])
        index_start, saved = offset, set()
        for _ in range(n_tensors):
            saved.add(skip_string().decode())
            (n_dims,) = take("I")
            offset += 8 * n_dims + 4 + 8
        index = buf[index_start:offset]
        data_start = -(-offset // alignment) * alignment
        added = [
            _string(key) + struct.pack("<I", kind) + _value(kind, value)
            for key, kind, value in entries
        ]
        missing = {name: shape for name, shape in created.items() if name not in saved}
        data_end = -(-(len(buf) - data_start) // alignment) * alignment
        extra_index, extra_data = [], []
        for name, shape in missing.items():
            data = _values(name, shape).tobytes()
            dims = list(shape)
            while len(dims) > 1 and dims[-1] == 1:
                dims.pop()
            extra_index.append(
                _string(name)
                + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, 0, data_end)  # 0: f32
            )
            extra_data.append(data + b"\0" * (-len(data) % alignment))
            data_end += len(extra_data[-1])
        partial = target.with_suffix(".partial")
        with partial.open("wb") as out:
            out.write(
                struct.pack(
                    "<IIQQ", magic, version, n_tensors + len(missing), len(kept) + len(added)
                )
            )
            out.writelines([*kept, *added, index, *extra_index])
            out.write(b"\0" * (-out.tell() % alignment))
            src.seek(data_start)
            shutil.copyfileobj(src, out, 16 << 20)
            out.write(b"\0" * (-(out.tell()) % alignment))
            out.writelines(extra_data)
        partial.replace(target)


# --- asking llama-server ---------------------------------------------------------------------
STATE = "I was charged twice for my order last week and nobody has replied."
QUESTIONS = {
    "angry": {"type": "noul", "instructions": "Is the customer angry?"},
    "route": {
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": {"billing": "payments and refunds", "shipping": None, "technical": None},
    },
    "urgency": {
        "type": "score",
        "instructions": "How urgent is this?",
        "criteria": ["can wait", "this week", "right now"],
    },
}


def check_answers(body: dict, questions: dict = QUESTIONS) -> None:
    """A valid System One response (REFERENCE.md section 4) for `questions`."""
    answers = body["answers"]
    assert list(answers) == list(questions)
    assert body["usage"]["input_tokens"] > 0 and body["usage"]["output_tokens"] == 0
    for qid, question in questions.items():
        answer = answers[qid]
        assert answer["type"] == question["type"]
        if question["type"] == "noul":
            assert 0.0 <= answer["noul"] <= 1.0
            continue
        probabilities = answer["probabilities"]
        assert abs(sum(probabilities.values()) - 1.0) < 1e-4
        assert 0.0 <= answer["confidence"] <= 1.0
        if question["type"] == "choice":
            assert list(probabilities) == list(question["criteria"])
            assert answer["choice"] == max(probabilities, key=probabilities.get)
        else:
            levels = question["criteria"]
            assert list(probabilities) == [str(i) for i in range(len(levels))]
            assert answer["legend"] == {str(i): text for i, text in enumerate(levels)}
            expected = sum(i * p for i, p in enumerate(probabilities.values()))
            assert abs(answer["score"] - expected) < 1e-6


if __name__ == "__main__":  # build every kind, ask llama-server, print the answers
    import contextlib
    import sys
    import time

    import httpx

    from bench.llama_server import ServerSettings, running_llama_server
    from bench.llama_server_build import ensure_llama_server

    binary = ensure_llama_server().binary
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    for kind in sys.argv[2:] or TYPES:
        started = time.monotonic()
        path = build(kind, out)
        built = time.monotonic() - started
        for parallel in (1, 4):
            with contextlib.ExitStack() as stack:
                server = stack.enter_context(
                    running_llama_server(
                        binary, path, ServerSettings(threads=2, n_ctx=4096, parallel=parallel), out
                    )
                )
                reply = httpx.post(
                    f"{server.url}/v1/systemone",
                    json={"state": STATE, "questions": QUESTIONS},
                    timeout=60,
                )
                print(
                    f"== {kind} (built in {built:.1f} s, {path.stat().st_size >> 20} MiB), "
                    f"--parallel {parallel}: HTTP {reply.status_code}"
                )
                print(json.dumps(reply.json(), indent=1))
