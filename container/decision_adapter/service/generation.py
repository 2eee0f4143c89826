"""Turning sampled tokens into text: incremental UTF-8 decoding and stop strings."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Protocol

from ..contract import Generated, SampledToken, TextDelta


class Piece(Protocol):
    """A token's bytes (Engine.piece)."""

    def __call__(self, token: int, *, special: bool) -> bytes: ...


class StopStrings:
    """Stop strings found in text fed piece by piece, one Knuth-Morris-Pratt automaton per
    string: where the first complete one ends, and how long a tail of the text so far could
    still begin one. Linear in the text fed, whatever the strings hold (a stop of a million
    characters costs only the characters generated)."""

    def __init__(self, stops: list[str]) -> None:
        self._stops = stops
        self._matched = [0] * len(stops)  # per stop: its longest prefix the text ends with
        self._failure = [[0] for _ in stops]  # KMP failure tables, grown as matches grow

    @property
    def partial(self) -> int:
        """Characters at the end of the text that may be the start of a stop string."""
        return max(self._matched, default=0)

    def feed(self, text: str) -> tuple[int, int] | None:
        """(end within `text`, length) of the first stop string completed by `text`; of two
        ending at the same character, the longer (it starts first)."""
        for end, char in enumerate(text, start=1):
            completed = 0
            for n, stop in enumerate(self._stops):
                k = self._matched[n]
                while k and stop[k] != char:
                    k = self._fallback(n, k)
                k = k + 1 if stop[k] == char else 0
                if k == len(stop):
                    completed = max(completed, k)
                    k = self._fallback(n, k)  # as if matching went on past it
                self._matched[n] = k
            if completed:
                return end, completed
        return None

    def _fallback(self, n: int, k: int) -> int:
        """The longest proper prefix of stop n's first k characters that is also its suffix."""
        stop, table = self._stops[n], self._failure[n]
        while len(table) < k:  # table[j]: that length for the first j + 1 characters
            j, f = len(table), table[-1]
            while f and stop[j] != stop[f]:
                f = table[f - 1]
            table.append(f + 1 if stop[j] == stop[f] else 0)
        return table[k - 1]


def text_events(
    tokens: Iterable[int],
    piece: Piece,
    stops: list[str],
    max_tokens: int,
    prompt_tokens: int,
    sampled: Callable[[int], SampledToken] | None = None,
    out_of_time: Callable[[], bool] = lambda: False,
) -> Iterator[TextDelta | Generated]:
    """Text as soon as it is final, holding back only a tail that could start a stop string;
    then the finished generation. `tokens` ends at end-of-generation ("stop"), or after
    max_tokens or when `out_of_time()` says the chat's deadline passed ("length").
    `sampled(token)`, called as each token arrives (before the next is sampled), gives its
    log-probabilities: each delta carries those of the tokens read since the last."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    matcher = StopStrings(stops)
    pending = ""  # decoded, not yet sent: the tail that could start a stop string
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

    def read(text: str) -> Generator[TextDelta, None, bool]:
        """The deltas `text` makes final; returns True if a stop string ends in it."""
        nonlocal pending
        found = matcher.feed(text)
        if found is not None:
            end, length = found
            if before := (pending + text[:end])[:-length]:
                yield delta(before)
            return True
        pending += text
        if cut := len(pending) - matcher.partial:
            yield delta(pending[:cut])
            pending = pending[cut:]
        return False

    for token in tokens:
        count += 1
        if sampled is not None:
            every.append(sampled(token))
            unsent.append(every[-1])
        if (yield from read(decoder.decode(piece(token, special=False)))):
            yield finished("stop")
            return
    if (yield from read(decoder.decode(b"", final=True))):
        yield finished("stop")
        return
    if pending:
        yield delta(pending)
    yield finished("length" if count >= max_tokens or out_of_time() else "stop")
