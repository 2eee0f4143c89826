"""GPU endpoints get an inference AMI whose NVIDIA driver runs the CUDA DLC's CUDA version.

The AMI facts come from botocore's service model (AWS's documentation of each
`InferenceAmiVersion` value), which is what the check reads at synth.
"""

from __future__ import annotations

import botocore.session
import pytest
from pydantic import ValidationError

from stacks.config import AppConfig
from stacks.inference_amis import check_ami_runs_cuda, inference_amis, parse_ami_documentation
from tests.support.cdk_templates import cdk_json_context

OLD_AMI = "al2-ami-sagemaker-inference-gpu-3-1"
CUDA13_AMI = "al2023-ami-sagemaker-inference-gpu-4-1"


def documentation() -> str:
    model = botocore.session.get_session().get_service_model("sagemaker")
    return model.shape_for("ProductionVariant").members["InferenceAmiVersion"].documentation


def config(**context) -> AppConfig:
    return AppConfig.from_context({**cdk_json_context(), **context})


def test_every_ami_the_api_accepts_is_read_from_botocores_documentation():
    amis = inference_amis()
    model = botocore.session.get_session().get_service_model("sagemaker")
    assert list(amis) == model.shape_for("ProductionVariantInferenceAmiVersion").enum
    for name, ami in amis.items():
        # Each documented fact ends up in the table; a changed wording would leave a gap here.
        if ami.accelerator == "GPU":
            assert ami.nvidia_driver and ami.cuda, name
            assert f"NVIDIA driver version: {ami.nvidia_driver}" in documentation()
        else:
            assert ami.cuda is None and "neuron" in name


def test_the_documented_driver_and_cuda_of_the_two_latest_gpu_amis():
    amis = parse_ami_documentation(documentation())
    assert (amis[OLD_AMI].nvidia_driver, amis[OLD_AMI].cuda) == (550, (12, 4))
    assert (amis[CUDA13_AMI].nvidia_driver, amis[CUDA13_AMI].cuda) == (580, (13, 0))


def test_the_default_gpu_endpoints_run_the_cuda_13_dlc():
    parsed = config(textGenerationEndpoint={"instanceType": "ml.g6.xlarge", "image": "cuda"})
    assert parsed.dlc.cuda_major_version == 13
    assert parsed.decision_gpu_endpoint.inference_ami_version == CUDA13_AMI
    assert parsed.text_generation_endpoint.inference_ami_version == CUDA13_AMI
    check_ami_runs_cuda(CUDA13_AMI, 13)


@pytest.mark.parametrize(
    "context, field",
    [
        (
            {"decisionGpuEndpoint": {"enabled": True, "inferenceAmiVersion": OLD_AMI}},
            "decisionGpuEndpoint",
        ),
        (
            {
                "textGenerationEndpoint": {
                    "instanceType": "ml.g5.xlarge",
                    "image": "cuda",
                    "inferenceAmiVersion": OLD_AMI,
                }
            },
            "textGenerationEndpoint",
        ),
    ],
)
def test_an_ami_whose_driver_is_too_old_for_cuda_13_fails_at_synth(context, field):
    with pytest.raises(ValidationError) as raised:
        config(**context)
    message = str(raised.value)
    assert f"{field}.inferenceAmiVersion '{OLD_AMI}' has NVIDIA driver 550, CUDA 12.4" in message
    assert f"needs CUDA 13: use {CUDA13_AMI}" in message


def test_the_check_follows_the_images_cuda_version():
    with pytest.raises(ValidationError, match="needs CUDA 14"):
        config(dlc={"cudaMajorVersion": 14}, decisionGpuEndpoint={"enabled": True})
    assert config(
        dlc={"cudaMajorVersion": 12},
        decisionGpuEndpoint={"enabled": True, "inferenceAmiVersion": OLD_AMI},
    )


def test_unknown_or_non_cuda_amis_fail_naming_the_known_ones():
    with pytest.raises(ValueError, match="not one SageMaker knows: al2-ami") as unknown:
        check_ami_runs_cuda("al2-ami-sagemaker-inference-gpu-9", 13)
    assert str(unknown.value).endswith(": " + ", ".join(sorted(inference_amis())))
    with pytest.raises(ValueError, match="no CUDA"):
        check_ami_runs_cuda("al2-ami-sagemaker-inference-neuron-2", 13)


def test_cpu_and_disabled_endpoints_are_not_held_to_a_gpu_ami():
    assert config(
        textGenerationEndpoint={"inferenceAmiVersion": OLD_AMI},
        decisionGpuEndpoint={"enabled": False, "inferenceAmiVersion": OLD_AMI},
    )


def test_the_refusal_names_every_ami_that_would_run_the_image():
    fitting = sorted(n for n, a in inference_amis().items() if (a.cuda_major or 0) >= 12)
    assert len(fitting) >= 2
    with pytest.raises(ValueError) as neuron:
        check_ami_runs_cuda("al2-ami-sagemaker-inference-neuron-2", 12)
    assert str(neuron.value).endswith("the image needs CUDA 12: use " + " or ".join(fitting))
    with pytest.raises(ValueError) as future:
        check_ami_runs_cuda(CUDA13_AMI, 99)
    assert str(future.value).endswith("the image needs CUDA 99: use an AMI with a newer driver")


def test_the_parser_reads_name_accelerator_driver_and_cuda_major_minor():
    documentation = (
        "<p>Options:</p><dl><dt>al2-ami-example-gpu-1</dt> <dd> <ul>"
        "<li> <p>Accelerator: GPU (NVIDIA: L4)</p> </li>"
        "<li> <p>NVIDIA driver version: 550</p> </li>"
        "<li> <p>CUDA version: 12.4.1</p> </li>"
        "</ul> </dd><dt>al2-ami-example-cpu-1</dt> <dd> <ul>"
        "<li> <p>Accelerator: None</p> </li></ul> </dd>"
        "<dt>al2-ami-example-bare-1</dt> <dd> <ul><li> <p>Kernel: 6.1</p> </li></ul> </dd></dl>"
    )
    gpu, cpu, bare = parse_ami_documentation(documentation).values()
    assert (bare.accelerator, bare.nvidia_driver, bare.cuda) == ("", None, None)
    assert (gpu.name, gpu.accelerator, gpu.nvidia_driver, gpu.cuda) == (
        "al2-ami-example-gpu-1",
        "GPU (NVIDIA: L4)",
        550,
        (12, 4),
    )
    assert (cpu.name, cpu.accelerator, cpu.nvidia_driver, cpu.cuda) == (
        "al2-ami-example-cpu-1",
        "None",
        None,
        None,
    )
