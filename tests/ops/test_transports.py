"""The two transports on their own: SageMaker errors through botocore's Stubber, HTTP through a
local server that records what arrived."""

import io
import json
import socket

import pytest
from botocore.exceptions import ClientError
from botocore.response import StreamingBody

from ops.retry import Retryable
from ops.transports import (
    HttpTransport,
    InvokeFailed,
    SageMakerTransport,
    _classify_client_error,
    http_base_url,
)
from tests.support.fake_service import overload_bodies
from tests.support.http_stub import http_stub


def test_sagemaker_reply_carries_body_and_content_type(runtime):
    client, stubber = runtime
    stubber.add_response(
        "invoke_endpoint",
        {"Body": StreamingBody(io.BytesIO(b"{}"), 2), "ContentType": "application/json"},
    )
    reply = SageMakerTransport(client, "e").send(b"{}")
    assert (reply.body, reply.content_type) == (b"{}", "application/json")


def test_container_error_keeps_its_status_and_message(runtime):
    client, stubber = runtime
    stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        service_message="Received client error (422)",
        http_status_code=424,
        modeled_fields={"OriginalStatusCode": 422, "OriginalMessage": '{"error": "no options"}'},
    )
    with pytest.raises(InvokeFailed) as failed:
        SageMakerTransport(client, "e").send(b"{}")
    assert str(failed.value) == "container answered 422"
    assert (failed.value.status, failed.value.body) == (422, '{"error": "no options"}')


def test_container_error_without_original_message_falls_back_to_the_error_message(runtime):
    client, stubber = runtime
    stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        service_message="Received server error (500)",
        http_status_code=424,
        modeled_fields={"OriginalStatusCode": 500},
    )
    with pytest.raises(InvokeFailed) as failed:
        SageMakerTransport(client, "e").send(b"{}")
    assert failed.value.body == "Received server error (500)"


def test_container_503_is_retryable_with_its_retry_after(runtime):
    client, stubber = runtime
    stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        http_status_code=424,
        modeled_fields={"OriginalStatusCode": 503},
        response_meta={"HTTPHeaders": {"retry-after": "7"}},
    )
    with pytest.raises(Retryable) as refused:
        SageMakerTransport(client, "e").send(b"{}")
    assert (str(refused.value), refused.value.retry_after) == ("container answered 503", 7.0)


def test_sagemaker_throttling_is_retryable_with_its_retry_after(runtime):
    client, stubber = runtime
    stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ThrottlingException",
        http_status_code=400,
        response_meta={"HTTPHeaders": {"retry-after": "3"}},
    )
    with pytest.raises(Retryable) as refused:
        SageMakerTransport(client, "e").send(b"{}")
    assert str(refused.value) == "SageMaker: ThrottlingException"
    assert refused.value.retry_after == 3.0


def test_other_sagemaker_errors_are_final_with_code_message_and_http_status(runtime):
    client, stubber = runtime
    stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ValidationError",
        service_message="Endpoint e of account 1 not found.",
        http_status_code=400,
    )
    with pytest.raises(InvokeFailed) as failed:
        SageMakerTransport(client, "e").send(b"{}")
    assert str(failed.value) == "SageMaker: ValidationError: Endpoint e of account 1 not found."
    assert failed.value.status == 400


def test_http_post_joins_url_and_path_and_sends_json_headers():
    answer = (200, {"Content-Type": "application/json; charset=utf-8"}, b'{"ok": 1}')
    with http_stub(answer) as server:
        transport = HttpTransport(
            server.url + "/", path="v1/systemone", custom_attributes="format=chat"
        )
        reply = transport.send(b'{"q": 1}')
    assert (reply.body, reply.content_type) == (b'{"ok": 1}', "application/json; charset=utf-8")
    [received] = server.received
    assert (received.method, received.path, received.body) == ("POST", "/v1/systemone", b'{"q": 1}')
    headers = received.headers
    assert headers["Content-Type"] == headers["Accept"] == "application/json"
    assert headers["X-Amzn-SageMaker-Custom-Attributes"] == "format=chat"


def test_http_default_path_is_invocations_without_custom_attributes():
    with http_stub() as server:
        HttpTransport(server.url).send(b"{}")
    [received] = server.received
    assert received.path == "/invocations"
    assert "X-Amzn-SageMaker-Custom-Attributes" not in received.headers


def test_http_503_is_retryable_with_retry_after():
    with http_stub((503, {"Retry-After": "5"}, b'{"error": "busy"}')) as server:
        with pytest.raises(Retryable) as refused:
            HttpTransport(server.url).send(b"{}")
    assert (str(refused.value), refused.value.retry_after) == ("HTTP 503", 5.0)


def test_http_503_without_the_header_takes_retry_after_from_the_body():
    body = json.dumps({"error": "busy", "retryable": True, "retry_after_s": 3}).encode()
    with http_stub((503, {}, body)) as server:
        with pytest.raises(Retryable) as refused:
            HttpTransport(server.url).send(b"{}")
    assert refused.value.retry_after == 3.0


def test_http_4xx_is_final_with_status_and_body_text():
    with http_stub((413, {}, b'{"error": "body too large \xe2\x80\x94 256 KiB"}\xff')) as server:
        with pytest.raises(InvokeFailed) as failed:
            HttpTransport(server.url).send(b"{}")
    assert str(failed.value) == "HTTP 413"
    assert failed.value.status == 413
    assert failed.value.body == '{"error": "body too large \u2014 256 KiB"}\ufffd'


def test_unreachable_url_names_the_url():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    with pytest.raises(InvokeFailed, match=f"cannot reach http://127.0.0.1:{port}/invocations: "):
        HttpTransport(f"http://127.0.0.1:{port}").send(b"{}")


def test_a_server_that_never_answers_fails_after_the_timeout_not_with_a_traceback():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # accepts the connection, never answers
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with pytest.raises(InvokeFailed, match=f"no answer from {url}/invocations within 0.2s"):
            HttpTransport(url, timeout_seconds=0.2).send(b"{}")
    finally:
        listener.close()


@pytest.mark.parametrize(
    "response,message,status,body",
    [
        ({}, "SageMaker: : ", None, None),
        ({"Error": {"Code": "InternalFailure"}}, "SageMaker: InternalFailure: ", None, None),
        (
            {"Error": {"Code": "ModelError"}, "OriginalStatusCode": 500},
            "container answered 500",
            500,
            "",
        ),
    ],
)
def test_sparse_client_errors_still_classify(response, message, status, body):
    """botocore fills Error and ResponseMetadata; a hand-raised ClientError may not."""
    failure = _classify_client_error(ClientError(response, "InvokeEndpoint"))
    assert isinstance(failure, InvokeFailed)
    assert (str(failure), failure.status, failure.body) == (message, status, body)


@pytest.mark.parametrize("wire_format", ["decision", "systemone", "chat", "decisions-openai"])
def test_a_container_503_behind_sagemaker_carries_retry_after_in_its_body(runtime, wire_format):
    """InvokeEndpoint drops the container's Retry-After header; the adapter's body repeats it."""
    client, stubber = runtime
    stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        service_message="Received server error (503)",
        http_status_code=424,
        modeled_fields={
            "OriginalStatusCode": 503,
            "OriginalMessage": overload_bodies(retry_after_s=2)[wire_format],
        },
    )
    with pytest.raises(Retryable) as refused:
        SageMakerTransport(client, "e").send(b"{}")
    assert refused.value.retry_after == 2.0


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "https://adapter.example", "HTTP://h"])
def test_an_http_or_https_url_with_a_host_is_taken(url):
    assert http_base_url(url) == url  # urlsplit lower-cases the scheme it reads
