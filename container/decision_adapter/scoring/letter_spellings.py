"""Every token a model may start a letter answer with, per letter: the `letters` readout sums
their probabilities, so a model that writes ` A`, `(A`, `**A` or `A)` is read as well as one
that writes `A`.

The rule (on a token's decoded text): any run of whitespace and OPENERS, then exactly one
capital letter, then nothing but characters that are neither letters nor digits. So `A`, ` A`,
`\\nA`, `(A`, ` (A`, `**A`, `A)`, `A.`, `A:`, `A**` spell A; `An`, `AB`, `A1`, `a`, `-A`, `.A`
do not. A token spells one letter at most, so no two labels share a token. Control and byte
tokens never count (a byte-fallback `<0x41>` is only written for bytes the vocabulary lacks).

Built once per loaded model from its vocabulary (a regular expression over the raw vocabulary
texts picks the few thousand candidates, only those are decoded), kept beside the engine.
"""

from __future__ import annotations

import re
import string
import threading
import weakref

import numpy as np

from ..model.engine import Engine
from ..model.vocabulary import is_text, raw_texts

# What may stand before the letter: whitespace, and the brackets, quotes and markdown emphasis
# or heading a model opens an answer with ("(A)", "**A**", "`A`", "## A"). Not "-" or ".":
# a list bullet or a sentence end before a capital is prose, not an answer.
OPENERS = "([{*\"'`#"
_SPELLING = re.compile(rf"[\s{re.escape(OPENERS)}]*([A-Z])[^\w]*", re.ASCII)
# Raw vocabulary texts escape whitespace (SentencePiece's U+2581, byte-level BPE's U+0120 ...),
# never ASCII letters or digits: a token can only qualify if its raw text holds exactly one
# ASCII letter, a capital, and no digit.
_CANDIDATE = re.compile(rb"[^A-Za-z0-9]*[A-Z][^A-Za-z0-9]*")


def spelled_letter(text: str) -> str | None:
    """The capital letter `text` spells as the start of an answer, or None."""
    match = _SPELLING.fullmatch(text)
    if match is None or any(c.isalnum() for c in text[match.end(1) :]):
        return None
    return match.group(1)


class LetterSpellings:
    """Per capital letter, the sorted ids of the tokens that spell it (spelled_letter)."""

    def __init__(self, engine: Engine) -> None:
        vocab = engine.vocab
        candidates = [t for t, text in raw_texts(vocab) if text and _CANDIDATE.fullmatch(text)]
        by_letter: dict[str, list[int]] = {letter: [] for letter in string.ascii_uppercase}
        for token in candidates:
            if not is_text(vocab, token):
                continue
            try:
                text = engine.piece(token, special=False).decode("utf-8")
            except UnicodeDecodeError:
                continue
            letter = spelled_letter(text)
            if letter is not None:
                by_letter[letter].append(token)
        self.tokens = {letter: np.array(ids, dtype=np.int64) for letter, ids in by_letter.items()}

    def of(self, label: str) -> np.ndarray:
        return self.tokens[label]


_BUILT: weakref.WeakKeyDictionary[Engine, LetterSpellings] = weakref.WeakKeyDictionary()
_BUILDING = threading.Lock()


def letter_spellings(engine: Engine) -> LetterSpellings:
    """The engine's index, built on first use. Plans are built on preparation threads, which
    read the vocabulary as the tokenizer does; the lock keeps two first requests from building
    it twice."""
    with _BUILDING:
        found = _BUILT.get(engine)
        if found is None:
            found = _BUILT[engine] = LetterSpellings(engine)
    return found
