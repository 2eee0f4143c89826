"""OpenAI-compatible chat completions: request schema and response/stream encoders."""

from __future__ import annotations

import datetime
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator

from ..admission import ShuttingDown
from ..contract import Chat, Generated, ModelService, TextDelta
from ..limits import LimitExceeded
from .base import Call, EventStream, WireFormat


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: StrictStr


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_call_id, ... are accepted, not used
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: StrictStr | list[TextPart]

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatRequest(BaseModel):
    # OpenAI clients send many optional knobs; unknown ones are accepted and ignored like
    # other OpenAI-compatible servers do.
    model_config = ConfigDict(extra="allow")
    model: StrictStr | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    seed: int | None = None
    stop: StrictStr | list[StrictStr] | None = None
    stream: bool = False
    n: int = Field(1, ge=1, le=1)

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, stop: str | list[str] | None) -> list[str] | None:
        stops = [stop] if isinstance(stop, str) else stop
        if stops is not None and (len(stops) > 4 or any(not s for s in stops)):
            raise ValueError("at most 4 non-empty stop strings")
        return stops

    def as_chat(self) -> Chat:
        return Chat(
            messages=[(m.role, m.text) for m in self.messages],
            max_tokens=self.max_completion_tokens or self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            stop=self.stop,
        )

    def field_of(self, error: LimitExceeded) -> str:
        """The field a limit names: the prompt is the messages; the cap names what was sent."""
        if error.subject != "max_tokens":
            return "messages"
        return "max_completion_tokens" if self.max_completion_tokens else "max_tokens"


def encode_models(names: list[str], release_date: str) -> dict[str, Any]:
    """OpenAI's model list (`models.list()`), as llama-server serves it beside other shapes.
    `created` is the release date (YYYY-MM-DD), so the list does not change between calls."""
    created = int(
        datetime.datetime.fromisoformat(release_date).replace(tzinfo=datetime.UTC).timestamp()
    )
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "local"}
            for name in names
        ],
    }


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def encode_completion(*, cid: str, model: str, result: Generated) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.text},
                "finish_reason": result.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": usage(result),
    }


def encode_chunk(
    *,
    cid: str,
    model: str,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    chunk = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def sse(payload: dict[str, Any] | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


def usage(result: Generated) -> dict[str, int]:
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    }


class ChatFormat(WireFormat):
    async def answer(
        self, request: ChatRequest, service: ModelService, call: Call
    ) -> dict[str, Any] | EventStream:
        model = request.model or service.identity.name
        cid = completion_id()
        events = service.generate(request.as_chat())
        try:  # limits, then admission: a 4xx or a 503 is still possible here
            first = await anext(events)
        except LimitExceeded as error:
            raise error.at(request.field_of(error)) from None
        call.log.update(kind="chat")
        if request.stream:
            return EventStream(self._stream(first, events, cid, model, call))
        try:
            event = first
            while not isinstance(event, Generated):
                if call.is_disconnected is not None and await call.is_disconnected():
                    return {}  # nobody is waiting: free the model instead of finishing
                event = await anext(events)
        finally:
            await events.aclose()
        call.log.update(
            prompt_tokens=event.prompt_tokens, completion_tokens=event.completion_tokens
        )
        return encode_completion(cid=cid, model=model, result=event)

    async def _stream(
        self,
        first: TextDelta | Generated,
        events: AsyncIterator[TextDelta | Generated],
        cid: str,
        model: str,
        call: Call,
    ) -> AsyncIterator[str]:
        def chunk(delta: dict[str, Any], **fields: Any) -> str:
            return sse(encode_chunk(cid=cid, model=model, delta=delta, **fields))

        try:
            yield chunk({"role": "assistant", "content": ""})
            event = first
            while isinstance(event, TextDelta):
                yield chunk({"content": event.text})
                try:
                    event = await anext(events)
                except ShuttingDown as error:  # the status is sent: end with an error event
                    message = {"message": str(error), "type": "server_shutting_down"}
                    yield sse({"error": {**message, "retryable": True}})
                    yield sse("[DONE]")
                    return
            call.log.update(
                prompt_tokens=event.prompt_tokens, completion_tokens=event.completion_tokens
            )
            yield chunk({}, finish_reason=event.finish_reason, usage=usage(event))
            yield sse("[DONE]")
        finally:
            await events.aclose()


FORMAT = ChatFormat("chat", ChatRequest, shape_keys=("messages",), shape_text="`messages` (chat)")
