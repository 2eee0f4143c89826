"""The GPU batching benchmark's pure parts: the model's shape arithmetic, the kit's trimming
rule, the build's flags (the GPU image's, CUDA hints for a toolkit without cuBLAS), the
bisection's workaround handed to the adapters, the report's rows and verdict, and how the
levels' seconds shrink to fit the time left."""

from pathlib import Path

import llama_build
import pytest

from research.gpu_batching import gpu_batching as gb
from research.gpu_batching.gpu_kit import kept
from research.gpu_batching.random_gguf import LLAMA_3_2_1B, TINY, Shape

LLAMA3_VOCAB = 128256


def test_the_default_shape_is_llama_3_2_1b():
    """1.24 B parameters with tied embeddings, 2.47 GB of F16 tensor data."""
    assert LLAMA_3_2_1B.head_dim == 64
    assert LLAMA_3_2_1B.parameters(LLAMA3_VOCAB) == 1_235_814_400
    norms = (2 * LLAMA_3_2_1B.layers + 1) * LLAMA_3_2_1B.hidden
    assert LLAMA_3_2_1B.file_bytes(LLAMA3_VOCAB) == 2 * 1_235_814_400 + 2 * norms


def test_the_tensors_have_ggml_shapes_reversed():
    """numpy shapes are (outputs, inputs): ggml's ne reversed, as gguf-py writes them."""
    tensors = {name: shape for name, shape, _ in TINY.tensors(100)}
    assert tensors["token_embd.weight"] == (100, 64)
    assert tensors["blk.0.attn_q.weight"] == (64, 64)
    assert tensors["blk.0.attn_k.weight"] == (2 * 16, 64)
    assert tensors["blk.1.ffn_down.weight"] == (64, 128)
    assert "output.weight" not in tensors  # tied to token_embd
    assert len(tensors) == 2 + 9 * TINY.layers


def test_norms_are_f32_and_matrices_f16():
    kinds = {name: kind for name, _, kind in Shape(layers=1).tensors(10)}
    assert {kinds[n] for n in kinds if n.endswith("norm.weight")} == {"f32"}
    assert {kinds[n] for n in kinds if not n.endswith("norm.weight")} == {"f16"}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("CMakeLists.txt", True),  # the bindings': the package root is configured
        ("pyproject.toml", False),
        ("llama_cpp/llama_cpp.py", True),
        ("llama_cpp/lib/libllama.so", False),
        ("llama_cpp/server/app.py", False),
        ("vendor/llama.cpp/CMakeLists.txt", True),
        ("vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf", True),
        ("vendor/llama.cpp/models/ggml-vocab-qwen2.gguf", False),
        ("vendor/llama.cpp/docs/ops/CUDA.csv", False),
        ("vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu", True),
        ("vendor/llama.cpp/ggml/src/ggml-cpu/ggml-cpu.c", True),
        ("vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp", False),
        ("vendor/llama.cpp/ggml/src/ggml-virtgpu/x.c", False),
        ("vendor/llama.cpp/tools/ui/CMakeLists.txt", True),
        ("vendor/llama.cpp/tools/ui/src/app.ts", False),
        ("vendor/llama.cpp/tools/server/server.cpp", True),
        ("vendor/llama.cpp/tools/server/server-decision.cpp", True),
        ("vendor/llama.cpp/tools/mtmd/test-3.mp4", False),
        ("vendor/llama.cpp/gguf-py/gguf/gguf_writer.py", True),
        ("examples/server/server.py", False),
    ],
)
def test_the_kit_keeps_what_the_build_reads(path, expected):
    assert kept(path) is expected


def test_the_build_is_the_gpu_images_for_sm_90_with_the_f16_cache_only():
    flags = gb.cmake_flags(cuda=True, backend_dir="/work/build/bin")
    assert "-DGGML_CUDA=ON" in flags and "-DCMAKE_CUDA_ARCHITECTURES=90" in flags
    assert "-DGGML_CUDA_FA_QUANTS=f16-f16" in flags
    assert "-DCMAKE_BUILD_TYPE=Release" in flags
    assert set(llama_build.SERVER_CMAKE_ARGS) <= set(flags)  # llama-server beside libllama
    # the images' runtime CPU dispatch, its backend modules in the build's bin/, come last
    image = llama_build.image_cmake_args("/work/build/bin")
    assert flags[-len(image) :] == image


def test_a_linked_build_takes_the_cpu_recipe_and_a_cpu_build_no_cuda():
    linked = gb.cmake_flags(cuda=True, cpu_args=["-DGGML_NATIVE=OFF"])
    assert linked[-1] == "-DGGML_NATIVE=OFF" and "-DGGML_BACKEND_DL=ON" not in linked
    assert not any("CUDA" in f for f in gb.cmake_flags(cuda=False, cpu_args=[]))


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    return path


def test_cublas_comes_from_the_pip_wheels_when_the_toolkit_lacks_it(tmp_path):
    toolkit = tmp_path / "cuda"
    _touch(toolkit / "lib" / "stubs" / "libcuda.so")
    site = tmp_path / "site"
    header = _touch(site / "nvidia" / "cu13" / "include" / "cublas_v2.h")
    _touch(site / "nvidia" / "cu13" / "include" / "cuda_runtime.h")  # another wheel's
    cublas = _touch(site / "nvidia" / "cu13" / "lib" / "libcublas.so.13")
    cublas_lt = _touch(site / "nvidia" / "cu13" / "lib" / "libcublasLt.so.13")
    headers = tmp_path / "work" / "cublas"
    flags, dirs = gb.cuda_hints(toolkit, [site], headers, driver_dirs=())
    assert flags == [
        f"-DCUDA_cublas_LIBRARY={cublas}",
        f"-DCUDA_cublasLt_LIBRARY={cublas_lt}",
        f"-DCMAKE_CUDA_FLAGS=-I{headers}",
    ]
    assert dirs == [str(cublas.parent)]
    # only cuBLAS's own headers: the toolkit's runtime headers stay nvcc's
    assert [p.name for p in headers.iterdir()] == ["cublas_v2.h"]
    assert (headers / "cublas_v2.h").resolve() == header


def test_a_complete_toolkit_needs_no_hints(tmp_path):
    toolkit = tmp_path / "cuda"
    _touch(toolkit / "include" / "cublas_v2.h")
    _touch(toolkit / "lib64" / "stubs" / "libcuda.so")
    assert gb.cuda_hints(toolkit, [tmp_path], tmp_path / "h", driver_dirs=()) == ([], [])


def test_the_driver_library_is_named_or_vmm_left_out(tmp_path):
    toolkit = tmp_path / "cuda"
    _touch(toolkit / "include" / "cublas_v2.h")
    driver = _touch(tmp_path / "driver" / "libcuda.so.1")
    flags, _ = gb.cuda_hints(toolkit, [], tmp_path / "h", driver_dirs=(str(driver.parent),))
    assert flags == [f"-DCUDA_cuda_driver_LIBRARY={driver}"]
    flags, _ = gb.cuda_hints(toolkit, [], tmp_path / "h", driver_dirs=(str(tmp_path / "none"),))
    assert flags == ["-DGGML_CUDA_NO_VMM=ON"]


def test_adapter_settings_are_key_value_words():
    assert gb.parse_env(["DECISION_N_BATCH=1024", "A=b=c"]) == {
        "DECISION_N_BATCH": "1024",
        "A": "b=c",
    }
    with pytest.raises(ValueError):
        gb.parse_env(["DECISION_N_BATCH"])


def _load(rps: float) -> dict:
    return {"throughput_rps": rps, "refused_503": 0, "errors": 0, "latency": {}}


def test_a_row_says_how_far_each_adapter_run_is_from_llama_server():
    row = gb.level_row(
        64, {gb.BATCHED: _load(900.0), gb.SERVER: _load(1000.0), gb.ONE_AT_A_TIME: _load(100.0)}
    )
    assert row["clients"] == 64
    assert row["adapter_batched_over_server"] == 0.9
    assert row["server_over_adapter_batched"] == 1.111
    assert row["server_over_adapter_one_at_a_time"] == 10.0
    assert (
        gb.level_row(1, {gb.BATCHED: _load(0.0), gb.SERVER: _load(5.0)})[
            "server_over_adapter_batched"
        ]
        is None
    )


def test_the_verdict_is_read_at_64_clients():
    rows = [
        gb.level_row(1, {gb.BATCHED: _load(10.0), gb.SERVER: _load(50.0)}),
        gb.level_row(64, {gb.BATCHED: _load(900.0), gb.SERVER: _load(1000.0)}),
    ]
    verdict = gb.summary(rows)
    assert verdict["clients"] == 64 and verdict["meets_target"] is True
    assert gb.summary(rows[:1])["meets_target"] is False  # 5x, and not at 64 clients
    assert gb.summary([]) == {"measured": False}


def test_levels_shrink_to_fit_the_time_left():
    assert gb.level_seconds(1000.0, 7, 3, 6.0) == 6.0
    squeezed = gb.level_seconds(100.0, 7, 3, 6.0)
    assert gb.MIN_LEVEL_S <= squeezed < 6.0
    assert gb.level_seconds(20.0, 7, 3, 6.0) == 0.0
    assert gb.level_seconds(100.0, 0, 3, 6.0) == 0.0


def test_llama_server_offloads_every_layer_with_64_slots():
    arguments = gb.server_arguments(threads=4, n_batch=2048, slot_ctx=1024, gpu=True).arguments()
    assert arguments[arguments.index("--parallel") + 1] == "64"
    assert arguments[arguments.index("--ctx-size") + 1] == str(64 * 1024)
    assert arguments[arguments.index("--n-gpu-layers") + 1] == "99"
    assert "--cont-batching" in arguments


def test_the_report_is_rewritten_whole(tmp_path):
    report = gb.Report(tmp_path / "out" / "r.json", {"stage": "starting"})
    report.update(stage="done", rows=[1])
    assert (tmp_path / "out" / "r.json").read_text().count('"stage": "done"') == 1
    assert not list((tmp_path / "out").glob("*.partial"))


def test_clients_spread_evenly_over_the_load_processes():
    assert gb.client_shares(64, 4) == [16, 16, 16, 16]
    assert gb.client_shares(6, 4) == [2, 2, 1, 1]
    assert gb.client_shares(1, 4) == [1]
    assert gb.client_shares(8, 1) == [8]


def test_the_processes_loads_pool_into_one_level():
    from bench.concurrency import LoadResult

    merged = gb.merge_loads(
        4,
        [
            LoadResult(2, 2.0, answered=[0.1] * 10, refused=1),
            LoadResult(2, 2.5, answered=[0.2] * 10, errors=2),
        ],
    )
    assert merged["clients"] == 4 and merged["client_processes"] == 2
    assert merged["answered"] == 20 and merged["refused_503"] == 1 and merged["errors"] == 2
    assert merged["throughput_rps"] == 8.0  # 20 answers over the longest window, 2.5 s


def test_the_bisections_workaround_goes_to_the_adapters_under_settings_given_by_hand(tmp_path):
    report = gb.Report(tmp_path / "r.json", {})
    fix = {"DECISION_EXTRA_BUFFER_TYPES": "false"}
    assert gb.apply_workaround({}, {"A": "1"}, report) == {"A": "1"}
    assert gb.apply_workaround(fix, {"A": "1"}, report) == {**fix, "A": "1"}
    by_hand = {"DECISION_EXTRA_BUFFER_TYPES": "true"}
    assert gb.apply_workaround(fix, by_hand, report) == by_hand
    assert len(report.data["notes"]) == 2


def test_the_bisection_goes_first_within_the_time_left():
    assert gb.bisect_budget(90.0, 500.0, bisect_only=False) == 90.0
    # the measurement's share is kept while the bisection keeps its minimum
    assert gb.bisect_budget(90.0, 230.0, bisect_only=False) == 70.0
    assert gb.bisect_budget(90.0, 150.0, bisect_only=False) == gb.MIN_BISECT_S
    assert gb.bisect_budget(90.0, 150.0, bisect_only=True) == 90.0
    assert gb.bisect_budget(90.0, 40.0, bisect_only=False) == 30.0  # never past the deadline
    assert gb.bisect_budget(90.0, 5.0, bisect_only=False) == 0.0
