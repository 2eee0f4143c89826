"""How many requests the decision adapter serves at once (`concurrency`)."""

from __future__ import annotations

from pydantic import Field, model_validator

from .base import Section

# One KV cell of a Qwen3-4B-class model in f16: K and V (2) of 36 layers of 8 KV heads of 128
# dimensions, 2 bytes each. A hybrid model such as Qwen3.5 takes less; a larger one, more.
DEFAULT_KV_BYTES_PER_TOKEN = 2 * 36 * 8 * 128 * 2


class Concurrency(Section):
    """How many requests the decision adapter serves at once (docs/scoring.md, "Requests at
    once"), rendered into its environment. A measurement is of one setting: synthesis refuses
    one taken at another, since the rate it derives from would not be this one's."""

    max_scoring_requests: int = Field(
        1,
        ge=1,
        le=64,
        description="`DECISION_MAX_SCORING_REQUESTS`: decision requests scored at once, sharing "
        "batches; the asynchronous endpoint sends each instance that many at once",
    )
    max_chat_streams: int = Field(
        1, ge=1, le=64, description="`DECISION_MAX_CHAT_STREAMS`: chat streams generating at once"
    )
    chat_shared_batches: bool = Field(
        False,
        description="`DECISION_CHAT_SHARED_BATCHES`: the chat streams' next tokens in one "
        "micro-batch (needs `maxChatStreams` above 1)",
    )
    kv_bytes_per_token: int = Field(
        DEFAULT_KV_BYTES_PER_TOKEN,
        ge=1,
        description="bytes of KV cache one context token takes on the release's model (2 x "
        "layers x KV heads x head dimensions x 2 in f16); the cache of every stream must fit in "
        "half the instance's memory (checked at synthesis)",
    )

    @model_validator(mode="after")
    def _shared_batches_need_streams(self) -> Concurrency:
        if self.chat_shared_batches and self.max_chat_streams == 1:
            raise ValueError(
                "chatSharedBatches needs maxChatStreams above 1: one stream shares no batch"
            )
        return self

    def measured_settings(self) -> dict[str, int | bool]:
        """What a measurement records of it (stacks/capacity.py DEFAULT_CONCURRENCY's keys)."""
        return self.model_dump(exclude={"kv_bytes_per_token"})

    def environment(self) -> dict[str, str]:
        """The adapter's variables for it (settings.py reads them)."""
        return {
            "DECISION_MAX_SCORING_REQUESTS": str(self.max_scoring_requests),
            "DECISION_MAX_CHAT_STREAMS": str(self.max_chat_streams),
            "DECISION_CHAT_SHARED_BATCHES": "true" if self.chat_shared_batches else "false",
        }
