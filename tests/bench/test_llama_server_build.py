"""Building llama-server for the bench: a cached binary is reused, a failed step comes back as
a reason (never an exception), and the run then skips the comparison saying why."""

import contextlib
import sys
from pathlib import Path

import llama_build
import llama_cpp

from bench.llama_server import ServerSettings, built_cpu_features, cpu_features, start_beside
from bench.llama_server_build import (
    CMAKE_FLAGS,
    Build,
    BuildFailed,
    _step,
    cmake_flags,
    ensure_llama_server,
    recipe_entry,
    vendored_llama_cpp,
)
from bench.report import llama_server_table


def test_the_server_comes_from_the_build_of_the_venvs_bindings():
    """llama-server is built in the recipe's own cache entry, the one the venv's record names:
    the same tree and flags as the libllama the adapter loads."""
    record = llama_build.installed_record(Path(sys.executable))
    assert record is not None, "the venv's llama-cpp-python was not installed by the recipe"
    assert record["cmake_args"] == llama_build.local_cmake_args()
    entry = recipe_entry()
    assert entry.directory == Path(record["cache"])
    assert entry.server().is_relative_to(entry.build)
    assert vendored_llama_cpp() == entry.tree
    assert (entry.tree / "tools" / "server" / "server-decision.cpp").is_file()


def test_a_venv_without_a_recipe_build_is_a_reason_not_an_exception(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-venv" / "bin" / "python"))
    build = ensure_llama_server()
    assert build.binary is None
    assert "no build of the recipe" in build.reason


def test_standalone_builds_take_the_recipes_cpu_flags():
    flags = cmake_flags()
    assert flags[: len(CMAKE_FLAGS)] == list(CMAKE_FLAGS)
    assert flags[len(CMAKE_FLAGS) :] == llama_build.local_cmake_args()


def test_a_failed_step_names_itself_with_its_log_tail(tmp_path):
    log = tmp_path / "build.log"
    failing = [sys.executable, "-c", "print('no compiler here'); raise SystemExit(3)"]
    try:
        _step("cmake configure", failing, log)
    except BuildFailed as error:
        message = str(error)
    else:
        raise AssertionError("a failing step must raise BuildFailed")
    assert message.startswith("cmake configure failed (exit 3")
    assert "no compiler here" in message
    assert str(log) in message


def test_a_missing_build_skips_the_comparison_with_its_reason(tmp_path):
    build = Build("9.9.9", tmp_path, reason="cmake build failed (exit 1): out of memory")
    with contextlib.ExitStack() as stack:
        server, info = start_beside(stack, build, tmp_path / "model.gguf", 2, tmp_path)
    assert server is None
    assert info["skipped_reason"] == build.reason
    assert info["build"]["binary"] is None
    assert llama_server_table(info) == [
        "Side by side with llama-server: skipped (cmake build failed (exit 1): out of memory)."
    ]


def test_a_binary_that_does_not_start_skips_with_its_log(tmp_path):
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\necho 'error: unknown argument' >&2\nexit 1\n")
    binary.chmod(0o755)
    build = Build("9.9.9", tmp_path, binary=binary)
    with contextlib.ExitStack() as stack:
        server, info = start_beside(stack, build, tmp_path / "model.gguf", 2, tmp_path)
    assert server is None
    assert "did not start" in info["skipped_reason"]
    assert "unknown argument" in info["skipped_reason"]


def test_server_settings_mirror_the_adapter_engine():
    arguments = ServerSettings(threads=2).arguments()
    pairs = dict(zip(arguments[::2], arguments[1::2], strict=False))
    assert pairs["--threads"] == pairs["--threads-batch"] == "2"
    assert pairs["--batch-size"] == pairs["--ubatch-size"] == "512"
    assert pairs["--ctx-size"] == "8192"
    assert "--swa-full" in arguments and "--flash-attn" in arguments
    assert arguments[arguments.index("--parallel") + 1] == "1"


def test_cpu_features_read_the_same_from_the_binding_and_a_server_log():
    ours = cpu_features(llama_cpp.llama_print_system_info().decode())
    assert ours and " = 1" in ours
    log = (
        "main: loading model\nsystem_info: n_threads = 2 (n_threads_batch = 2) / 2 | "
        f"CPU : {ours} | \nmain: done\n"
    )
    assert cpu_features(log) == ours


def test_a_build_without_its_library_reports_no_cpu_features(tmp_path):
    assert built_cpu_features(tmp_path / "bin" / "llama-server") is None
