"""The HTTP application: routes bound to their wire formats, the lifespan that loads the model,
and errors answered in the format of the route that met them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..contract import CLIENT_GONE, ModelService
from ..errors import (
    Busy,
    ChatTemplateError,
    EngineError,
    Loading,
    ModelFileError,
    OutOfTime,
    RequestError,
)
from ..formats import decision, openai_chat, openai_decisions, systemone
from ..formats.base import ADAPTER_ERRORS, Call, EventStream, Refused, WireFormat, format_of
from ..logs import RequestLog
from ..service.daemon_threads import on_daemon_thread
from ..service.decision_service import DecisionService
from ..service.identity import log_model_loaded
from ..settings import Settings
from . import jsonlines
from .auth import authenticate
from .body import media_type, off_loop, parsed_in_place, read_bytes, read_json
from .connections import limit_accept_error_logs
from .custom_attributes import CUSTOM_ATTRIBUTES, EchoCustomAttributes, forced_format
from .execution_parameters import execution_parameters
from .openapi import openapi_document

log = logging.getLogger("decision_adapter")

# The formats /invocations accepts, in the order a body's shape is tried.
INVOCATION_FORMATS: tuple[WireFormat, ...] = (
    openai_chat.FORMAT,
    decision.FORMAT,
    openai_decisions.FORMAT,  # before System One: both send `questions`
    systemone.FORMAT,
)
BY_NAME = {wire_format.name: wire_format for wire_format in INVOCATION_FORMATS}
ServiceFactory = Callable[[Settings], ModelService]


# --- errors ----------------------------------------------------------------------------
def error_response(wire_format: WireFormat, error: Exception) -> Response:
    """A domain error as a response in `wire_format`'s error body."""
    status, body, headers = error_parts(wire_format, error)
    return JSONResponse(body, status_code=status, headers=headers)


def error_parts(
    wire_format: WireFormat, error: Exception
) -> tuple[int, dict[str, Any], dict[str, str] | None]:
    """A domain error's status, body in `wire_format` and headers."""
    headers = None
    if isinstance(error, Refused):  # its body built where it was validated
        status, body = error.status, error.body
    elif isinstance(error, ValidationError):
        status, body = wire_format.validation_error_body(error)
    elif isinstance(error, RequestError):
        headers = error.headers
        status, body = wire_format.error_body(
            error.status,
            error.message,
            error_type=error.error_type,
            field=error.field,
            location=error.location,
        )
    elif isinstance(error, Busy):
        headers = {"Retry-After": str(error.retry_after_s)}
        status, body = wire_format.error_body(
            503,
            str(error),
            error_type="loading"
            if isinstance(error, Loading)
            else getattr(error, "error_type", "overloaded"),
            retryable=True,
            retry_after_s=error.retry_after_s,
        )
    elif isinstance(error, ChatTemplateError):
        # Only chat renders the client's messages through the template at request time; a
        # template that cannot render a decision was refused at start-up.
        status, body = wire_format.error_body(
            422,
            f"messages: the model's chat template refused this conversation ({error})",
            error_type="validation_error",
            field="messages",
        )
    else:
        log.error("engine failure", extra={"fields": {"error": str(error)}})
        status, body = wire_format.error_body(
            500, f"model failure: {error}", error_type="engine_error"
        )
    return status, body, headers


ANSWERED_ERRORS = (RequestError, ValidationError, Refused, Busy, ChatTemplateError, EngineError)


async def answered_in(wire_format: WireFormat, work: Awaitable[Response]) -> Response:
    try:
        return await work
    except ANSWERED_ERRORS as error:
        return error_response(wire_format, error)


# --- routes ----------------------------------------------------------------------------
def _service(request: Request) -> ModelService:
    service: ModelService | None = request.app.state.service
    if service is None:
        raise Loading(retry_after_s=5)
    return service


async def _read_body(request: Request) -> Any:
    settings = request.app.state.settings
    return await read_json(request, settings.max_body_bytes, settings.body_timeout_s)


async def _answer(wire_format: WireFormat, request: Request, body: Any) -> Response:
    if parsed_in_place(request):
        parsed = wire_format.parse(body)
    else:  # validating a large body, and building its errors, is CPU work: off the loop
        parsed = await off_loop(wire_format.parse_refusing, body)
    call = Call(log=request.scope["state"]["log_fields"], is_disconnected=request.is_disconnected)
    CLIENT_GONE.set(request.is_disconnected)  # this request's task and what it starts
    reply = await wire_format.answer(parsed, _service(request), call)
    if isinstance(reply, EventStream):
        return StreamingResponse(reply.events, media_type=reply.media_type)
    return JSONResponse(reply)


def _shape(body: Any) -> WireFormat:
    """The wire format a body's shape says it is written in."""
    return format_of(body, INVOCATION_FORMATS)


async def invocations(request: Request) -> Response:
    """SageMaker's one route: the body's shape chooses the wire format, unless the custom
    attributes header forces one (`format=chat|decision|systemone`); a forced format answers
    even a malformed body."""
    try:
        forced = forced_format(request.headers, list(BY_NAME))
    except RequestError as error:
        return error_response(ADAPTER_ERRORS, error)
    if media_type(request) in jsonlines.MEDIA_TYPES:
        answers_in = BY_NAME[forced] if forced is not None else ADAPTER_ERRORS
        return await answered_in(answers_in, _answer_lines(request, forced))
    if forced is not None:
        return await answered_in(BY_NAME[forced], answering(BY_NAME[forced])(request))
    try:
        body = await _read_body(request)
        wire_format = _shape(body)
    except RequestError as error:
        return error_response(ADAPTER_ERRORS, error)
    return await answered_in(wire_format, _answer(wire_format, request, body))


# The formats a JSON Lines body's lines may be written in: chat answers are not one line each.
LINE_FORMATS: tuple[WireFormat, ...] = (decision.FORMAT, openai_decisions.FORMAT, systemone.FORMAT)


def _line_error(wire_format: WireFormat, error: Exception) -> tuple[int, dict[str, Any]]:
    # A line past its own deadline is that line's answer (a batch job retrying the body would
    # meet the same line again); any other Busy ends the body.
    line_busy = isinstance(error, OutOfTime)
    if (isinstance(error, Busy) and not line_busy) or not isinstance(error, ANSWERED_ERRORS):
        raise error
    status, body, _ = error_parts(wire_format, error)
    return status, body


async def _answer_lines(request: Request, forced: str | None) -> Response:
    """A JSON Lines body (batch transform): limits, then every line parsed, then answered."""
    settings: Settings = request.app.state.settings
    if forced is not None and BY_NAME[forced] not in LINE_FORMATS:
        raise RequestError(
            415,
            f"{CUSTOM_ATTRIBUTES}: format={forced} cannot be sent as JSON Lines; its lines hold "
            f"{' or '.join(f.name for f in LINE_FORMATS)} bodies",
            field=CUSTOM_ATTRIBUTES,
            error_type="unsupported_media_type",
        )
    raw = await read_bytes(
        request,
        settings.max_jsonlines_bytes,
        settings.body_timeout_s,
        limit="DECISION_MAX_JSONLINES_BYTES",
    )
    lines = await asyncio.to_thread(
        jsonlines.parse,
        raw,
        formats=LINE_FORMATS,
        forced=BY_NAME[forced] if forced is not None else None,
        max_lines=settings.max_jsonlines_lines,
        max_line_bytes=settings.max_body_bytes,
        shapes=INVOCATION_FORMATS,
    )
    log = request.scope["state"]["log_fields"]
    CLIENT_GONE.set(request.is_disconnected)
    answers = await jsonlines.answer(
        lines,
        _service(request),
        log,
        _line_error,
        settings=settings,
        pace=request.app.state.line_pace,
        is_disconnected=request.is_disconnected,
    )
    encoded = await asyncio.to_thread(jsonlines.encode, answers)
    return Response(encoded, media_type=jsonlines.MEDIA_TYPE)


Endpoint = Callable[[Request], Awaitable[Response]]


def public(wire_format: WireFormat, respond: Endpoint) -> Endpoint:
    """A /v1 route answering in `wire_format`, behind the bearer key when one is configured."""

    async def work(request: Request) -> Response:
        authenticate(request, request.app.state.settings.api_key)
        return await respond(request)

    async def route(request: Request) -> Response:
        return await answered_in(wire_format, work(request))

    route.wire_format = wire_format  # type: ignore[attr-defined]  # for a wrong method's 405
    return route


def answering(wire_format: WireFormat) -> Endpoint:
    async def respond(request: Request) -> Response:
        return await _answer(wire_format, request, await _read_body(request))

    return respond


async def ping(request: Request) -> Response:
    service: ModelService | None = request.app.state.service
    if service is None:
        return JSONResponse({"status": "loading"}, status_code=503)
    return JSONResponse({"status": "ok", "model": service.identity.name})


async def models(request: Request) -> Response:
    """One body for both clients, as llama-server does: System One's `models` beside OpenAI's
    `object`/`data`. Each client reads its own keys and ignores the other's."""
    listed = systemone.FORMAT.models(_service(request).identity)
    names = [model["name"] for model in listed["models"]]
    return JSONResponse(
        {**openai_chat.encode_models(names, listed["models"][0]["release_date"]), **listed}
    )


async def stats(request: Request) -> Response:
    return JSONResponse(_service(request).stats())


async def openapi(request: Request) -> Response:
    return JSONResponse(openapi_document())


ROUTES = [
    Route("/ping", ping, methods=["GET"]),
    Route("/invocations", invocations, methods=["POST"]),
    Route("/execution-parameters", execution_parameters, methods=["GET"]),
    Route(
        "/v1/chat/completions",
        public(openai_chat.FORMAT, answering(openai_chat.FORMAT)),
        methods=["POST"],
    ),
    Route("/v1/systemone", public(systemone.FORMAT, answering(systemone.FORMAT)), methods=["POST"]),
    Route(
        "/v1/decisions",
        public(openai_decisions.FORMAT, answering(openai_decisions.FORMAT)),
        methods=["POST"],
    ),
    Route("/v1/models", public(systemone.FORMAT, models), methods=["GET"]),
    Route("/stats", public(ADAPTER_ERRORS, stats), methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
]


async def unrouted(request: Request, error: Exception) -> Response:
    """No route (404) or a wrong method (405): the JSON error body every other refusal has,
    naming what to change, in place of Starlette's plain text."""
    assert isinstance(error, HTTPException)  # Starlette's handler of a status code gets one
    path = request.url.path
    # A route that answers in a format of its own (public) answers a wrong method in it too.
    wire_format = getattr(request.scope.get("endpoint"), "wire_format", ADAPTER_ERRORS)
    headers = error.headers
    if error.status_code == 405:
        allowed = (headers or {}).get("Allow", "")
        status, body = wire_format.error_body(
            405,
            f"method: {request.method} is not allowed on {path}; use {allowed}",
            error_type="method_not_allowed",
            field="method",
        )
    else:
        routes = ", ".join(sorted({route.path for route in ROUTES}))
        shown = path if len(path) <= 200 else f"{path[:200]}... ({len(path)} characters)"
        status, body = wire_format.error_body(
            error.status_code,
            f"path: no route {shown}; the routes are {routes}",
            error_type="not_found",
            field="path",
        )
    return JSONResponse(body, status_code=status, headers=headers)


# --- application -----------------------------------------------------------------------
def _load_failure(error: Exception) -> str:
    """One line: the expected failures say what is wrong; anything else says what it was."""
    if isinstance(error, (ModelFileError, EngineError, OSError, ValueError)):
        text = str(error)
    else:
        text = f"unexpected {type(error).__name__} while loading the model: {error}"
    return " ".join(text.split())


def create_app(
    settings: Settings | None = None,
    *,
    service_factory: ServiceFactory = DecisionService,
    on_startup_failure: Callable[[str], None] | None = None,
) -> Starlette:
    """`service_factory(settings)` builds the model service, in a thread, once serving."""
    settings = settings or Settings.from_environment()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.settings = settings
        app.state.service = None
        app.state.line_pace = jsonlines.LinePace()
        limit_accept_error_logs(asyncio.get_running_loop())

        async def load() -> None:
            try:
                service = await on_daemon_thread(lambda: service_factory(settings), "load")
                app.state.service = service
                log_model_loaded(service, settings.n_gpu_layers)
            except Exception as error:  # noqa: BLE001 - whatever stops loading must end the process
                reason = _load_failure(error)
                log.error(f"cannot serve: {reason}")
                if on_startup_failure is not None:
                    on_startup_failure(reason)

        # Load in the background so the socket accepts connections (and /ping answers 503)
        # while a large model is checksummed and mapped.
        loader = asyncio.create_task(load())
        try:
            yield
        finally:
            if not loader.done():  # a SIGTERM while loading: the process exits without it
                loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loader
            if app.state.service is not None:
                app.state.service.close()

    application = Starlette(
        routes=ROUTES,
        middleware=[
            Middleware(RequestLog, endpoint=settings.metrics_endpoint),
            Middleware(EchoCustomAttributes),
        ],
        exception_handlers={404: unrouted, 405: unrouted},
        lifespan=lifespan,
    )
    # `/v1/models/` is a 404, not a redirect built from the client's Host header.
    application.router.redirect_slashes = False
    return application
