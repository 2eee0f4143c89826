"""The stateless side: the three SageMaker endpoints of one release (model archive + images)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.config import (
    DecisionAsyncEndpoint,
    DecisionCpuEndpoint,
    DecisionGpuEndpoint,
    DlcImages,
    EndpointSettings,
    TextGenerationEndpoint,
)
from stacks.constructs.artifacts import ContainerImage, ModelArchive
from stacks.constructs.async_endpoint import AsyncDecisionEndpoint
from stacks.constructs.batch_access import grant_batch_transform
from stacks.constructs.endpoint import Instances, SageMakerEndpoint
from stacks.log_retention import RETENTION


class EndpointStack(Stack):
    """`decision_*_image` is required for each enabled decision endpoint (the config checks it);
    `release_model` is the model the archive holds (its spec name), which the text-generation
    endpoint serves under that name."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_data_uri: str,
        dlc: DlcImages,
        text_generation: TextGenerationEndpoint,
        decision_cpu: DecisionCpuEndpoint,
        decision_cpu_image: str | None,
        decision_gpu: DecisionGpuEndpoint,
        decision_gpu_image: str | None,
        invoker_role_arns: Sequence[str] = (),
        decision_async: DecisionAsyncEndpoint | None = None,
        release_model: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self._model_archive = ModelArchive.from_s3_uri(model_data_uri)
        self._imported_bucket: s3.IBucket | None = None
        self.endpoints: dict[str, SageMakerEndpoint] = {}

        text = text_generation
        if text.enabled:
            if text.unmeasured():  # AppConfig fills them in from measurement, or refuses
                raise ValueError(f"TextGeneration: {', '.join(text.unmeasured())} not set")
            cuda = text.image == "cuda"
            digest = dlc.cuda_digest if cuda else dlc.cpu_digest
            # A Hub GGUF: the DLC prefers a GGUF under /opt/ml/model, so the archive is left
            # off; the download needs the internet, which network isolation would cut.
            hub = text.hugging_face
            self._add(
                "TextGeneration",
                text,
                image=ContainerImage.from_dlc(self, repository_name=dlc.repository, digest=digest),
                environment=text.environment(release_model),
                instances=Instances.fixed(text.instance_type),
                inference_ami_version=text.inference_ami_version if cuda else None,
                **({"model_archive": None, "network_isolation": False} if hub else {}),
            )
        if decision_cpu.enabled:
            self._add_decision(
                "DecisionCpu",
                decision_cpu,
                decision_cpu_image,
                instances=Instances.fixed(decision_cpu.instance_type),
            )
            if decision_cpu.batch_prefix is not None:
                grant_batch_transform(
                    self.endpoints["DecisionCpu"].role,
                    self._artifact_bucket(),
                    decision_cpu.batch_prefix,
                )
        gpu = decision_gpu
        if gpu.enabled:
            self._add_decision(
                "DecisionGpu",
                gpu,
                decision_gpu_image,
                instances=Instances.pool(
                    gpu.instance_pool,
                    provision_timeout=Duration.seconds(gpu.provision_timeout_seconds),
                ),
                inference_ami_version=gpu.inference_ami_version,
                # A pool may mix instance speeds: send work to whoever has the least of it.
                least_outstanding_requests=True,
            )

        self.async_endpoint = None
        if decision_async is not None and decision_async.enabled:
            self.async_endpoint = self._add_async(decision_async, decision_cpu_image)

        for index, role_arn in enumerate(invoker_role_arns):
            invoker = iam.Role.from_role_arn(self, f"Invoker{index}", role_arn)
            for endpoint in self.endpoints.values():
                endpoint.grant_invoke(invoker)
            if self.async_endpoint is not None:
                self.async_endpoint.grant_invoke(invoker)

    def _artifact_bucket(self) -> s3.IBucket:
        """The bucket that holds the model archive: the stateful stack's artifact bucket
        (imported by name once)."""
        if self._imported_bucket is None:
            self._imported_bucket = s3.Bucket.from_bucket_name(
                self, "ArtifactBucket", self._model_archive.bucket_name
            )
        return self._imported_bucket

    def _add_async(
        self, settings: DecisionAsyncEndpoint, image_uri: str | None
    ) -> AsyncDecisionEndpoint:
        """The asynchronous decision endpoint on the CPU image; its requests and answers live in
        the bucket that holds the model archive (the artifact bucket)."""
        assert image_uri is not None  # the config requires it for an enabled endpoint
        bucket = self._artifact_bucket()
        endpoint = AsyncDecisionEndpoint(
            self,
            "DecisionAsync",
            **_endpoint_props(settings),
            image=ContainerImage.from_ecr_uri(image_uri),
            model_archive=self._model_archive,
            environment=settings.environment(),
            instance_type=settings.instance_type,
            bucket=bucket,
            input_prefix=settings.input_prefix,
            output_prefix=settings.output_prefix,
            failure_prefix=settings.failure_prefix,
            concurrent_invocations=settings.concurrency.max_scoring_requests,
        )
        outputs = {
            "EndpointName": endpoint.endpoint_name,
            "InputLocation": bucket.s3_url_for_object(f"{settings.input_prefix}/"),
            "SuccessTopicArn": endpoint.success_topic.topic_arn,
            "ErrorTopicArn": endpoint.error_topic.topic_arn,
        }
        for name, value in outputs.items():
            CfnOutput(self, f"DecisionAsync{name}", value=value)
        return endpoint

    def _add_decision(
        self,
        construct_id: str,
        settings: DecisionCpuEndpoint | DecisionGpuEndpoint,
        image_uri: str | None,
        **props: Any,
    ) -> None:
        """A decision endpoint: our image, configured through the adapter's variables, which
        its settings render (stacks/config/decision_container.py)."""
        assert image_uri is not None  # the config requires it for an enabled endpoint
        if settings.unmeasured():  # AppConfig fills them in from measurement, or refuses
            raise ValueError(f"{construct_id}: {', '.join(settings.unmeasured())} not set")
        self._add(
            construct_id,
            settings,
            image=ContainerImage.from_ecr_uri(image_uri),
            environment=settings.environment(),
            adapter_metrics=True,
            **props,
        )

    def _add(self, construct_id: str, settings: EndpointSettings, **props: Any) -> None:
        props = {"model_archive": self._model_archive, "network_isolation": True, **props}
        endpoint = SageMakerEndpoint(self, construct_id, **_endpoint_props(settings), **props)
        self.endpoints[construct_id] = endpoint
        CfnOutput(self, f"{construct_id}EndpointName", value=endpoint.endpoint_name)


def _endpoint_props(settings: EndpointSettings) -> dict[str, Any]:
    """The construct properties every endpoint takes from its settings as they are."""
    return {
        "endpoint_name": settings.endpoint_name,
        "initial_instance_count": settings.initial_instance_count,
        "autoscaling": settings.autoscaling,
        "alarms": settings.alarms,
        "deployment": settings.deployment,
        "log_retention": RETENTION[settings.log_retention_days],
        "container_startup_timeout": Duration.seconds(settings.container_startup_timeout_seconds),
        "model_data_download_timeout": Duration.seconds(
            settings.model_data_download_timeout_seconds
        ),
    }
