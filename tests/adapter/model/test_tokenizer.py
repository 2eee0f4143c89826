"""User text tokenized in linear time, token for token what one llama.cpp call gives."""

from __future__ import annotations

import json
import random
import time

import pytest
from decision_adapter.model.tokenizer import TokenLimitExceeded, UserTextTokenizer, cuttable

# Gemma 3's user-defined tokens (newline, space and tab runs, HTML tags) and text around them.
ALPHABET = [
    "\n",
    "\n\n",
    " ",
    "  ",
    "\t",
    "<b>",
    "</b>",
    "<bbox>",
    "<td>",
    "<",
    ">",
    "b",
    "a",
    "é",
    "\u2581",
    "{",
    "}",
    "x",
    "日本",
    "<start_of_turn>",
    "<end_of_turn>",
]


def _texts() -> list[str]:
    rng = random.Random(12)
    texts = [
        "{\n" * 3000,
        "x\n" * 3000,
        "<b>" * 3000,
        "a  " * 3000,
        "\n" * 5000,
        " " * 5000,
        json.dumps({f"k{i}": [i, i + 1] for i in range(1000)}, indent=2),
    ]
    texts += [
        "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 2500))) for _ in range(150)
    ]
    return texts


def test_user_text_tokens_equal_one_llama_cpp_call(engine):
    for text in _texts():
        assert engine.tokenize(text, special=False) == engine._tokenize_bytes(text.encode())


def test_no_tokens_piece_is_longer_than_the_bound_from_the_vocabulary_texts(engine):
    # The early refusal's bound (limit x the longest token) is read from the texts, not the
    # pieces; a piece longer than the bound would refuse a text that fits.
    longest_piece = max(len(engine.piece(t, special=False)) for t in range(engine.n_vocab))
    assert longest_piece == engine._user_text._max_token_bytes


# Asserts on wall-clock time: runs in make test's serial part, alone on the machine.
@pytest.mark.serial
@pytest.mark.parametrize(
    "text", ["{\n" * 500_000, "<b>" * 340_000, "a  " * 340_000, "x\n" * 500_000]
)
def test_a_megabyte_of_user_defined_tokens_is_refused_at_once(engine, text):
    started = time.perf_counter()
    with pytest.raises(TokenLimitExceeded):
        engine.tokenize(text, special=False, limit=8192)
    assert time.perf_counter() - started < 0.5


@pytest.mark.serial  # asserts on wall-clock time, like the test above
def test_tokenizing_grows_linearly_not_quadratically(engine):
    def seconds(repeats: int) -> float:
        started = time.perf_counter()
        engine.tokenize("{\n" * repeats, special=False)
        return time.perf_counter() - started

    small, large = seconds(25_000), seconds(100_000)  # one llama.cpp call: 1.3 s and 11 s
    assert large < 1.0 and large < 8 * max(small, 0.01)


def test_equal_length_tokens_that_can_overlap_are_not_cut():
    assert cuttable([b"<b>", b"<i>", b"\n\n", b"\n"])
    assert not cuttable([b"ab", b"ba"])  # which one llama.cpp matches first is unknown


def test_without_exact_cuts_the_text_goes_whole_and_the_limit_still_holds():
    calls = []

    def whole(data: bytes) -> list[int]:
        calls.append(data)
        return list(data)

    tokenizer = UserTextTokenizer(whole, None, max_token_bytes=4)
    assert tokenizer.tokenize("ab\nab") == list(b"ab\nab") and calls == [b"ab\nab"]
    with pytest.raises(TokenLimitExceeded):
        tokenizer.tokenize("x" * 50, limit=10)  # 50 bytes need at least 13 tokens of 4 bytes
    assert len(calls) == 1
