"""Sampled tokens to text events: the finished generation is the stream's last event, a value."""

from __future__ import annotations

from decision_adapter.contract import Generated, SampledToken, TextDelta, TokenChoice
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


def test_each_token_logprob_rides_on_one_event_exactly_once():
    def sampled(token: int) -> SampledToken:
        return SampledToken(TokenChoice(str(token), PIECES[token], -float(token)), ())

    events = list(text_events(iter([1, 2, 5, 6]), piece, ["@@@"], 10, 7, sampled))
    *deltas, last = events
    carried = [s.token.logprob for d in deltas for s in d.tokens] + [
        s.token.logprob for s in last.unsent
    ]
    assert carried == [-1.0, -2.0, -5.0, -6.0] == [s.token.logprob for s in last.tokens]
    assert last.completion_tokens == 4
    plain = list(text_events(iter([1, 2]), piece, [], 10, 7))
    assert plain[-1].tokens is None and all(d.tokens == () for d in plain[:-1])
