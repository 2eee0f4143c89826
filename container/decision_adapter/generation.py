"""Turning sampled tokens into text: incremental UTF-8 decoding and stop strings."""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator

from .contract import Generated, TextDelta


def text_events(
    tokens: Iterable[int], piece, stops: list[str], max_tokens: int, prompt_tokens: int
) -> Iterator[TextDelta | Generated]:
    """Text as it becomes final, holding back any tail that could start a stop string; then
    the finished generation. `tokens` ends at end-of-generation ("stop") or after max_tokens
    ("length")."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    hold = max((len(s) for s in stops), default=1) - 1
    pending = ""
    sent: list[str] = []
    count = 0

    def finished(reason: str) -> Generated:
        return Generated("".join(sent), reason, prompt_tokens, count)

    for token in tokens:
        count += 1
        pending += decoder.decode(piece(token, special=False))
        for stop in stops:
            if stop in pending:
                if text := pending[: pending.index(stop)]:
                    sent.append(text)
                    yield TextDelta(text)
                yield finished("stop")
                return
        if len(pending) > hold:
            cut = len(pending) - hold
            sent.append(pending[:cut])
            yield TextDelta(pending[:cut])
            pending = pending[cut:]
    pending += decoder.decode(b"", final=True)
    if pending:
        sent.append(pending)
        yield TextDelta(pending)
    yield finished("length" if count >= max_tokens else "stop")
