"""The CDK app's configuration: what cdk.json and `-c` may say, and what they may not."""

from __future__ import annotations

import importlib
import json
import re
import shlex
import sys

import boto3
import jmespath
import pytest
from moto import mock_aws
from pydantic import ValidationError

from stacks.config import (
    DEFAULT_DLC_CPU_DIGEST,
    DEFAULT_DLC_CUDA_DIGEST,
    AppConfig,
)
from tests.support.cdk_templates import (
    CPU_IMAGE,
    GIVEN_CAPACITY,
    GIVEN_TEXT_CAPACITY,
    GPU_IMAGE,
    MODEL,
    RELEASE,
    RELEASE_WITH_GPU,
    ROOT,
    cdk_json_context,
)

DIGEST = "sha256:" + "ab" * 32


def config(**context) -> AppConfig:
    return AppConfig.from_context({**cdk_json_context(), **context})


def rejected(**context) -> str:
    with pytest.raises(ValidationError) as raised:
        config(**context)
    return str(raised.value)


def app_context(context: dict) -> dict:
    """The app's own keys, without CDK's feature flags (`@aws-cdk/...`)."""
    return {key: value for key, value in context.items() if not key.startswith("@")}


def leaves(value, path=()):
    """(path, value) of every scalar in nested dicts; lists count as one value."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from leaves(inner, (*path, key))
    else:
        yield path, value


def test_cdk_json_holds_only_overrides_of_existing_fields():
    """A default repeated in cdk.json would silently win over an edit of stacks/config/."""
    overrides = app_context(cdk_json_context())
    assert set(overrides) <= {field.alias for field in AppConfig.model_fields.values()}
    defaults = AppConfig().model_dump(by_alias=True)
    for path, value in leaves(overrides):
        default = defaults
        for key in path:
            default = default[key] if isinstance(default, dict) else None
        assert value != default, f"cdk.json repeats the default of {'.'.join(path)}"


@pytest.mark.parametrize(
    "edit, read",
    [
        (
            (
                "gpu_image_timeout_minutes: int = Field(\n        240,",
                "gpu_image_timeout_minutes: int = Field(\n        241,",
            ),
            lambda c: c.builds.gpu_image_timeout_minutes == 241,
        ),
        (
            (
                'batch_prefix: S3Prefix | None = Field(\n        "batch",',
                'batch_prefix: S3Prefix | None = Field(\n        "jobs",',
            ),
            lambda c: c.decision_cpu_endpoint.batch_prefix == "jobs",
        ),
        (
            ('"ml.g6e.xlarge",', '"ml.g6.xlarge",'),
            lambda c: c.decision_gpu_endpoint.instance_pool[0] == "ml.g6.xlarge",
        ),
    ],
)
def test_an_edited_default_in_stacks_config_takes_effect_with_the_shipped_cdk_json(
    edit, read, tmp_path, monkeypatch
):
    # A copy of the package with the one edit, imported under another name (its modules import
    # one another relatively, so the copy is whole).
    package = ROOT / "stacks" / "config"
    sources = {path.name: path.read_text() for path in sorted(package.glob("*.py"))}
    old, new = edit
    assert sum(source.count(old) for source in sources.values()) == 1, old
    edited = tmp_path / "edited_config"
    edited.mkdir()
    for name, source in sources.items():
        (edited / name).write_text(source.replace(old, new))
    monkeypatch.syspath_prepend(str(tmp_path))
    edited_config = importlib.import_module(edited.name)
    try:
        assert read(edited_config.AppConfig.from_context(cdk_json_context()))
        assert not read(AppConfig.from_context(cdk_json_context()))
    finally:
        for name in list(sys.modules):
            if name.partition(".")[0] == edited.name:
                del sys.modules[name]


def test_cdk_json_yields_the_documented_defaults():
    parsed = config()
    assert parsed == AppConfig()
    assert parsed.dlc.cpu_digest == DEFAULT_DLC_CPU_DIGEST
    assert parsed.dlc.cuda_digest == DEFAULT_DLC_CUDA_DIGEST
    assert parsed.decision_cpu_endpoint.instance_type == "ml.c6i.2xlarge"
    assert parsed.decision_gpu_endpoint.instance_pool == [
        "ml.g6e.xlarge",
        "ml.g6.2xlarge",
        "ml.g5.2xlarge",
        "ml.g4dn.2xlarge",
    ]
    assert parsed.decision_gpu_endpoint.n_gpu_layers == -1
    # No build has run yet: the app deploys the stateful stack only.
    assert not parsed.deploys_endpoints


def test_release_values_make_the_endpoints_deployable():
    parsed = config(**RELEASE)
    assert parsed.deploys_endpoints
    assert parsed.model_data_uri == MODEL
    assert parsed.decision_gpu_image == GPU_IMAGE


def test_command_line_json_replaces_a_section_and_defaults_fill_the_rest():
    parsed = config(
        **{**RELEASE, "decisionGpuEndpoint": '{"enabled": false}'}, invokerRoleArns="[]"
    )
    assert parsed.decision_gpu_endpoint.enabled is False
    assert parsed.decision_gpu_endpoint.instance_pool[0] == "ml.g6e.xlarge"
    # `-c` gives strings; booleans and numbers in plain values still parse.
    assert config(retainArtifacts="false").retain_artifacts is False


@pytest.mark.parametrize(
    "key, image",
    [
        ("decisionCpuImage", "123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-models:latest"),
        ("decisionGpuImage", "123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-models"),
    ],
)
def test_an_image_tag_fails_and_says_how_to_get_the_digest(key, image):
    message = rejected(**{**RELEASE, key: image})
    assert "not pinned by digest" in message
    assert "aws ecr describe-images" in message
    assert "--repository-name decision-models" in message
    assert "python -m ops build" in message


def test_a_dlc_tag_instead_of_a_digest_fails_with_the_describe_images_command():
    message = rejected(dlc={"cpuDigest": "server-sagemaker-cpu-v1"})
    assert "dlc.cpuDigest" in message
    assert (
        "`aws ecr describe-images --registry-id <DLC account of the region, 763104351884 in most>"
        " --repository-name llama-cpp --image-ids imageTag=server-sagemaker-cpu-v1" in message
    )


def _describe_images_suggested(message: str) -> dict[str, str]:
    (command,) = re.findall(r"`(aws ecr describe-images [^`]+)`", message)
    words = shlex.split(command)[3:]
    return dict(zip(words[::2], words[1::2], strict=True))


ECR = "123456789012.dkr.ecr.eu-west-1.amazonaws.com"


@pytest.mark.parametrize("repository", ["decision-models", "team/decision-models"])
def test_the_suggested_command_finds_the_digest_of_that_tag(repository):
    image = f"{ECR}/{repository}:v7"
    message = rejected(**{**RELEASE, "decisionCpuImage": image})
    assert f"{image!r} is not pinned by digest" in message
    # pydantic appends its own " [type=value_error, ...]" to the message
    assert ", or use the URI that `python -m ops build cpu-image|gpu-image` prints [" in message
    arguments = _describe_images_suggested(message)
    with mock_aws():
        ecr = boto3.client("ecr", region_name="eu-west-1")
        ecr.create_repository(repositoryName=repository)
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"digest": DIGEST},
            }
        )
        ecr.put_image(repositoryName=repository, imageManifest=manifest, imageTag="v6")
        pushed = ecr.put_image(
            repositoryName=repository, imageManifest=manifest + " ", imageTag="v7"
        )
        name, _, tag = arguments.pop("--image-ids").partition("=")
        response = ecr.describe_images(
            repositoryName=arguments.pop("--repository-name"), imageIds=[{name: tag}]
        )
        digest = jmespath.search(arguments.pop("--query"), response)
    assert digest == pushed["image"]["imageId"]["imageDigest"]
    assert arguments == {"--output": "text"}


@pytest.mark.parametrize(
    "image, placeholders",
    [
        (f"{ECR}/decision-models", "--repository-name decision-models --image-ids imageTag=TAG"),
        ("decision-models:v7", "--repository-name REPOSITORY --image-ids imageTag=TAG"),
    ],
)
def test_what_the_reference_lacks_is_a_placeholder_in_the_command(image, placeholders):
    message = rejected(**{**RELEASE, "decisionCpuImage": image})
    assert f"`aws ecr describe-images {placeholders} --query" in message


@pytest.mark.parametrize(
    "image",
    [
        # SageMaker hosting pulls from private ECR only.
        f"public.ecr.aws/deep-learning-containers/llama-cpp@{DIGEST}",
        f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-models@sha256:{'ab' * 31}",
        f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/decision-models@sha512:{'ab' * 32}",
    ],
)
def test_images_must_be_private_ecr_with_a_full_sha256_digest(image):
    assert (
        "is not a private ECR image pinned by digest "
        "(<account>.dkr.ecr.<region>.amazonaws.com/<repository>@sha256:<64 hex>)"
    ) in rejected(**{**RELEASE, "decisionCpuImage": image})


@pytest.mark.parametrize(
    "uri",
    [
        "s3://artifacts-bucket/models/model.zip",
        "s3://artifacts-bucket/",
        "s3://Bad_Bucket/models/model.tar.gz",
        "https://artifacts-bucket.s3.amazonaws.com/models/model.tar.gz",
        "artifacts-bucket/models/model.tar.gz",
    ],
)
def test_model_data_must_be_an_s3_tar_gz_uri(uri):
    message = rejected(**{**RELEASE, "modelDataUri": uri})
    assert f"{uri!r} is not a model archive URI: expected s3://<bucket>/<key>.tar.gz " in message
    assert ".tar.gz (the URI that `python -m ops build model` prints) [" in message


def test_an_enabled_decision_endpoint_needs_its_image_once_a_release_is_given():
    message = rejected(
        **{key: value for key, value in RELEASE_WITH_GPU.items() if key != "decisionGpuImage"}
    )
    assert "decisionGpuImage is required" in message
    assert "python -m ops build gpu-image" in message
    # Switching the endpoint off is the other way out.
    assert config(
        modelDataUri=MODEL,
        decisionCpuImage=CPU_IMAGE,
        textGenerationEndpoint=GIVEN_TEXT_CAPACITY,
        decisionCpuEndpoint=GIVEN_CAPACITY,
        decisionGpuEndpoint={"enabled": False},
    ).deploys_endpoints


def test_the_first_release_needs_no_gpu_endpoint_quota():
    """Off unless asked: a new account has no GPU endpoint quota, and a quota refusal fails
    (and rolls back) the whole deploy; no pool falls back from it."""
    first = config(
        modelDataUri=MODEL,
        decisionCpuImage=CPU_IMAGE,
        textGenerationEndpoint=GIVEN_TEXT_CAPACITY,
        decisionCpuEndpoint=GIVEN_CAPACITY,
    )
    assert first.deploys_endpoints and not first.decision_gpu_endpoint.enabled
    assert config(**RELEASE_WITH_GPU).decision_gpu_endpoint.enabled


def test_images_without_a_model_archive_fail_instead_of_deploying_nothing():
    message = rejected(decisionCpuImage=CPU_IMAGE)
    assert "decisionCpuImage given without modelDataUri" in message
    assert "python -m ops build model" in message


@pytest.mark.parametrize(
    "pool, complaint",
    [
        ([], "at least 1 item"),
        ([f"ml.g5.{n}xlarge" for n in (2, 4, 8, 12, 16, 24)], "at most 5 items"),
        (["ml.g5.2xlarge", "ml.g6.2xlarge", "ml.g5.2xlarge"], "ml.g5.2xlarge more than once"),
        (["ml.g5.2xlarge", "ml.c6i.2xlarge"], "non-GPU types: ml.c6i.2xlarge"),
        (["g5.2xlarge"], "not a SageMaker instance type"),
    ],
)
def test_instance_pools_hold_one_to_five_distinct_gpu_types(pool, complaint):
    assert complaint in rejected(**{**RELEASE, "decisionGpuEndpoint": {"instancePool": pool}})


def test_a_pool_of_five_distinct_types_is_accepted():
    pool = ["ml.g6e.xlarge", "ml.g6.2xlarge", "ml.g5.2xlarge", "ml.g4dn.2xlarge", "ml.p4d.24xlarge"]
    given = {**GIVEN_CAPACITY, "instancePool": pool}
    assert config(
        **{**RELEASE, "decisionGpuEndpoint": given}
    ).decision_gpu_endpoint.instance_pool == (pool)


@pytest.mark.parametrize(
    "section, field, value",
    [
        ("decisionGpuEndpoint", "provisionTimeoutSeconds", 299),
        ("decisionGpuEndpoint", "provisionTimeoutSeconds", 3601),
        ("decisionCpuEndpoint", "containerStartupTimeoutSeconds", 59),
        ("decisionCpuEndpoint", "containerStartupTimeoutSeconds", 3601),
        ("textGenerationEndpoint", "modelDataDownloadTimeoutSeconds", 30),
        ("textGenerationEndpoint", "modelDataDownloadTimeoutSeconds", 7200),
    ],
)
def test_timeouts_outside_the_api_ranges_fail(section, field, value):
    message = rejected(**{**RELEASE, section: {**GIVEN_CAPACITY, field: value}})
    assert f"{section}.{field}" in message


@pytest.mark.parametrize("minutes", [4, 2161])
@pytest.mark.parametrize("key", ["timeoutMinutes", "gpuImageTimeoutMinutes"])
def test_build_timeouts_outside_codebuilds_range_fail(minutes, key):
    assert f"builds.{key}" in rejected(builds={key: minutes})


def test_boundary_timeouts_are_accepted():
    parsed = config(
        **{
            **RELEASE,
            "decisionGpuEndpoint": {
                **GIVEN_CAPACITY,
                "provisionTimeoutSeconds": 300,
                "containerStartupTimeoutSeconds": 3600,
            },
            "builds": {"timeoutMinutes": 2160},
        }
    )
    assert parsed.decision_gpu_endpoint.provision_timeout_seconds == 300


def test_autoscaling_bounds_must_be_ordered_and_contain_the_initial_count():
    assert "below minCapacity" in rejected(
        decisionCpuEndpoint={"autoscaling": {"minCapacity": 3, "maxCapacity": 2}}
    )
    assert "must lie within autoscaling" in rejected(
        decisionCpuEndpoint={"initialInstanceCount": 3, "autoscaling": {"maxCapacity": 2}}
    )
    assert "minCapacity" in rejected(decisionCpuEndpoint={"autoscaling": {"minCapacity": 0}})


def test_instance_types_must_fit_their_endpoint():
    assert "GPU type" in rejected(decisionCpuEndpoint={"instanceType": "ml.g5.2xlarge"})
    assert "does not fit instance type" in rejected(
        textGenerationEndpoint={"instanceType": "ml.g5.2xlarge", "image": "cpu"}
    )
    assert "does not fit instance type" in rejected(
        textGenerationEndpoint={"instanceType": "ml.c6i.2xlarge", "image": "cuda"}
    )


def test_llama_server_args_are_flag_names():
    assert "not a llama-server flag name" in rejected(
        textGenerationEndpoint={"llamaServerArgs": {"SM_LLAMA_CPP_CTX_SIZE": 4096}}
    )


def test_unknown_keys_in_a_section_fail_rather_than_being_ignored():
    assert "Extra inputs are not permitted" in rejected(decisionGpuEndpoint={"instancePools": []})


def test_endpoint_names_must_be_valid_and_distinct():
    assert "'decision_cpu' is not a SageMaker endpoint name" in rejected(
        decisionCpuEndpoint={"endpointName": "decision_cpu"}
    )
    assert "endpoint names must differ" in rejected(
        decisionGpuEndpoint={"endpointName": "decision-models-decision-cpu", "enabled": True}
    )
    # A switched-off endpoint's name does not collide.
    assert config(
        decisionGpuEndpoint={"endpointName": "decision-models-decision-cpu", "enabled": False}
    )


def test_invoker_roles_must_be_role_arns():
    assert "invokerRoleArns.0" in rejected(invokerRoleArns=["arn:aws:iam::123456789012:user/bob"])
    parsed = config(invokerRoleArns='["arn:aws:iam::123456789012:role/app"]')
    assert parsed.invoker_role_arns == ["arn:aws:iam::123456789012:role/app"]


def test_every_pool_type_has_a_known_gpu_architecture():
    from stacks.gpu_instances import COMPUTE_CAPABILITY, instance_family

    pool = config().decision_gpu_endpoint.instance_pool
    assert {instance_family(t): COMPUTE_CAPABILITY[instance_family(t)] for t in pool} == {
        "g6e": (8, 9),  # L40S
        "g6": (8, 9),  # L4
        "g5": (8, 6),  # A10G
        "g4dn": (7, 5),  # T4
    }
    assert config().decision_gpu_endpoint.cuda_architectures == "75;86;89"
    one = config(decisionGpuEndpoint={"instancePool": ["ml.g5.12xlarge"]})
    assert one.decision_gpu_endpoint.cuda_architectures == "86"


def test_a_pool_type_the_gpu_image_is_not_compiled_for_is_refused_at_synthesis():
    h100 = {"enabled": True, "instancePool": ["ml.g6e.xlarge", "ml.p5.48xlarge"]}
    message = rejected(decisionGpuEndpoint=h100)
    assert (
        "decisionGpuEndpoint.instancePool: ml.p5.48xlarge needs CUDA architecture 90, which the "
        "GPU image is not compiled for (builds.cudaArchitectures 75;86;89)"
    ) in message
    compiled = config(decisionGpuEndpoint=h100, builds={"cudaArchitectures": "86;89;90"})
    assert compiled.decision_gpu_endpoint.enabled
    # Off, the pool is not deployed: nothing to refuse.
    assert not config(decisionGpuEndpoint={**h100, "enabled": False}).decision_gpu_endpoint.enabled


@pytest.mark.parametrize("unknown", ["ml.p3.2xlarge", "ml.g5g.xlarge", "ml.g7.xlarge"])
def test_a_pool_type_whose_gpu_is_unknown_fails_naming_it(unknown):
    message = rejected(decisionGpuEndpoint={"instancePool": ["ml.g5.xlarge", unknown]})
    assert f"GPU architecture is not known: {unknown}; known families" in message


def test_the_image_repository_name_is_generated_unless_given_and_then_must_be_valid():
    assert config().image_repository_name is None
    assert config(imageRepositoryName="team/decision-models").image_repository_name == (
        "team/decision-models"
    )
    assert "imageRepositoryName" in rejected(imageRepositoryName="Decision_Models")


def test_the_app_reads_its_context_through_cdks_lookup_function():
    context = {**cdk_json_context(), **RELEASE}
    assert AppConfig.from_context(context.get) == AppConfig.from_context(context)


HUB = {"repo": "unsloth/Qwen3.5-4B-GGUF", "file": "Qwen3.5-4B-Q4_K_M.gguf"}


@pytest.mark.parametrize(
    ("hub", "field", "complaint"),
    [
        ({**HUB, "repo": "Qwen3.5-4B-GGUF"}, "repo", "Hugging Face repository id"),
        ({**HUB, "repo": "unsloth/Qwen/GGUF"}, "repo", "Hugging Face repository id"),
        ({**HUB, "file": "Qwen3.5-4B-Q4_K_M.bin"}, "file", "GGUF file path"),
        ({**HUB, "file": "../Qwen3.5-4B-Q4_K_M.gguf"}, "file", "GGUF file path"),
        ({**HUB, "file": "Q4/./Qwen3.5-4B-Q4_K_M.gguf"}, "file", "GGUF file path"),
        ({**HUB, "file": "/Qwen3.5-4B-Q4_K_M.gguf"}, "file", "GGUF file path"),
        ({"repo": HUB["repo"]}, "file", "Field required"),
    ],
)
def test_a_hugging_face_model_must_name_a_repository_and_a_gguf_in_it(hub, field, complaint):
    with pytest.raises(ValidationError) as error:
        config(textGenerationEndpoint={"huggingFace": hub})
    assert f"textGenerationEndpoint.huggingFace.{field}" in str(error.value)
    assert complaint in str(error.value)


def test_a_hugging_face_model_is_accepted_with_a_path_inside_the_repository():
    hub = {**HUB, "file": "Q4_K_M/Qwen3.5-4B-Q4_K_M.gguf"}
    parsed = config(textGenerationEndpoint=json.dumps({"huggingFace": hub}))
    assert parsed.text_generation_endpoint.hugging_face.file == hub["file"]


@pytest.mark.parametrize("flag", ["hf-repo", "hf-file", "model"])
def test_llama_server_args_cannot_choose_the_model_beside_the_archive_or_the_hub(flag):
    with pytest.raises(ValidationError, match=f"llamaServerArgs sets '{flag}'"):
        config(textGenerationEndpoint={"llamaServerArgs": {flag: "x"}})


def test_endpoint_names_follow_the_stack_prefix_unless_given():
    default = config(**RELEASE)
    assert default.decision_cpu_endpoint.endpoint_name == "decision-models-decision-cpu"
    assert default.text_generation_endpoint.endpoint_name == "decision-models-text-generation"
    staging = config(
        **RELEASE,
        stackPrefix="StagingCopy",
        decisionAsyncEndpoint={"enabled": True, "endpointName": "my-async"},
    )
    assert [
        staging.text_generation_endpoint.endpoint_name,
        staging.decision_cpu_endpoint.endpoint_name,
        staging.decision_gpu_endpoint.endpoint_name,
        staging.decision_async_endpoint.endpoint_name,
    ] == [
        "staging-copy-text-generation",
        "staging-copy-decision-cpu",
        "staging-copy-decision-gpu",
        "my-async",
    ]
    assert "stackPrefix" in rejected(**RELEASE, stackPrefix="A" * 60)


def test_the_gpu_check_is_one_function_which_ops_uses_too():
    from ops import transform
    from stacks.gpu_instances import is_gpu_instance

    assert [is_gpu_instance(t) for t in ("ml.g5.2xlarge", "ml.g4dn.xlarge", "ml.p5.48xlarge")] == [
        True,
        True,
        True,
    ]
    assert not any(is_gpu_instance(t) for t in ("ml.c6i.2xlarge", "ml.m5.large", "ml.inf2.xlarge"))
    assert transform.is_gpu_instance is is_gpu_instance


def test_each_decision_container_setting_is_declared_once_on_the_base():
    from stacks.config import (
        DecisionAsyncEndpoint,
        DecisionContainer,
        DecisionCpuEndpoint,
        DecisionGpuEndpoint,
    )

    shared = {"n_threads", "n_ctx", "concurrency"}
    assert shared <= set(DecisionContainer.__annotations__)
    for endpoint in (DecisionCpuEndpoint, DecisionGpuEndpoint, DecisionAsyncEndpoint):
        redeclared = shared & set(endpoint.__annotations__)
        # The GPU endpoint's fewer threads: a default of its own, the same declared type.
        assert redeclared == ({"n_threads"} if endpoint is DecisionGpuEndpoint else set())
        assert endpoint.__annotations__.get("n_threads", "Threads") == "Threads"
        assert issubclass(endpoint, DecisionContainer)
