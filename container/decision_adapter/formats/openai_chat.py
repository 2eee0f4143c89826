"""OpenAI-compatible chat completions: request schema and response/stream encoders."""

from __future__ import annotations

import datetime
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationInfo,
    create_model,
    field_validator,
)

from .. import sampling
from ..contract import (
    MAX_REQUEST_ITEMS,
    Chat,
    Generated,
    ModelService,
    SampledToken,
    TextDelta,
    TokenChoice,
)
from ..errors import LimitExceeded, ShuttingDown
from .base import Call, EventStream, WireFormat
from .fields import at_most

# Strict types throughout: "stream": "yes" or "n": true is a 422, not a guess, and the OpenAPI
# schema says what the validators accept.
STRICT = ConfigDict(extra="forbid", strict=True)
MAX_STOPS = 4  # OpenAI's
MAX_METADATA = 16  # OpenAI's


def _refuse_unless_null(value: Any) -> None:
    if value is not None:
        raise ValueError("not supported by this server; remove the field")
    return None


class TextPart(BaseModel):
    model_config = STRICT
    type: Literal["text"] = Field(description="A text part, the only kind read.")
    text: StrictStr = Field(description="The part's text.")


# OpenAI message fields this server does not use: null (as an SDK echoes an answer back into
# the conversation) or a 422 naming the field, never silently dropped.
UNSUPPORTED_MESSAGE_FIELDS = (
    "name",
    "tool_calls",
    "tool_call_id",
    "function_call",
    "refusal",
    "audio",
    "annotations",
)


class _MessageFields(BaseModel):
    model_config = STRICT
    role: Literal["system", "developer", "user", "assistant", "tool"] = Field(
        description="Who speaks; the chat template renders each role its way."
    )
    content: Annotated[StrictStr | list[TextPart], at_most(MAX_REQUEST_ITEMS)] = Field(
        description="Text, or text parts joined one per line (as llama-server joins them)."
    )

    @field_validator(*UNSUPPORTED_MESSAGE_FIELDS, mode="before", check_fields=False)
    @classmethod
    def _unsupported(cls, value: Any) -> None:
        return _refuse_unless_null(value)

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        # One line per part, as llama-server joins them: parts are not glued into one word.
        return "\n".join(part.text for part in self.content)


# OpenAI chat fields this server does not implement: sent, each is a 422 naming it, never
# silently ignored (an answer without the tools or format asked for would look like success).
UNSUPPORTED_FIELDS = (
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "functions",
    "function_call",
    "response_format",
    "logit_bias",
    "audio",
    "modalities",
    "prediction",
    "reasoning_effort",
    "verbosity",
    "web_search_options",
)
# Accepted and without effect on one local model: identifiers of the caller and bookkeeping
# for OpenAI's own platform (`stream_options.include_usage`: usage is always in the last chunk).
IGNORED_FIELDS = (
    "user",
    "store",
    "metadata",
    "service_tier",
    "stream_options",
    "prompt_cache_key",
    "safety_identifier",
)


def _null_fields(names: tuple[str, ...]) -> dict[str, Any]:
    """Refused fields, declared so that the schema lists them (null only) and the 422 names
    them."""
    return {name: (None, Field(None, description="Not supported.")) for name in names}


ChatMessage = create_model(
    "ChatMessage", __base__=_MessageFields, **_null_fields(UNSUPPORTED_MESSAGE_FIELDS)
)


class _ChatFields(BaseModel):
    # Every field is named here or in UNSUPPORTED_FIELDS: one the schema does not know is a
    # 422 naming it.
    model_config = STRICT
    model: StrictStr | None = Field(
        None, description="Echoed in the answer; absent: the served model's name."
    )
    messages: list[ChatMessage] = Field(
        min_length=1,
        max_length=MAX_REQUEST_ITEMS,
        description="The conversation, rendered by the model's chat template; a model without "
        "one gets a plain completion prompt.",
    )
    max_tokens: Annotated[int, Field(ge=1)] | None = Field(
        None,
        description="The most tokens to generate; absent: `DECISION_MAX_CHAT_TOKENS`, also "
        "the largest accepted.",
    )
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = Field(
        None, description="`max_tokens`' newer name; both may be sent only if equal."
    )
    # Left out: llama-server's defaults and its chain, top_k first (sampling.py).
    temperature: float = Field(
        sampling.TEMPERATURE, ge=0.0, le=2.0, description="The sampling temperature; 0 is greedy."
    )
    top_p: float = Field(
        sampling.TOP_P,
        gt=0.0,
        le=1.0,
        description="Nucleus sampling: the likeliest tokens holding this much probability; "
        "1 turns it off.",
    )
    top_k: int = Field(
        sampling.TOP_K, ge=0, description="Only the k likeliest tokens; 0 turns it off."
    )
    min_p: float = Field(
        sampling.MIN_P,
        ge=0.0,
        le=1.0,
        description="Only tokens at least this share of the likeliest's probability; 0 turns "
        "it off.",
    )
    # llama.cpp's sampler takes a 32-bit seed and reads its largest value as "pick one at
    # random": a seed outside that range would be wrapped or ignored, not honoured. -1 asks for
    # a random seed, as llama-server reads it.
    seed: int | None = Field(
        None,
        ge=-1,
        le=2**32 - 2,
        description="llama.cpp's 32-bit seed: the same seed reproduces a sampled answer; -1 "
        "or absent, a random one.",
    )
    stop: Annotated[StrictStr | list[StrictStr] | None, at_most(MAX_STOPS)] = Field(
        None,
        description="Up to 4 non-empty strings that end the answer, besides the prompt's own "
        '(`"\\nUser:"` in completion mode).',
    )
    stream: bool = Field(False, description="Answer as server-sent events.")
    n: int = Field(1, ge=1, le=1, description="One choice only; n > 1 is refused.")
    logprobs: bool = Field(
        False, description="Each completion token's log-probability, in `choices[0].logprobs`."
    )
    top_logprobs: int | None = Field(
        None, ge=0, le=20, description="With `logprobs`: the likeliest alternatives per token."
    )
    # No penalties are applied: only their neutral value is accepted.
    frequency_penalty: float | None = Field(
        None, ge=0, le=0, description="No penalty is applied: 0 only."
    )
    presence_penalty: float | None = Field(
        None, ge=0, le=0, description="No penalty is applied: 0 only."
    )
    # Accepted, no effect (IGNORED_FIELDS).
    user: StrictStr | None = Field(None, description="Accepted; no effect.")
    store: bool | None = Field(None, description="Accepted; no effect.")
    metadata: Annotated[dict[StrictStr, StrictStr] | None, at_most(MAX_METADATA)] = Field(
        None, description=f"Accepted (at most {MAX_METADATA} keys, as OpenAI's); no effect."
    )
    service_tier: StrictStr | None = Field(None, description="Accepted; no effect.")
    stream_options: dict[StrictStr, Any] | None = Field(
        None, description="Accepted; no effect: usage is always in the last chunk."
    )
    prompt_cache_key: StrictStr | None = Field(None, description="Accepted; no effect.")
    safety_identifier: StrictStr | None = Field(None, description="Accepted; no effect.")

    @field_validator(*UNSUPPORTED_FIELDS, mode="before", check_fields=False)
    @classmethod
    def _unsupported(cls, value: Any) -> None:
        return _refuse_unless_null(value)

    @field_validator("max_completion_tokens")
    @classmethod
    def _one_token_limit(cls, limit: int | None, info: ValidationInfo) -> int | None:
        # The newer name wins, as in OpenAI's API; two different limits would lose one silently.
        older = info.data.get("max_tokens")
        if limit is not None and older is not None and older != limit:
            raise ValueError(f"differs from max_tokens ({older}); send one of the two")
        return limit

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs_needs_logprobs(cls, top: int | None, info: ValidationInfo) -> int | None:
        if top is not None and not info.data.get("logprobs"):
            raise ValueError("top_logprobs needs logprobs: true")
        return top

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, stop: str | list[str] | None) -> list[str] | None:
        stops = [stop] if isinstance(stop, str) else stop
        if stops is not None and (len(stops) > MAX_STOPS or any(not s for s in stops)):
            raise ValueError(f"at most {MAX_STOPS} non-empty stop strings")
        return stops

    def as_chat(self) -> Chat:
        return Chat(
            messages=[(m.role, m.text) for m in self.messages],
            max_tokens=self.max_completion_tokens or self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            min_p=self.min_p,
            seed=None if self.seed == -1 else self.seed,  # None: a fresh seed per request
            stop=[self.stop] if isinstance(self.stop, str) else self.stop,  # a list once valid
            top_logprobs=(self.top_logprobs or 0) if self.logprobs else None,
        )

    def field_of(self, error: LimitExceeded) -> str:
        """The field a limit names: the prompt is the messages; the cap names what was sent."""
        if error.subject != "max_tokens":
            return "messages"
        return "max_completion_tokens" if self.max_completion_tokens else "max_tokens"


ChatRequest = create_model("ChatRequest", __base__=_ChatFields, **_null_fields(UNSUPPORTED_FIELDS))


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


def _choice(choice: TokenChoice) -> dict[str, Any]:
    return {"token": choice.text, "logprob": choice.logprob, "bytes": list(choice.utf8)}


def encode_logprobs(tokens: Sequence[SampledToken] | None) -> dict[str, Any] | None:
    """OpenAI's `choices[i].logprobs`: per token its text, log-probability, UTF-8 bytes and
    the likeliest alternatives at its step."""
    if tokens is None:
        return None
    return {
        "content": [
            {**_choice(sampled.token), "top_logprobs": [_choice(t) for t in sampled.top]}
            for sampled in tokens
        ]
    }


def system_fingerprint(info: dict[str, Any]) -> str:
    """OpenAI's mark of the backend a seed's answer depends on: the GGUF's hash and how chat
    streams meet the model (`shared`: a token's last bits follow the streams beside it)."""
    return f"fp_{str(info.get('gguf_sha256', ''))[:12]}_{info.get('chat_batching', 'alone')}"


def encode_completion(
    *, cid: str, model: str, fingerprint: str, result: Generated
) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.text},
                "finish_reason": result.finish_reason,
                "logprobs": encode_logprobs(result.tokens),
            }
        ],
        "usage": usage(result),
    }


def encode_chunk(
    *,
    cid: str,
    model: str,
    fingerprint: str,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
    logprobs: Sequence[SampledToken] | None = None,
) -> dict[str, Any]:
    choice = {
        "index": 0,
        "delta": delta,
        "finish_reason": finish_reason,
        "logprobs": encode_logprobs(logprobs),
    }
    chunk = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": [choice],
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
            return EventStream(
                self._stream(
                    first,
                    events,
                    cid,
                    model,
                    system_fingerprint(service.identity.info),
                    call,
                    with_logprobs=request.logprobs,
                )
            )
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
        return encode_completion(
            cid=cid,
            model=model,
            fingerprint=system_fingerprint(service.identity.info),
            result=event,
        )

    async def _stream(
        self,
        first: TextDelta | Generated,
        events: AsyncGenerator[TextDelta | Generated, None],
        cid: str,
        model: str,
        fingerprint: str,
        call: Call,
        *,
        with_logprobs: bool,
    ) -> AsyncIterator[str]:
        def chunk(delta: dict[str, Any], **fields: Any) -> str:
            return sse(
                encode_chunk(cid=cid, model=model, fingerprint=fingerprint, delta=delta, **fields)
            )

        def logprobs(tokens: Sequence[SampledToken]) -> Sequence[SampledToken] | None:
            return tokens if with_logprobs else None

        try:
            yield chunk({"role": "assistant", "content": ""})
            event = first
            while isinstance(event, TextDelta):
                yield chunk({"content": event.text}, logprobs=logprobs(event.tokens))
                try:
                    event = await anext(events)
                except ShuttingDown as error:  # the status is sent: end with an error event
                    message = {"message": str(error), "type": "server_shutting_down"}
                    retry = {"retryable": True, "retry_after_s": error.retry_after_s}
                    yield sse({"error": {**message, **retry}})
                    yield sse("[DONE]")
                    return
            call.log.update(
                prompt_tokens=event.prompt_tokens, completion_tokens=event.completion_tokens
            )
            yield chunk(
                {},
                finish_reason=event.finish_reason,
                usage=usage(event),
                logprobs=logprobs(event.unsent),
            )
            yield sse("[DONE]")
        finally:
            await events.aclose()


FORMAT = ChatFormat("chat", ChatRequest, shape_keys=("messages",), shape_text="`messages` (chat)")
