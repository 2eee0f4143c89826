"""SageMaker Runtime's InvokeEndpoint in front of a running adapter, for a real boto3 client.

botocore builds the request and parses the reply as it does against AWS; in between, the
request's body, content headers and custom attributes go to the adapter's /invocations (as
SageMaker forwards them) and its answer comes back as InvokeEndpoint documents it: a 200 with
the body and its Content-Type, any other status as a 424 ModelError carrying OriginalStatusCode and
OriginalMessage, the container's own headers (Retry-After among them) dropped. The reply is
handed back through botocore's `before-send` event, as moto's in-process mode does, so nothing
leaves the machine but the call to the adapter.
"""

from __future__ import annotations

import io
import json
import re
import urllib.parse
from typing import Any

import boto3
import httpx
from botocore.awsrequest import AWSResponse

REGION = "eu-west-1"
PATH = re.compile(r"^/endpoints/(?P<endpoint>[^/]+)/invocations$")


class _Raw(io.BytesIO):
    """A response body as botocore reads it: `read` for a stream, `stream` for the content."""

    def stream(self, **_):
        while chunk := self.read(65536):
            yield chunk


def _reply(url: str, status: int, headers: dict[str, str], body: bytes) -> AWSResponse:
    return AWSResponse(url, status, {**headers, "Content-Length": str(len(body))}, _Raw(body))


# The request headers SageMaker passes on to the container; it strips every other.
PASSED_ON = ("Content-Type", "Accept", "X-Amzn-SageMaker-Custom-Attributes")


def runtime_in_front_of(adapter_url: str, invoked: list[str] | None = None):
    """A sagemaker-runtime client whose InvokeEndpoint reaches the adapter at `adapter_url`;
    the endpoint name of each call is appended to `invoked`."""
    client = boto3.client(
        "sagemaker-runtime",
        region_name=REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    http = httpx.Client(timeout=60)  # InvokeEndpoint's own limit

    def invoke_endpoint(request, **_) -> AWSResponse:
        endpoint = PATH.match(urllib.parse.urlsplit(request.url).path)["endpoint"]
        if invoked is not None:
            invoked.append(urllib.parse.unquote(endpoint))
        forwarded = {k: request.headers[k] for k in PASSED_ON if k in request.headers}
        answer = http.post(adapter_url + "/invocations", content=request.body, headers=forwarded)
        if answer.status_code == 200:
            passed_back = {"Content-Type": answer.headers.get("content-type", "application/json")}
            if "x-amzn-sagemaker-custom-attributes" in answer.headers:
                passed_back["X-Amzn-SageMaker-Custom-Attributes"] = answer.headers[
                    "x-amzn-sagemaker-custom-attributes"
                ]
            return _reply(request.url, 200, passed_back, answer.content)
        side = "client" if answer.status_code < 500 else "server"
        error = {
            "ErrorCode": f"{side.upper()}_ERROR_FROM_MODEL",
            "Message": f"Received {side} error ({answer.status_code}) from primary with message "
            f'"{answer.text}".',
            "OriginalStatusCode": answer.status_code,
            "OriginalMessage": answer.text,
            "LogStreamArn": f"arn:aws:logs:{REGION}:123456789012:log-group:/aws/sagemaker/"
            f"Endpoints/{endpoint}",
        }
        headers = {"Content-Type": "application/json", "x-amzn-ErrorType": "ModelError"}
        return _reply(request.url, 424, headers, json.dumps(error).encode())

    client.meta.events.register("before-send.sagemaker-runtime.InvokeEndpoint", invoke_endpoint)
    return client


def invoke_endpoint(
    adapter_url: str, body: dict[str, Any], *, custom_attributes: str | None = None
) -> tuple[int, Any, dict[str, Any]]:
    """(the container's status, its JSON body, the InvokeEndpoint response's fields)."""
    client = runtime_in_front_of(adapter_url)
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
