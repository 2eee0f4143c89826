"""Two ways to reach the adapter: a SageMaker endpoint, or its HTTP port directly."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from ops.clients import Client
from ops.retry import Retryable, parse_retry_after, retry_after_in_body

RETRYABLE_STATUS = {429, 503}
# SageMaker's own transient refusals (as opposed to the container's, which arrive as ModelError).
RETRYABLE_AWS_CODES = {
    "ThrottlingException",
    "Throttling",
    "TooManyRequestsException",
    "ServiceUnavailable",
}
JSON = "application/json"


@dataclass(frozen=True)
class Reply:
    body: bytes
    content_type: str | None


class InvokeFailed(Exception):
    """A final failure: the request itself was refused (4xx) or the server failed (5xx)."""

    def __init__(self, message: str, status: int | None = None, body: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class SageMakerTransport:
    def __init__(
        self, client: Client, endpoint_name: str, *, custom_attributes: str | None = None
    ) -> None:
        self._client = client
        self._endpoint_name = endpoint_name
        self._custom_attributes = custom_attributes

    def send(self, body: bytes) -> Reply:
        request: dict[str, Any] = {
            "EndpointName": self._endpoint_name,
            "Body": body,
            "ContentType": JSON,
            "Accept": JSON,
        }
        if self._custom_attributes:
            request["CustomAttributes"] = self._custom_attributes
        try:
            response = self._client.invoke_endpoint(**request)
        except ClientError as exc:
            raise _classify_client_error(exc) from exc
        return Reply(response["Body"].read(), response.get("ContentType"))


def _classify_client_error(exc: ClientError) -> Exception:
    response = exc.response
    code = response.get("Error", {}).get("Code", "")
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    retry_after = parse_retry_after(headers.get("retry-after"))
    if code == "ModelError":
        status = response.get("OriginalStatusCode")
        message = response.get("OriginalMessage") or response.get("Error", {}).get("Message", "")
        if status in RETRYABLE_STATUS:
            if retry_after is None:  # SageMaker drops the header; the adapter repeats it
                retry_after = retry_after_in_body(response.get("OriginalMessage"))
            return Retryable(f"container answered {status}", retry_after)
        return InvokeFailed(f"container answered {status}", status, message)
    if code in RETRYABLE_AWS_CODES:
        return Retryable(f"SageMaker: {code}", retry_after)
    message = response.get("Error", {}).get("Message", "")
    return InvokeFailed(
        f"SageMaker: {code}: {message}", response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    )


class InvalidUrl(ValueError):
    """Not an http(s) URL with a host: urllib would fail with a traceback ("unknown url
    type") or try another protocol (ftp://)."""


def http_base_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    try:
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number from 0 to 65535
        valid = False
    if not valid:
        raise InvalidUrl(f"expects an http(s) URL such as http://127.0.0.1:8080, got {url!r}")
    return url


class HttpTransport:
    """POST to a running adapter, e.g. http://127.0.0.1:8080 (make run) or a port-forward."""

    def __init__(
        self,
        base_url: str,
        *,
        path: str = "/invocations",
        timeout_seconds: float = 65.0,
        custom_attributes: str | None = None,
    ):
        self._url = http_base_url(base_url).rstrip("/") + "/" + path.lstrip("/")
        self._timeout = timeout_seconds
        self._custom_attributes = custom_attributes

    def send(self, body: bytes) -> Reply:
        headers = {"Content-Type": JSON, "Accept": JSON}
        if self._custom_attributes:
            headers["X-Amzn-SageMaker-Custom-Attributes"] = self._custom_attributes
        request = urllib.request.Request(self._url, data=body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                return Reply(response.read(), response.headers.get("Content-Type"))
        except urllib.error.HTTPError as err:
            text = err.read().decode("utf-8", "replace")
            if err.code in RETRYABLE_STATUS:
                retry_after = parse_retry_after(err.headers.get("Retry-After"))
                if retry_after is None:
                    retry_after = retry_after_in_body(text)
                raise Retryable(f"HTTP {err.code}", retry_after) from err
            raise InvokeFailed(f"HTTP {err.code}", err.code, text) from err
        except urllib.error.URLError as err:
            raise InvokeFailed(f"cannot reach {self._url}: {err.reason}") from err
        except TimeoutError as err:  # urllib wraps only connect timeouts in URLError
            raise InvokeFailed(f"no answer from {self._url} within {self._timeout:g}s") from err
