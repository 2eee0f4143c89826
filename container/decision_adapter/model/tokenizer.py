"""User text to tokens in linear time, token for token what one llama.cpp call would give.

llama.cpp first cuts a text at every user-defined token (Gemma 3: newline, space and tab runs,
HTML tags), and that cutting costs time quadratic in the number of matches: 100 KB of "{\\n"
took 11 s. Cut at the boundary of such a match, each side tokenizes exactly as inside the whole
text (llama.cpp finds the same matches in it, and its tokenizer runs per fragment between
matches anyway). So the matches are found here, in llama.cpp's order, and llama.cpp is handed a
few hundred at a time. A text whose bytes or matches alone prove it over the request's token
limit is refused before llama.cpp sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

MATCHES_PER_CALL = 256


class TokenLimitExceeded(ValueError):
    """The text alone needs more tokens than the limit (proved by a bound, not counted)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} tokens")
        self.limit = limit


def cuttable(specials: Sequence[bytes]) -> bool:
    """llama.cpp sorts these by length only, so the order of equal-length ones is unknown:
    matching them here is exact only if no two of the same length can overlap."""
    by_length: dict[int, list[bytes]] = {}
    for text in specials:
        by_length.setdefault(len(text), []).append(text)
    for group in by_length.values():
        for a in group:
            for b in group:
                if a != b and any(a[-k:] == b[:k] for k in range(1, len(a))):
                    return False
    return True


class UserTextTokenizer:
    def __init__(
        self,
        tokenize_bytes: Callable[[bytes], list[int]],
        specials: Sequence[bytes] | None,
        max_token_bytes: int,
    ) -> None:
        """`specials`: the user-defined token texts llama.cpp cuts plain text at (None: cutting
        is not known to be exact for this vocabulary; each text then goes whole)."""
        self._tokenize_bytes = tokenize_bytes
        self._specials = sorted(specials, key=len, reverse=True) if specials is not None else None
        self._max_token_bytes = max(1, max_token_bytes)

    def tokenize(self, text: str, limit: int | None = None) -> list[int]:
        data = text.encode("utf-8")
        if limit is not None and len(data) > limit * self._max_token_bytes:
            raise TokenLimitExceeded(limit)  # no token covers more bytes than the longest one
        if self._specials is None:
            return self._tokenize_bytes(data)
        # Below both bounds the whole text is tokenized (linear: 0.25 s for 390 KB here), so
        # an answer over the limit can still name the count.
        tokens: list[int] = []
        start = 0
        ends = [end for _, end in self._matches(data, limit)]
        for cut in ends[MATCHES_PER_CALL - 1 :: MATCHES_PER_CALL] + [len(data)]:
            if cut > start:
                tokens += self._tokenize_bytes(data[start:cut])
                start = cut
        return tokens

    def _matches(self, data: bytes, limit: int | None) -> list[tuple[int, int]]:
        """llama.cpp's matches: longest token first, each leftmost and non-overlapping within
        the text not yet matched."""
        matched = bytearray(len(data))
        spans: list[tuple[int, int]] = []
        for special in self._specials or ():
            size = len(special)
            position = data.find(special)
            while position != -1:
                blocked = matched.find(1, position, position + size)
                if blocked == -1:
                    matched[position : position + size] = b"\x01" * size
                    spans.append((position, position + size))
                    if limit is not None and len(spans) > limit:  # each match is a token
                        raise TokenLimitExceeded(limit)
                    position = data.find(special, position + size)
                else:  # runs into a match: llama.cpp looks on after that match
                    free = matched.find(0, blocked)
                    position = -1 if free == -1 else data.find(special, free)
        spans.sort()
        return spans
