"""SageMaker batch transform over a JSON Lines file: start the job, follow it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ops.clients import Client
from ops.polling import Polling
from ops.s3_objects import S3Location
from stacks.gpu_instances import is_gpu_instance

JSON_LINES = "application/jsonlines"


class TransformFailed(Exception):
    pass


class TransformTimedOut(Exception):
    pass


class NotForBatch(Exception):
    """The model cannot run as a batch transform job."""


def model_of_endpoint(sagemaker: Client, endpoint: str) -> str:
    """The SageMaker model an endpoint serves (its config's first variant). A GPU endpoint's
    model is refused: it is the CUDA 13 image, which needs NVIDIA driver 580, and batch
    transform instances offer drivers 470 and 535 only."""
    config_name = sagemaker.describe_endpoint(EndpointName=endpoint)["EndpointConfigName"]
    config = sagemaker.describe_endpoint_config(EndpointConfigName=config_name)
    variant = config["ProductionVariants"][0]
    types = [variant.get("InstanceType", "")]
    types += [pool["InstanceType"] for pool in variant.get("InstancePools", [])]
    if any(is_gpu_instance(t) for t in types):
        raise NotForBatch(
            f"endpoint {endpoint} runs on GPUs: its CUDA 13 image needs NVIDIA driver 580, and "
            "batch transform offers drivers 470 and 535 only; run the batch on the CPU decision "
            "endpoint's model (--endpoint decision-models-decision-cpu)"
        )
    model: str = variant["ModelName"]
    return model


def archive_of_model(sagemaker: Client, model: str) -> str | None:
    """The S3 URI of the model archive a SageMaker model serves (its container's
    ModelDataUrl); None for a model without one."""
    described = sagemaker.describe_model(ModelName=model)
    containers = [described["PrimaryContainer"]] if "PrimaryContainer" in described else []
    containers += described.get("Containers", [])
    archive: str | None = next((c["ModelDataUrl"] for c in containers if "ModelDataUrl" in c), None)
    return archive


def batch_dimension(model: str) -> str:
    """The `Endpoint` dimension of the metrics a batch job's containers write. A dash, not a
    slash: the adapter's settings refuse a slash there, and a container that refuses its
    settings never answers `/ping`."""
    return f"{model}-batch"


def start_transform(
    sagemaker: Client,
    *,
    job_name: str,
    model: str,
    source: S3Location,
    output: S3Location,
    instance_type: str,
    instance_count: int,
    max_payload_mb: int | None,
    invocation_timeout_s: int,
    batch_strategy: str = "MultiRecord",
) -> None:
    """One line per record, several records per request (`MultiRecord`: the adapter answers a
    JSON Lines body line by line) or one (`SingleRecord`: ops.batch_strategy chooses), answers
    assembled one per line. MaxConcurrentTransforms and, unless given,
    MaxPayloadInMB come from the container's /execution-parameters."""
    request: dict[str, Any] = {
        "TransformJobName": job_name,
        "ModelName": model,
        "BatchStrategy": batch_strategy,
        # A body of many decisions takes long: up to the hour SageMaker allows, one retry.
        "ModelClientConfig": {
            "InvocationsTimeoutInSeconds": invocation_timeout_s,
            "InvocationsMaxRetries": 1,
        },
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": source.uri}},
            "ContentType": JSON_LINES,
            "SplitType": "Line",
        },
        "TransformOutput": {
            "S3OutputPath": output.uri,
            "Accept": JSON_LINES,
            "AssembleWith": "Line",
        },
        "TransformResources": {"InstanceType": instance_type, "InstanceCount": instance_count},
        # The container bounds how long one body, and one line of it, may hold the model by
        # SageMaker's real-time 60 s; here holding it for a whole body is the point, up to the
        # invocation timeout, and a long line may take as long (a line past it is that line's
        # error, the body's other lines still answered).
        "Environment": {
            "DECISION_JSONLINES_TIMEOUT_S": str(invocation_timeout_s),
            "DECISION_SCORING_DEADLINE_S": str(invocation_timeout_s),
            # Its own metrics dimension: on the real-time endpoint's (the shared Model's
            # setting), a job's errors would count in that endpoint's alarms.
            "DECISION_METRICS_ENDPOINT": batch_dimension(model),
        },
    }
    if max_payload_mb is not None:
        request["MaxPayloadInMB"] = max_payload_mb
    sagemaker.create_transform_job(**request)


def result_location(source: S3Location, output: S3Location) -> S3Location:
    """Where SageMaker writes the answers to one input object: its name plus `.out`."""
    return output.child(f"{source.name}.out")


def wait_for_transform(
    sagemaker: Client, job_name: str, polling: Polling, *, report: Callable[[str], None]
) -> dict[str, Any]:
    """Poll until the job ends; report each status once. Raises on failure and timeout."""
    job: dict[str, Any]
    job, ended = polling.until(
        lambda: sagemaker.describe_transform_job(TransformJobName=job_name),
        lambda job: job["TransformJobStatus"] in ("Completed", "Failed", "Stopped"),
        state=lambda job: job["TransformJobStatus"],
        report=report,
    )
    status = job["TransformJobStatus"]
    if not ended:
        raise TransformTimedOut(
            f"transform job {job_name} still {status} after {polling.timeout_seconds:.0f}s "
            f"(it keeps running; stop it with `aws sagemaker stop-transform-job "
            f"--transform-job-name {job_name}`)"
        )
    if status != "Completed":
        reason = job.get("FailureReason") or "no reason given"
        raise TransformFailed(f"transform job {job_name} {status.lower()}: {reason}")
    return job
