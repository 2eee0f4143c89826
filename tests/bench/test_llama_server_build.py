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
)
from bench.report import llama_server_table


def _cached(root: Path, version: str, flags: list[str]) -> Path:
    binary = root / f"llama-server-{version}" / "build" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    (binary.parent.parent / "bench-cmake-flags").write_text("\n".join(flags))
    return binary


def test_a_cached_build_with_the_same_flags_is_reused(tmp_path):
    binary = _cached(tmp_path, "9.9.9", cmake_flags())
    build = ensure_llama_server(tmp_path, "9.9.9")
    assert build.binary == binary
    assert build.reason is None and build.built_now is False


def test_no_cmake_is_a_reason_not_an_exception(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-venv" / "python"))
    build = ensure_llama_server(tmp_path, "9.9.9")
    assert build.binary is None
    assert "cmake not found" in build.reason


def test_other_cmake_flags_mean_a_rebuild(tmp_path, monkeypatch):
    """Other CPU flags change the kernels: the cached binary built without them is not
    reused."""
    _cached(tmp_path, "9.9.9", cmake_flags([]))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-venv" / "python"))
    build = ensure_llama_server(tmp_path, "9.9.9", ["-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON"])
    assert build.binary is None and "cmake not found" in build.reason


def test_the_server_is_built_with_the_recipe_of_the_installed_bindings():
    """The recipe's flags for this machine, the same the venv's llama-cpp-python was built
    with (its record), follow the server's own."""
    flags = cmake_flags()
    assert flags[: len(CMAKE_FLAGS)] == list(CMAKE_FLAGS)
    assert flags[len(CMAKE_FLAGS) :] == llama_build.local_cmake_args()
    record = llama_build.installed_record(Path(sys.executable))
    assert record is not None, "the venv's llama-cpp-python was not installed by the recipe"
    assert record["cmake_args"] == llama_build.local_cmake_args()


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
