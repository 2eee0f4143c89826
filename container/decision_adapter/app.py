"""The HTTP application: routes, lifespan (model loading) and error handlers."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .admission import Busy, ShuttingDown
from .auth import authenticate
from .connections import limit_accept_error_logs
from .engine import EngineError
from .errors import RequestError, validation_details
from .formats import openai_chat, systemone
from .formats.decision import DecisionRequest
from .generation import GenerationResult
from .http_body import read_json
from .logs import RequestLog
from .model_files import ModelFileError
from .native_libraries import log_model_loaded
from .openapi import openapi_document
from .prompts import ChatTemplateError
from .sagemaker import EchoCustomAttributes, forced_format
from .service import DecisionService
from .settings import Settings

log = logging.getLogger("decision_adapter")


# --- routes ----------------------------------------------------------------------------
async def ping(request: Request) -> Response:
    service: DecisionService | None = request.app.state.service
    if service is None:
        return JSONResponse({"status": "loading"}, status_code=503)
    return JSONResponse({"status": "ok", "model": service.model_name})


async def _read_body(request: Request) -> Any:
    settings = request.app.state.settings
    return await read_json(request, settings.max_body_bytes, settings.body_timeout_s)


def _validated(model: type[BaseModel], body: Any) -> Any:
    if not isinstance(body, dict):
        raise RequestError(422, "body: expected a JSON object", field="body")
    return model.model_validate(body)


def _service(request: Request) -> DecisionService:
    service = request.app.state.service
    if service is None:
        raise Busy(retry_after_s=5)
    return service


def _shape(body: Any) -> str | None:
    """The wire format a body's shape says it is written in."""
    if isinstance(body, dict):
        if "messages" in body:
            return "chat"
        if "decision" in body or "decisions" in body:
            return "decision"
        if "questions" in body:
            return "systemone"
    return None


async def invocations(request: Request) -> Response:
    """SageMaker's one route: the body's shape chooses the wire format, unless the custom
    attributes header forces one (`format=systemone|decision|chat`)."""
    forced = forced_format(request.headers)
    if forced == "systemone":
        _speak_systemone(request)  # even a malformed body is answered in System One's format
    body = await _read_body(request)
    wire_format = forced or _shape(body)
    if wire_format == "chat":
        return await _chat(request, _validated(openai_chat.ChatRequest, body))
    if wire_format == "decision":
        return await _decide(request, _validated(DecisionRequest, body))
    if wire_format == "systemone":
        _speak_systemone(request)
        return await _system_one(request, _validated(systemone.SystemOneRequest, body))
    raise RequestError(
        422,
        "body: expected one of `decision`, `decisions` (decision scoring), `questions` "
        "(System One) or `messages` (chat)",
        field="body",
    )


async def chat_completions(request: Request) -> Response:
    body = await _read_body(request)
    return await _chat(request, _validated(openai_chat.ChatRequest, body))


async def system_one(request: Request) -> Response:
    body = await _read_body(request)
    return await _system_one(request, _validated(systemone.SystemOneRequest, body))


async def openapi(request: Request) -> Response:
    return JSONResponse(openapi_document())


async def stats(request: Request) -> Response:
    return JSONResponse(_service(request).stats())


async def models(request: Request) -> Response:
    return JSONResponse(_service(request).models())


async def _system_one(request: Request, system_one_request: systemone.SystemOneRequest) -> Response:
    response = await _service(request).system_one(system_one_request)
    request.scope["state"]["log_fields"].update(
        kind="systemone", questions=len(system_one_request.questions), **response["x_timing"]
    )
    return JSONResponse(response)


async def _decide(request: Request, decision_request: DecisionRequest) -> Response:
    response = await _service(request).decide(decision_request)
    timing = response.get("timing") or response["result"]["timing"]
    request.scope["state"]["log_fields"].update(
        kind="decision", decisions=len(decision_request.items), **timing
    )
    return JSONResponse(response)


async def _chat(request: Request, chat: openai_chat.ChatRequest) -> Response:
    service = _service(request)
    model = chat.model or service.model_name
    cid = openai_chat.completion_id()
    tokens, max_tokens = await service.prepare_chat(chat)
    result = GenerationResult()
    deltas = service.runner.stream(lambda: service.chat_deltas(chat, tokens, max_tokens, result))
    first = await anext(deltas, None)  # admission happens here: a 503 is still possible
    request.scope["state"]["log_fields"].update(kind="chat", prompt_tokens=len(tokens))
    if not chat.stream:
        pieces = [] if first is None else [first]
        try:
            async for text in deltas:
                pieces.append(text)
                if await request.is_disconnected():
                    break  # nobody is waiting: free the model instead of finishing the answer
        finally:
            await deltas.aclose()
        request.scope["state"]["log_fields"].update(completion_tokens=result.completion_tokens)
        return JSONResponse(
            openai_chat.encode_completion(
                cid=cid,
                model=model,
                text="".join(pieces),
                finish_reason=result.finish_reason,
                prompt_tokens=len(tokens),
                completion_tokens=result.completion_tokens,
            )
        )

    async def events() -> AsyncIterator[str]:
        def sse(payload: dict) -> str:
            return f"data: {json.dumps(payload)}\n\n"

        try:
            yield sse(
                openai_chat.encode_chunk(
                    cid=cid, model=model, delta={"role": "assistant", "content": ""}
                )
            )
            if first is not None:
                yield sse(openai_chat.encode_chunk(cid=cid, model=model, delta={"content": first}))
                try:
                    async for text in deltas:
                        yield sse(
                            openai_chat.encode_chunk(cid=cid, model=model, delta={"content": text})
                        )
                except ShuttingDown as error:  # the status is sent: end the stream with an error
                    yield sse(
                        {
                            "error": {
                                "message": str(error),
                                "type": "server_shutting_down",
                                "retryable": True,
                            }
                        }
                    )
                    yield "data: [DONE]\n\n"
                    return
            usage = {
                "prompt_tokens": len(tokens),
                "completion_tokens": result.completion_tokens,
                "total_tokens": len(tokens) + result.completion_tokens,
            }
            yield sse(
                openai_chat.encode_chunk(
                    cid=cid, model=model, delta={}, finish_reason=result.finish_reason, usage=usage
                )
            )
            yield "data: [DONE]\n\n"
        finally:
            await deltas.aclose()

    return StreamingResponse(events(), media_type="text/event-stream")


# --- errors ----------------------------------------------------------------------------
# One place maps domain errors to responses, in the wire format the route speaks: the adapter's
# own `{"error", "error_type", ...}`, or System One's `detail` shapes.
SYSTEM_ONE = "systemone"


def _speak_systemone(request: Request) -> None:
    request.scope["state"]["wire_format"] = SYSTEM_ONE


def _speaks_systemone(request: Request) -> bool:
    return request.scope.get("state", {}).get("wire_format") == SYSTEM_ONE


def _error(
    request: Request,
    status: int,
    message: str,
    *,
    error_type: str,
    field: str | None = None,
    retryable: bool = False,
    detail: list | None = None,
    headers: dict | None = None,
    location: tuple | None = None,
) -> JSONResponse:
    if _speaks_systemone(request):
        status, body = systemone.error_body(status, error_type, message, field, location)
        return JSONResponse(body, status_code=status, headers=headers)
    body: dict[str, Any] = {"error": message, "error_type": error_type, "retryable": retryable}
    if field is not None:
        body["field"] = field
    if detail is not None:
        body["detail"] = detail
    return JSONResponse(body, status_code=status, headers=headers)


async def on_request_error(request: Request, error: RequestError) -> Response:
    return _error(
        request,
        error.status,
        error.message,
        error_type=error.error_type,
        field=error.field,
        headers=error.headers,
        location=error.location,
    )


async def on_validation_error(request: Request, error: ValidationError) -> Response:
    if _speaks_systemone(request):
        return JSONResponse(systemone.validation_error_body(error), status_code=422)
    detail = validation_details(error)
    first = detail[0]
    return _error(
        request,
        422,
        f"{first['field'] or 'body'}: {first['message']}",
        error_type="validation_error",
        field=first["field"] or "body",
        detail=detail,
    )


async def on_chat_template_error(request: Request, error: ChatTemplateError) -> Response:
    # Only chat renders the client's messages through the template at request time; a template
    # that cannot render a decision was refused at start-up.
    return _error(
        request,
        422,
        f"messages: the model's chat template refused this conversation " f"({error})",
        error_type="validation_error",
        field="messages",
    )


async def on_busy(request: Request, error: Busy) -> Response:
    return _error(
        request,
        503,
        str(error),
        error_type="overloaded",
        retryable=True,
        headers={"Retry-After": str(error.retry_after_s)},
    )


async def on_engine_error(request: Request, error: EngineError) -> Response:
    log.error("engine failure", extra={"fields": {"error": str(error)}})
    return _error(request, 500, f"model failure: {error}", error_type="engine_error")


def public(endpoint, *, wire_format: str | None = None):
    """A /v1 route: errors in its wire format, and the bearer key when one is configured."""

    async def route(request: Request) -> Response:
        if wire_format == SYSTEM_ONE:
            _speak_systemone(request)
        authenticate(request, request.app.state.settings.api_key)
        return await endpoint(request)

    return route


# --- application -----------------------------------------------------------------------
def _load_failure(error: Exception) -> str:
    """One line: the expected failures say what is wrong; anything else says what it was."""
    if isinstance(error, (ModelFileError, EngineError, OSError, ValueError)):
        text = str(error)
    else:
        text = f"unexpected {type(error).__name__} while loading the model: {error}"
    return " ".join(text.split())


def create_app(settings: Settings | None = None, *, on_startup_failure=None) -> Starlette:
    settings = settings or Settings.from_environment()

    @asynccontextmanager
    async def lifespan(app: Starlette):
        app.state.settings = settings
        app.state.service = None
        app.state.startup_error = None
        limit_accept_error_logs(asyncio.get_running_loop())

        async def load() -> None:
            try:
                app.state.service = await asyncio.to_thread(DecisionService, settings)
                service = app.state.service
                log_model_loaded(service.model_info, service.engine, settings.n_gpu_layers)
            except Exception as error:  # noqa: BLE001 - whatever stops loading must end the process
                reason = _load_failure(error)
                app.state.startup_error = reason
                log.error(f"cannot serve: {reason}")
                if on_startup_failure is not None:
                    on_startup_failure(reason)

        # Load in the background so the socket accepts connections (and /ping answers 503)
        # while a large model is checksummed and mapped.
        loader = asyncio.create_task(load())
        try:
            yield
        finally:
            await loader
            if app.state.service is not None:
                app.state.service.close()

    application = Starlette(
        routes=[
            Route("/ping", ping, methods=["GET"]),
            Route("/invocations", invocations, methods=["POST"]),
            Route("/v1/chat/completions", public(chat_completions), methods=["POST"]),
            Route("/v1/systemone", public(system_one, wire_format=SYSTEM_ONE), methods=["POST"]),
            Route("/v1/models", public(models, wire_format=SYSTEM_ONE), methods=["GET"]),
            Route("/stats", public(stats), methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
        middleware=[Middleware(RequestLog), Middleware(EchoCustomAttributes)],
        exception_handlers={
            RequestError: on_request_error,
            ValidationError: on_validation_error,
            Busy: on_busy,
            EngineError: on_engine_error,
            ChatTemplateError: on_chat_template_error,
        },
        lifespan=lifespan,
    )
    # `/v1/models/` is a 404, not a redirect built from the client's Host header.
    application.router.redirect_slashes = False
    return application
