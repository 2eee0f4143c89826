"""An asynchronous SageMaker endpoint: requests queued in S3, answers written back to S3,
notifications on SNS, and scaling on the backlog down to zero instances and back.

SageMaker reads each request from the input location the caller names and writes the answer
(or the error) under the output (or failure) prefix, with the endpoint's execution role: so that
role may read the input prefix and write the other two, and nothing else of the bucket.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct, IConstruct

from stacks.config import AsyncAutoscaling
from stacks.constructs import nag
from stacks.constructs.endpoint import Instances, SageMakerEndpoint
from stacks.constructs.prefix_access import grant_read_prefix


class AsyncDecisionEndpoint(Construct):
    """`bucket` holds the request, output and failure prefixes (the artifact bucket);
    `endpoint`: the properties of the SageMakerEndpoint it wraps (its name, image, model
    archive, environment, initial instance count, alarms and timeouts);
    `concurrent_invocations`: what SageMaker sends each instance at once, the decisions its
    adapter scores at once (it runs without a queue, so one more would get a 503)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        instance_type: str,
        autoscaling: AsyncAutoscaling,
        bucket: s3.IBucket,
        input_prefix: str,
        output_prefix: str,
        failure_prefix: str,
        concurrent_invocations: int,
        **endpoint: Any,
    ) -> None:
        super().__init__(scope, construct_id)
        endpoint_name = endpoint["endpoint_name"]
        self.bucket = bucket
        self.input_prefix, self.output_prefix = input_prefix, output_prefix
        self.failure_prefix = failure_prefix
        # Notifications may carry answers: encrypted with a key of our own (rotated), whose
        # grants the execution role gets with its right to publish.
        self.key = kms.Key(
            self,
            "NotificationKey",
            description=f"Encrypts the notification topics of {endpoint_name}",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
            pending_window=Duration.days(7),
        )
        self.success_topic = self._topic("SuccessTopic", f"{endpoint_name}: answers written")
        self.error_topic = self._topic("ErrorTopic", f"{endpoint_name}: requests failed")

        self.endpoint = SageMakerEndpoint(
            self,
            "Endpoint",
            **endpoint,
            instances=Instances.fixed(instance_type),
            autoscaling=None,  # scaled on the backlog below
            network_isolation=True,
            async_inference=sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty(
                client_config=sagemaker.CfnEndpointConfig.AsyncInferenceClientConfigProperty(
                    max_concurrent_invocations_per_instance=concurrent_invocations
                ),
                output_config=sagemaker.CfnEndpointConfig.AsyncInferenceOutputConfigProperty(
                    s3_output_path=bucket.s3_url_for_object(f"{output_prefix}/"),
                    s3_failure_path=bucket.s3_url_for_object(f"{failure_prefix}/"),
                    notification_config=(
                        sagemaker.CfnEndpointConfig.AsyncInferenceNotificationConfigProperty(
                            success_topic=self.success_topic.topic_arn,
                            error_topic=self.error_topic.topic_arn,
                        )
                    ),
                ),
            ),
        )
        self.endpoint_name = self.endpoint.endpoint_name
        role = self.endpoint.role
        # The configuration names the topics and paths: SageMaker checks the role's rights to
        # them when it creates the endpoint config, so the config waits for the policy.
        self.endpoint.endpoint_config.node.add_dependency(role.node.find_child("DefaultPolicy"))
        grant_read_prefix(role, bucket, input_prefix)
        bucket.grant_put(role, f"{output_prefix}/*")
        bucket.grant_put(role, f"{failure_prefix}/*")
        self.success_topic.grant_publish(role)
        self.error_topic.grant_publish(role)
        self._acknowledge_prefix_grants(role)

        self.scalable_target = self._scale(autoscaling)

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """What a caller needs: upload a request, invoke, read its answer or error."""
        self.bucket.grant_put(grantee, f"{self.input_prefix}/*")
        grant_read_prefix(grantee, self.bucket, self.output_prefix)
        grant_read_prefix(grantee, self.bucket, self.failure_prefix)
        principal = grantee.grant_principal
        if _is_construct(principal):  # a role of this app, or one imported by ARN
            self._acknowledge_prefix_grants(principal)
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["sagemaker:InvokeEndpointAsync"],
            resource_arns=[self.endpoint.endpoint_arn],
        )

    def _topic(self, construct_id: str, display_name: str) -> sns.Topic:
        return sns.Topic(
            self, construct_id, display_name=display_name, master_key=self.key, enforce_ssl=True
        )

    def _acknowledge_prefix_grants(self, scope: IConstruct) -> None:
        """cdk-nag's IAM5 findings on `scope`'s grants to this endpoint's prefixes."""
        for prefix in (self.input_prefix, self.output_prefix, self.failure_prefix):
            nag.acknowledge_wildcard_resource(
                scope,
                self.bucket.arn_for_objects(f"{prefix}/*"),
                "Each request and answer is an object of its own name under this endpoint's "
                "prefix; the grant covers that prefix only.",
            )
        nag.acknowledge_wildcard_actions(
            scope,
            ["s3:Abort*", "kms:GenerateDataKey*"],
            "CDK's S3 put and SNS publish grants: uploads under the endpoint's own prefixes, "
            "data keys of the topics' own key.",
        )

    def metric(self, metric_name: str) -> cloudwatch.Metric:
        """An asynchronous-endpoint metric: per endpoint, averaged over one minute."""
        return cloudwatch.Metric(
            namespace="AWS/SageMaker",
            metric_name=metric_name,
            dimensions_map={"EndpointName": self.endpoint_name},
            statistic="Average",
            period=Duration.minutes(1),
        )

    def _scale(self, autoscaling: AsyncAutoscaling) -> appscaling.ScalableTarget:
        target = self.endpoint.add_scalable_target(
            min_capacity=autoscaling.min_capacity, max_capacity=autoscaling.max_capacity
        )
        # Holds the backlog per instance near the target; with no backlog that is zero
        # instances (when minCapacity is 0).
        target.scale_to_track_metric(
            "BacklogPerInstance",
            custom_metric=self.metric("ApproximateBacklogSizePerInstance"),
            target_value=autoscaling.backlog_per_instance,
            scale_in_cooldown=Duration.seconds(autoscaling.scale_in_cooldown_seconds),
            scale_out_cooldown=Duration.seconds(autoscaling.scale_out_cooldown_seconds),
        )
        # At zero instances there is nothing per instance to track: a request waiting with no
        # instance (HasBacklogWithoutCapacity = 1) starts the first one.
        target.scale_on_metric(
            "WakeFromZero",
            metric=self.metric("HasBacklogWithoutCapacity"),
            scaling_steps=[
                appscaling.ScalingInterval(upper=0.5, change=0),
                appscaling.ScalingInterval(lower=0.5, change=1),
            ],
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            cooldown=Duration.seconds(autoscaling.scale_out_cooldown_seconds),
            evaluation_periods=1,
        )
        return target


def _is_construct(principal: iam.IPrincipal) -> TypeGuard[IConstruct]:
    """A principal that is also a construct (it has a construct node): a role, of this app or
    imported by ARN; not a service or account principal."""
    return hasattr(principal, "node")
