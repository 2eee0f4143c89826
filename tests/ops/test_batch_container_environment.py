"""The whole environment a batch transform job's container starts with, read as the adapter
reads it: the image's ENV, then the synthesized Model's environment, then the job's own
(`ops batch`'s CreateTransformJob request), later ones winning. A value the adapter refuses
there stops the container before `/ping` answers, and the job fails."""

from __future__ import annotations

import pytest
from decision_adapter.settings import Settings

from ops.cli import main
from tests.ops.test_background_batch import describes_model
from tests.support.aws_stubs import stubbed_client
from tests.support.cdk_templates import ENDPOINTS, RELEASE, ROOT, one, synthesize, template
from tests.support.dockerfile_stages import stages
from tests.support.ops_background_fakes import BUCKET, Clock, artifacts_bucket, factory, put

# A name as CloudFormation generates it for a Model without one (logical id, dash, 12 random
# characters), and the longest SageMaker allows.
MODEL_NAMES = ["DecisionCpuModel8A1B2C3D-Qx9rT2mLpZ4w", "m" * 63]


@pytest.fixture(scope="module")
def cpu_model_environment(tmp_path_factory) -> dict[str, str]:
    assembly = synthesize(tmp_path_factory.mktemp("cdk.out"), **RELEASE)
    served = {"PrimaryContainer": {"Environment": {"DECISION_N_GPU_LAYERS": "0"}}}
    _, model = one(template(assembly, ENDPOINTS), "AWS::SageMaker::Model", served)
    environment: dict[str, str] = model["Properties"]["PrimaryContainer"]["Environment"]
    return environment


def job_environment(model: str, tmp_path) -> dict[str, str]:
    """The Environment of the CreateTransformJob request `ops batch` sends for `model`."""
    sent: dict = {}
    source, output = f"s3://{BUCKET}/data/day.jsonl", f"s3://{BUCKET}/batch/job-1/output"
    with artifacts_bucket() as s3, stubbed_client("sagemaker") as (sagemaker, stubber):
        sagemaker.meta.events.register(
            "provide-client-params.sagemaker.CreateTransformJob",
            lambda params, **_: sent.update(params),
        )
        describes_model(stubber, model=model)  # --batch-strategy auto reads the served archive
        stubber.add_response("create_transform_job", {"TransformJobArn": "arn:x"})
        stubber.add_response(
            "describe_transform_job",
            {
                "TransformJobName": "job-1",
                "TransformJobArn": "arn:aws:sagemaker:eu-west-1:123456789012:transform-job/job-1",
                "TransformJobStatus": "Completed",
                "ModelName": model,
                "TransformInput": {
                    "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": source}}
                },
                "TransformResources": {"InstanceType": "ml.c6i.2xlarge", "InstanceCount": 1},
                "CreationTime": "2026-01-01T00:00:00Z",
            },
        )
        put(s3, f"{output}/day.jsonl.out", b"answers\n")
        argv = ["batch", source, "--model", model, "--job-name", "job-1"]
        argv += ["--location", f"s3://{BUCKET}/batch", "--results", str(tmp_path / "out.jsonl")]
        clock = Clock()
        code = main(
            argv, clients=factory(s3=s3, sagemaker=sagemaker), sleep=clock.sleep, clock=clock
        )
    assert code == 0
    environment: dict[str, str] = sent["Environment"]
    return environment


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_a_batch_jobs_container_accepts_its_whole_environment(
    cpu_model_environment, model, tmp_path
):
    image = stages(ROOT / "container" / "Dockerfile")[-1].env()
    job = job_environment(model, tmp_path)
    # SageMaker gives the container the Model's environment, the job's overriding it.
    container = {**image, **cpu_model_environment, **job}
    settings = Settings.from_environment(container)
    # The job's own metrics dimension, never the real-time endpoint's its alarms watch.
    assert settings.metrics_endpoint != cpu_model_environment["DECISION_METRICS_ENDPOINT"]
    assert model in settings.metrics_endpoint
    assert settings.jsonlines_timeout_s == settings.scoring_deadline_s == 3600
