"""Sampled tokens to text events: the finished generation is the stream's last event, a value."""

from __future__ import annotations

from decision_adapter.contract import Generated, SampledToken, TextDelta, TokenChoice
from decision_adapter.service.generation import text_events
from hypothesis import given
from hypothesis import strategies as st

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


def stream(pieces: list[str], stops: list[str]):
    """(deltas, result), checking before each token that all final text has been sent."""
    received: list[str] = []

    def tokens():
        so_far = ""
        for token, text in enumerate(pieces):
            final = so_far[: len(so_far) - longest_tail_starting_a_stop(so_far, stops)]
            assert "".join(received) == final, (so_far, stops)
            so_far += text
            yield token

    def piece_of(token: int, *, special: bool) -> bytes:
        return pieces[token].encode()

    for event in text_events(tokens(), piece_of, stops, len(pieces), prompt_tokens=1):
        if isinstance(event, Generated):
            return received, event
        received.append(event.text)
    raise AssertionError("no finished generation")


def longest_tail_starting_a_stop(text: str, stops: list[str]) -> int:
    return max(
        (k for stop in stops for k in range(1, len(stop)) if text.endswith(stop[:k])), default=0
    )


def cut_at_first_stop(text: str, stops: list[str]) -> str:
    """The text before the stop string that ends first (the longer of two ending together)."""
    ends = [(text.find(s) + len(s), -len(s)) for s in stops if s in text]
    if not ends:
        return text
    end, minus_length = min(ends)
    return text[: end + minus_length]


def test_text_goes_out_with_its_token_unless_it_may_start_a_stop_string():
    """Nothing is held back that cannot begin a stop string (a stream's first text comes with
    its token); "@@" waits until "x!" shows it was no "@@@"."""
    texts, result = stream(["Hel", "lo", "@@", "x!"], ["@@@"])
    assert texts == ["Hel", "lo", "@@x!"] and result.text == "Hello@@x!"


def test_of_two_stop_strings_the_one_that_ends_first_cuts_and_the_longer_on_a_tie():
    assert stream(["xabcd"], ["abcd", "bc"])[1].text == "xa"
    assert stream(["xabc"], ["bc", "abc"])[1].text == "x"


@given(
    pieces=st.lists(st.text(alphabet="ab@\n", min_size=1, max_size=4), min_size=1, max_size=12),
    stops=st.lists(st.text(alphabet="ab@\n", min_size=1, max_size=5), min_size=1, max_size=4),
)
def test_stop_strings_are_cut_exactly_and_only_their_possible_starts_are_held(pieces, stops):
    texts, result = stream(pieces, stops)
    whole = "".join(pieces)
    assert result.text == "".join(texts) == cut_at_first_stop(whole, stops)
    assert result.finish_reason == ("stop" if any(s in whole for s in stops) else "length")
