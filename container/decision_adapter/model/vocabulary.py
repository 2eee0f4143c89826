"""The model's vocabulary as llama.cpp stores it: each token's raw text, and whether a token is
text at all (control, unknown, byte-fallback and unused tokens are not)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import repeat
from typing import Any

import llama_cpp

_NOT_TEXT = (
    llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
    | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
    | llama_cpp.LLAMA_TOKEN_ATTR_BYTE
    | llama_cpp.LLAMA_TOKEN_ATTR_UNUSED
)


def raw_texts(vocab: Any) -> Iterator[tuple[int, bytes]]:
    """Every token id with its raw vocabulary text (whitespace escaped the vocabulary's way:
    SentencePiece's U+2581, byte-level BPE's U+0120 ...); not decoded, so cheap to scan."""
    tokens = range(llama_cpp.llama_vocab_n_tokens(vocab))
    return zip(tokens, map(llama_cpp.llama_vocab_get_text, repeat(vocab), tokens), strict=True)


def is_text(vocab: Any, token: int) -> bool:
    return not llama_cpp.llama_vocab_get_attr(vocab, token) & _NOT_TEXT
