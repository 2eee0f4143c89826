"""Turning sampled tokens into text: incremental UTF-8 decoding and stop strings."""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass
class GenerationResult:
    finish_reason: str = "length"
    completion_tokens: int = 0


def text_deltas(
    tokens: Iterable[int], piece, stops: list[str], max_tokens: int, result: GenerationResult
) -> Iterator[str]:
    """Yield text as it becomes final; hold back any tail that could start a stop string.

    `tokens` ends either at end-of-generation ("stop") or after max_tokens ("length").
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    hold = max((len(s) for s in stops), default=1) - 1
    pending = ""
    for token in tokens:
        result.completion_tokens += 1
        pending += decoder.decode(piece(token, special=False))
        for stop in stops:
            if stop in pending:
                result.finish_reason = "stop"
                if text := pending[: pending.index(stop)]:
                    yield text
                return
        if len(pending) > hold:
            cut = len(pending) - hold
            yield pending[:cut]
            pending = pending[cut:]
    pending += decoder.decode(b"", final=True)
    result.finish_reason = "length" if result.completion_tokens >= max_tokens else "stop"
    if pending:
        yield pending
