"""One SageMaker real-time endpoint: role, model, endpoint config, endpoint, scaling, alarms.

Model and endpoint config get generated names: every property of both is create-only, so a new
image or model archive replaces them, and the endpoint (which keeps its name) moves to the new
config blue/green.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks import adapter_metrics
from stacks.config import Alarms, Autoscaling, Deployment
from stacks.constructs import runtime_grants
from stacks.constructs.artifacts import ContainerImage, ModelArchive

VARIANT_NAME = "AllTraffic"


class VariantPlacement(TypedDict, total=False):
    """ProductionVariantProperty's arguments that say where the variant runs."""

    instance_type: str
    instance_pools: list[sagemaker.CfnEndpointConfig.InstancePoolProperty]
    variant_instance_provision_timeout_in_seconds: float


@dataclass(frozen=True)
class Instances:
    """Where the variant runs: one instance type, or an ordered pool SageMaker tries in turn."""

    instance_types: tuple[str, ...]
    provision_timeout: Duration | None = None

    @classmethod
    def fixed(cls, instance_type: str) -> Instances:
        return cls(instance_types=(instance_type,))

    @classmethod
    def pool(cls, instance_types: Sequence[str], *, provision_timeout: Duration) -> Instances:
        """`instance_types` in priority order; the config checks SageMaker's rule (1-5 distinct
        types, `DecisionGpuEndpoint` in stacks/config/decision_endpoints.py), so it is checked
        in one place. A pool of one type (one type deployed to be measured) has nothing to fall
        back to: it is that type, as every endpoint API and tool knows it."""
        if len(instance_types) == 1:
            return cls.fixed(instance_types[0])
        return cls(instance_types=tuple(instance_types), provision_timeout=provision_timeout)

    @property
    def is_pool(self) -> bool:
        return self.provision_timeout is not None

    def variant_properties(self) -> VariantPlacement:
        # With pools the API rejects InstanceType; neither CloudFormation nor cfn-lint says so.
        if self.provision_timeout is None:  # not is_pool
            return {"instance_type": self.instance_types[0]}
        return {
            "instance_pools": [
                sagemaker.CfnEndpointConfig.InstancePoolProperty(instance_type=t, priority=rank)
                for rank, t in enumerate(self.instance_types, start=1)
            ],
            "variant_instance_provision_timeout_in_seconds": self.provision_timeout.to_seconds(),
        }


class SageMakerEndpoint(Construct):
    """A single-variant real-time endpoint serving one image and one model archive."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        endpoint_name: str,
        image: ContainerImage,
        model_archive: ModelArchive | None,
        environment: Mapping[str, str],
        instances: Instances,
        initial_instance_count: int,
        autoscaling: Autoscaling | None,
        alarms: Alarms,
        container_startup_timeout: Duration,
        model_data_download_timeout: Duration,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        network_isolation: bool = True,
        inference_ami_version: str | None = None,
        least_outstanding_requests: bool = False,
        adapter_metrics: bool = False,
        async_inference: sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty | None = None,
        deployment: Deployment | None = None,
    ) -> None:
        """`adapter_metrics`: the container is the decision adapter, which emits the metrics
        of stacks/adapter_metrics.py; its alarms then tell backpressure from failure.
        `autoscaling` None: the caller scales the variant (`scaling_resource_id`);
        `async_inference` makes it an asynchronous endpoint; `deployment`: how a release
        replaces its fleet (None: SageMaker's blue/green all at once, without rollback)."""
        super().__init__(scope, construct_id)
        # Named, not generated: the endpoint's rollback names them, and a reference (Ref) would
        # close a cycle with their dimension, the endpoint's name.
        self._alarm_names = {
            "server_errors": f"{endpoint_name}-server-errors",
            "latency": f"{endpoint_name}-model-latency",
        }
        self._adapter_metrics = adapter_metrics
        self.role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"Runs the model of SageMaker endpoint {endpoint_name}",
        )
        image.grant_pull(self.role)
        if model_archive is not None:  # None: the container fetches its model itself
            model_archive.grant_read(self.role)
        # The log group SageMaker writes to, made here so that its events expire (SageMaker's
        # own would keep them forever) and it goes with the endpoint.
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=runtime_grants.endpoint_log_group(endpoint_name),
            retention=log_retention,
            removal_policy=RemovalPolicy.DESTROY,
        )
        runtime_grants.grant_logs(self.role, runtime_grants.endpoint_log_group(endpoint_name))
        runtime_grants.grant_metrics(self.role, runtime_grants.ENDPOINT_METRICS)

        self.model = sagemaker.CfnModel(
            self,
            "Model",
            execution_role_arn=self.role.role_arn,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=image.image_uri,
                model_data_url=model_archive.uri if model_archive is not None else None,
                environment=dict(environment) or None,
            ),
            enable_network_isolation=network_isolation,
        )
        # CreateModel checks the role's rights at once: wait for its policy, not just the role
        # (the role itself is already a dependency through ExecutionRoleArn).
        self.model.node.add_dependency(self.role.node.find_child("DefaultPolicy"))

        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self,
            "Config",
            production_variants=[
                sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                    variant_name=VARIANT_NAME,
                    model_name=self.model.attr_model_name,
                    initial_instance_count=initial_instance_count,
                    initial_variant_weight=1,
                    container_startup_health_check_timeout_in_seconds=(
                        container_startup_timeout.to_seconds()
                    ),
                    model_data_download_timeout_in_seconds=model_data_download_timeout.to_seconds(),
                    inference_ami_version=inference_ami_version,
                    routing_config=(
                        sagemaker.CfnEndpointConfig.RoutingConfigProperty(
                            routing_strategy="LEAST_OUTSTANDING_REQUESTS"
                        )
                        if least_outstanding_requests
                        else None
                    ),
                    **instances.variant_properties(),
                )
            ],
            async_inference_config=async_inference,
        )
        # A release (a new config) keeps the variant's current instance count and weight:
        # without this, UpdateEndpoint resets a scaled-out variant to its initial count and
        # wakes an asynchronous endpoint scaled to zero.
        self.endpoint = sagemaker.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=endpoint_name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
            retain_all_variant_properties=True,
        )
        # No container starts (and writes a log group of its own) before the group exists.
        self.endpoint.node.add_dependency(self.log_group)
        self.endpoint_name = self.endpoint.attr_endpoint_name
        self.endpoint_arn = self.endpoint.ref

        self.scaling_resource_id = f"endpoint/{self.endpoint_name}/variant/{VARIANT_NAME}"
        self.scalable_target = self._autoscale(autoscaling) if autoscaling else None
        self.alarms = self._alarm(alarms)
        if deployment is not None:
            self.endpoint.deployment_config = self._deployment_config(deployment)

    def _deployment_config(
        self, deployment: Deployment
    ) -> sagemaker.CfnEndpoint.DeploymentConfigProperty:
        """Blue/green in steps, rolled back on the 5XX and latency alarms (not backpressure:
        a busy fleet is short of capacity, not broken)."""
        step = sagemaker.CfnEndpoint.CapacitySizeProperty(
            type="CAPACITY_PERCENT", value=deployment.step_percent
        )
        routing = sagemaker.CfnEndpoint.TrafficRoutingConfigProperty(
            type=deployment.traffic_routing,
            wait_interval_in_seconds=deployment.wait_interval_seconds,
            canary_size=step if deployment.traffic_routing == "CANARY" else None,
            linear_step_size=step if deployment.traffic_routing == "LINEAR" else None,
        )
        rollback = sagemaker.CfnEndpoint.AutoRollbackConfigProperty(
            alarms=[
                sagemaker.CfnEndpoint.AlarmProperty(alarm_name=name)
                for name in self._alarm_names.values()
            ]
        )
        return sagemaker.CfnEndpoint.DeploymentConfigProperty(
            blue_green_update_policy=sagemaker.CfnEndpoint.BlueGreenUpdatePolicyProperty(
                traffic_routing_configuration=routing,
                termination_wait_in_seconds=deployment.termination_wait_seconds,
            ),
            auto_rollback_configuration=rollback if deployment.auto_rollback else None,
        )

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
            resource_arns=[self.endpoint_arn],
        )

    def metric(self, metric_name: str, *, statistic: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace="AWS/SageMaker",
            metric_name=metric_name,
            dimensions_map={"EndpointName": self.endpoint_name, "VariantName": VARIANT_NAME},
            statistic=statistic,
            period=Duration.minutes(5),
        )

    def adapter_metric(self, metric_name: str, *, statistic: str = "Sum") -> cloudwatch.Metric:
        """One of the adapter's own metrics (EMF, stacks/adapter_metrics.py) for this endpoint."""
        return cloudwatch.Metric(
            namespace=adapter_metrics.NAMESPACE,
            metric_name=metric_name,
            dimensions_map={adapter_metrics.ENDPOINT_DIMENSION: self.endpoint_name},
            statistic=statistic,
            period=Duration.minutes(5),
        )

    def _autoscale(self, autoscaling: Autoscaling) -> appscaling.ScalableTarget:
        target = self.add_scalable_target(
            min_capacity=autoscaling.min_capacity, max_capacity=autoscaling.max_capacity
        )
        target.scale_to_track_metric(
            "InvocationsPerInstance",
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE,
            target_value=autoscaling.invocations_per_instance,
            scale_in_cooldown=Duration.seconds(autoscaling.scale_in_cooldown_seconds),
            scale_out_cooldown=Duration.seconds(autoscaling.scale_out_cooldown_seconds),
        )
        return target

    def add_scalable_target(
        self, *, min_capacity: int, max_capacity: int
    ) -> appscaling.ScalableTarget:
        """The variant's instance count as an Application Auto Scaling target."""
        # Application Auto Scaling acts for SageMaker through its service-linked role, which
        # CloudFormation creates when the target names it.
        scaling_role = iam.Role.from_role_arn(
            self,
            "ScalingRole",
            Stack.of(self).format_arn(
                service="iam",
                region="",
                resource="role",
                resource_name=(
                    "aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
                    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
                ),
            ),
            mutable=False,
        )
        return appscaling.ScalableTarget(
            self,
            "Scaling",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=self.scaling_resource_id,
            scalable_dimension="sagemaker:variant:DesiredInstanceCount",
            min_capacity=min_capacity,
            max_capacity=max_capacity,
            role=scaling_role,
        )

    def _alarm(self, alarms: Alarms) -> list[cloudwatch.Alarm]:
        server_errors = self._server_errors().create_alarm(
            self,
            "ServerErrorsAlarm",
            alarm_name=self._alarm_names["server_errors"],
            alarm_description="The model container answered with 5xx errors"
            + (" other than backpressure 503s." if self._adapter_metrics else "."),
            threshold=alarms.server_errors_per_5_minutes,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=alarms.evaluation_periods,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        # ModelLatency is reported in microseconds.
        latency = self.metric("ModelLatency", statistic="p90").create_alarm(
            self,
            "ModelLatencyAlarm",
            alarm_name=self._alarm_names["latency"],
            alarm_description=f"p90 model latency above {alarms.model_latency_p90_ms} ms.",
            threshold=alarms.model_latency_p90_ms * 1000,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=alarms.evaluation_periods,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        created = [server_errors, latency]
        if self._adapter_metrics:
            created.append(self._backpressure_alarm(alarms))
        if alarms.topic_arn is not None:
            topic = sns.Topic.from_topic_arn(self, "AlarmTopic", alarms.topic_arn)
            for alarm in created:
                alarm.add_alarm_action(cloudwatch_actions.SnsAction(topic))
        return created

    def _server_errors(self) -> cloudwatch.Metric | cloudwatch.MathExpression:
        errors = self.metric("Invocation5XXErrors", statistic="Sum")
        if not self._adapter_metrics:
            return errors
        # SageMaker counts the adapter's backpressure 503s as 5XX errors, so a threshold alone
        # cannot tell a burst from a fault: any threshold above a burst's 503s also hides that
        # many real errors. The adapter counts each such 503 itself (Overloaded), so the
        # difference is exactly the other 5XXs. FILL: either series has no data point in a
        # period without such events. Both sum over the same 5 minutes; a 503 logged just
        # across a period boundary from SageMaker's count can shift one error by one period.
        return cloudwatch.MathExpression(
            expression="FILL(errors, 0) - FILL(overloaded, 0)",
            using_metrics={
                "errors": errors,
                "overloaded": self.adapter_metric(adapter_metrics.OVERLOADED),
            },
            label="Invocation5XXErrors less backpressure 503s",
            period=Duration.minutes(5),
        )

    def _backpressure_alarm(self, alarms: Alarms) -> cloudwatch.Alarm:
        """Refusals for lack of capacity: scaling lags or the maximum is too low. Not a fault
        of the container, so an alarm of its own."""
        share = cloudwatch.MathExpression(
            expression=("100 * FILL(overloaded, 0) / (FILL(admitted, 0) + FILL(overloaded, 0))"),
            using_metrics={
                "overloaded": self.adapter_metric(adapter_metrics.OVERLOADED),
                "admitted": self.adapter_metric(adapter_metrics.ADMITTED),
            },
            label="Percent of requests refused for backpressure",
            period=Duration.minutes(5),
        )
        return share.create_alarm(
            self,
            "BackpressureAlarm",
            alarm_description=(
                f"Over {alarms.overloaded_percent}% of requests refused with 503 (busy): "
                "capacity is short of demand."
            ),
            threshold=alarms.overloaded_percent,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=alarms.evaluation_periods,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
