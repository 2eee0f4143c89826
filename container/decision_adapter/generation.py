"""Turning sampled tokens into text: incremental UTF-8 decoding and stop strings."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable, Iterator

from .contract import Generated, SampledToken, TextDelta


def text_events(
    tokens: Iterable[int],
    piece,
    stops: list[str],
    max_tokens: int,
    prompt_tokens: int,
    sampled: Callable[[int], SampledToken] | None = None,
) -> Iterator[TextDelta | Generated]:
    """Text as it becomes final, holding back any tail that could start a stop string; then
    the finished generation. `tokens` ends at end-of-generation ("stop") or after max_tokens
    ("length"). `sampled(token)`, called as each token arrives (before the next is sampled),
    gives its log-probabilities: each delta carries those of the tokens read since the last."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    hold = max((len(s) for s in stops), default=1) - 1
    pending = ""
    sent: list[str] = []
    every: list[SampledToken] = []
    unsent: list[SampledToken] = []
    count = 0

    def delta(text: str) -> TextDelta:
        carried = tuple(unsent)
        unsent.clear()
        sent.append(text)
        return TextDelta(text, carried)

    def finished(reason: str) -> Generated:
        logprobs = tuple(every) if sampled is not None else None
        return Generated("".join(sent), reason, prompt_tokens, count, logprobs, tuple(unsent))

    for token in tokens:
        count += 1
        if sampled is not None:
            every.append(sampled(token))
            unsent.append(every[-1])
        pending += decoder.decode(piece(token, special=False))
        for stop in stops:
            if stop in pending:
                if text := pending[: pending.index(stop)]:
                    yield delta(text)
                yield finished("stop")
                return
        if len(pending) > hold:
            cut = len(pending) - hold
            yield delta(pending[:cut])
            pending = pending[cut:]
    pending += decoder.decode(b"", final=True)
    if pending:
        yield delta(pending)
    yield finished("length" if count >= max_tokens else "stop")
