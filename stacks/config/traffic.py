"""The requests a decision endpoint is expected to serve (`traffic`), which its measurement
must have been taken at."""

from __future__ import annotations

from pydantic import Field

from .base import Section


class Traffic(Section):
    """The requests a decision endpoint is expected to serve. Synthesis refuses a measurement of
    other requests: latency grows with length, and chat holds the model longer."""

    input_tokens: int | None = Field(
        None,
        ge=1,
        description="the median request's input tokens; a measurement whose median lies over "
        "25% away is refused; unset: not checked",
    )
    chat_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="the share of chats among the requests; a measurement's must lie within "
        "0.05 of it",
    )
