"""SageMaker's InvokeEndpoint in front of a live adapter: a real boto3 client serializes the call
and, instead of sending it to AWS, its request goes to the adapter's /invocations with the
headers SageMaker passes on (Content-Type, Accept, the custom attributes). The container's reply
comes back as SageMaker returns it: the body and custom attributes on a 2xx, else a ModelError
(424) carrying the container's status and body as `OriginalStatusCode`/`OriginalMessage`."""

from __future__ import annotations

import io
import json
from typing import Any

import boto3
import httpx
from botocore.awsrequest import AWSResponse

PASSED_ON = ("Content-Type", "Accept", "X-Amzn-SageMaker-Custom-Attributes")


class _Raw(io.BytesIO):
    """A body botocore can read whole or as a stream."""

    def stream(self, **_: Any):
        yield self.getvalue()


def _forwarder(adapter_url: str):
    def send(request, **_: Any) -> AWSResponse:
        headers = {name: request.headers[name] for name in PASSED_ON if name in request.headers}
        reply = httpx.post(
            adapter_url + "/invocations", content=request.body, headers=headers, timeout=300
        )
        if reply.is_success:
            passed_back = {
                "Content-Type": reply.headers.get("content-type", "application/json"),
                "X-Amzn-Invoked-Production-Variant": "AllTraffic",
            }
            if "x-amzn-sagemaker-custom-attributes" in reply.headers:
                passed_back["X-Amzn-SageMaker-Custom-Attributes"] = reply.headers[
                    "x-amzn-sagemaker-custom-attributes"
                ]
            return AWSResponse(request.url, reply.status_code, passed_back, _Raw(reply.content))
        error = {
            "Message": f"Received client error ({reply.status_code}) from primary with message "
            f'"{reply.text}".',
            "OriginalStatusCode": reply.status_code,
            "OriginalMessage": reply.text,
        }
        headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-ErrorType": "ModelError"}
        return AWSResponse(request.url, 424, headers, _Raw(json.dumps(error).encode()))

    return send


def invoke_endpoint(
    adapter_url: str, body: dict[str, Any], *, custom_attributes: str | None = None
) -> tuple[int, Any, dict[str, Any]]:
    """(the container's status, its JSON body, the InvokeEndpoint response's fields)."""
    client = boto3.client(
        "sagemaker-runtime",
        region_name="eu-west-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    client.meta.events.register(
        "before-send.sagemaker-runtime.InvokeEndpoint", _forwarder(adapter_url)
    )
    call: dict[str, Any] = {
        "EndpointName": "decisions",
        "Body": json.dumps(body).encode(),
        "ContentType": "application/json",
        "Accept": "application/json",
    }
    if custom_attributes is not None:
        call["CustomAttributes"] = custom_attributes
    try:
        response = client.invoke_endpoint(**call)
    except client.exceptions.ModelError as error:
        return (
            error.response["OriginalStatusCode"],
            json.loads(error.response["OriginalMessage"]),
            {},
        )
    return 200, json.loads(response["Body"].read()), response
