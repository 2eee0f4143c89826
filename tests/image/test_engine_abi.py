"""The bindings' ctypes declarations against the engine they load (tests/support/engine_abi.py):
every struct the adapter passes and every function it calls, read from the llama.cpp tree the
venv's build was compiled from. A bump of either side that moves a field or a parameter fails
here, by name, instead of corrupting memory at run time."""

from __future__ import annotations

import sys
from pathlib import Path

import llama_build
import llama_cpp
import pytest

from tests.support import engine_abi

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "container" / "decision_adapter"


@pytest.fixture(scope="module")
def tree() -> Path:
    record = llama_build.installed_record(Path(sys.executable))
    assert record is not None, "the venv holds no recipe build (make llama)"
    tree = llama_build.CacheEntry(Path(record["cache"])).tree
    assert (tree / "include" / "llama.h").is_file(), f"{tree} is not the compiled tree"
    return tree


@pytest.fixture(scope="module")
def header(tree: Path) -> engine_abi.Header:
    return engine_abi.parse_header(tree)


def test_the_venv_runs_the_pinned_engine(tree: Path):
    record = llama_build.installed_record(Path(sys.executable))
    assert record is not None
    assert record["engine"] == llama_build.ENGINE.build
    assert (tree / "tools" / "server" / "server-decision.cpp").is_file()
    version = (tree / "include" / "llama.h").read_text()
    assert "#define LLAMA_STATE_SEQ_VERSION 4" in version


def test_every_struct_the_adapter_passes_has_the_compiled_layout(tree, header):
    compiled = engine_abi.compiled_layouts(tree, header)
    assert set(compiled) == set(engine_abi.STRUCTS)
    assert engine_abi.struct_differences(compiled, llama_cpp) == []
    # The layouts are real readings, not empty: llama_batch has its seven fields.
    assert [f.name for f in compiled["llama_batch"].fields] == [
        "n_tokens",
        "token",
        "embd",
        "pos",
        "n_seq_id",
        "seq_id",
        "logits",
    ]


def test_every_function_the_adapter_calls_has_the_declared_signature(header):
    called = engine_abi.called_functions(ADAPTER.rglob("*.py"), llama_cpp)
    assert {"llama_decode", "llama_init_from_model", "llama_state_seq_get_data"} <= called
    assert engine_abi.function_differences(header, llama_cpp, called) == []


def changed_tree(tree: Path, directory: Path, old: str, new: str) -> Path:
    """A tree whose llama.h has `old` replaced by `new` once (ggml's headers the real ones),
    as a future llama.cpp might change it."""
    changed = directory / "tree"
    (changed / "include").mkdir(parents=True)
    (changed / "ggml").symlink_to(tree / "ggml")
    text = (tree / "include" / "llama.h").read_text()
    assert old in text
    (changed / "include" / "llama.h").write_text(text.replace(old, new, 1))
    return changed


def test_a_field_added_to_a_struct_fails_by_name(tree, tmp_path):
    """One more field in llama_context_params: the comparison names the struct."""
    anchor = "    struct llama_context_params {\n"
    changed = changed_tree(tree, tmp_path, anchor, anchor + "        int32_t n_added_upstream;\n")
    header = engine_abi.parse_header(changed)
    compiled = engine_abi.compiled_layouts(changed, header, ["llama_context_params"])
    found = engine_abi.struct_differences(compiled, llama_cpp)
    assert found and all("llama_context_params" in line for line in found)


def test_a_parameter_changed_in_type_fails_by_name(tree, tmp_path):
    before = "LLAMA_API int32_t llama_decode("
    changed = changed_tree(tree, tmp_path, before, before.replace("int32_t", "int64_t"))
    header = engine_abi.parse_header(changed)
    found = engine_abi.function_differences(header, llama_cpp, ["llama_decode"])
    assert found == ["llama_decode: returns int/8 in llama.h, int/4 declared"]
