"""SageMaker's `X-Amzn-SageMaker-Custom-Attributes` header: reading it and echoing it back.

SageMaker passes the caller's custom attributes to the container unchanged and returns the
container's response header of the same name to the caller. We read `key=value` pairs from it
(`format=systemone|decision|decisions-openai|chat` forces a wire format on /invocations) and
echo it on every response, so a caller can see that its attributes arrived.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import RequestError

CUSTOM_ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"


def custom_attributes(headers: Headers) -> list[tuple[str, str]]:
    """`format=systemone; trace=abc` -> [("format", "systemone"), ("trace", "abc")], in order;
    `,` separates too. Items without `=` are opaque values of the caller's own and are skipped."""
    pairs = (item.partition("=") for item in re.split(r"[;,]", headers.get(CUSTOM_ATTRIBUTES, "")))
    return [
        (key.strip().lower(), value.strip()) for key, found, value in pairs if found and key.strip()
    ]


def forced_format(headers: Headers, names: Sequence[str]) -> str | None:
    """The `format=` attribute, one of the wire formats `names`, if the caller set one."""
    given = sorted({value.lower() for key, value in custom_attributes(headers) if key == "format"})
    if not given:
        return None
    if len(given) > 1:  # answering in one of them would drop the other unannounced
        raise RequestError(
            400,
            f"{CUSTOM_ATTRIBUTES}: format given as {' and '.join(given)}; send one",
            field=CUSTOM_ATTRIBUTES,
            error_type="invalid_custom_attributes",
        )
    (wire_format,) = given
    if wire_format not in names:
        raise RequestError(
            400,
            f"{CUSTOM_ATTRIBUTES}: format={wire_format!r}, expected one of {', '.join(names)}",
            field=CUSTOM_ATTRIBUTES,
            error_type="invalid_custom_attributes",
        )
    return wire_format


class EchoCustomAttributes:
    """ASGI middleware: copy the request's custom attributes onto the response, errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        value = Headers(scope=scope).get(CUSTOM_ATTRIBUTES)
        if value is None:
            await self.app(scope, receive, send)
            return

        async def send_with_echo(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    (CUSTOM_ATTRIBUTES.lower().encode(), value.encode("latin-1")),
                ]
            await send(message)

        await self.app(scope, receive, send_with_echo)
