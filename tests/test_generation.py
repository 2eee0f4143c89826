"""Sampled tokens to text events: the finished generation is the stream's last event, a value."""

from __future__ import annotations

from decision_adapter.contract import Generated, TextDelta
from decision_adapter.generation import text_events

PIECES = {1: b"Hel", 2: b"lo", 3: b" \xc3", 4: b"\xa9!", 5: b"@@", 6: b"@ tail"}


def piece(token: int, *, special: bool) -> bytes:
    assert special is False  # generated control tokens are never written as their text
    return PIECES[token]


def run(tokens, stops, max_tokens=10):
    events = list(text_events(iter(tokens), piece, stops, max_tokens, prompt_tokens=7))
    *deltas, last = events
    assert all(isinstance(event, TextDelta) for event in deltas)
    assert isinstance(last, Generated)
    return [event.text for event in deltas], last


def test_the_text_arrives_in_pieces_and_the_result_holds_all_of_it():
    texts, result = run([1, 2, 3, 4], stops=[])
    assert "".join(texts) == "Hello é!" == result.text  # é split across two tokens
    assert result == Generated("Hello é!", "stop", prompt_tokens=7, completion_tokens=4)


def test_a_stop_string_ends_the_text_before_it_even_across_tokens():
    texts, result = run([1, 2, 5, 6], stops=["@@@"])
    assert "".join(texts) == "Hello" == result.text
    assert result.finish_reason == "stop" and result.completion_tokens == 4


def test_max_tokens_ends_with_length():
    texts, result = run([1, 2], stops=[], max_tokens=2)
    assert result.finish_reason == "length" and result.text == "Hello"
