"""The pure parts of the llama-server comparison: reading its n_probs answers for the options,
summarizing them, and the timing of a streamed answer."""

import json
import math
from pathlib import Path

import pytest

from bench.side_by_side import (
    _token_check,
    option_mass,
    summarize_options,
    top_probabilities,
    top_token_text,
)
from bench.timing import Streamed

# A real one-token /completion answer of llama-server (the bench's build of llama-cpp-python
# 0.3.36's llama.cpp, Gemma 3 270M, n_probs=20) to the bench's single decision prompt, less its
# echo of the settings, prompt and local model path; the options' labels are " A", " B", " C".
ANSWER = Path(__file__).parents[1] / "support" / "data" / "llama_server_completion.json"


def test_option_mass_counts_only_the_label_tokens():
    top = [(10, 0.5), (20, 0.3), (30, 0.1)]
    mass = option_mass(top, [20, 30, 40])
    assert mass["option_mass"] == pytest.approx(0.4)
    assert mass["top_n_mass"] == pytest.approx(0.9)
    assert mass["option_share"] == pytest.approx(0.4 / 0.9)
    assert mass["top_token_is_option"] is False
    assert mass["chosen_option"] == 0  # label 20 is the first option
    assert mass["top_n"] == 3


def test_option_mass_when_the_top_token_is_an_option():
    mass = option_mass([(7, 0.6), (5, 0.2), (9, 0.1)], [5, 7])
    assert mass["top_token_is_option"] is True
    assert mass["chosen_option"] == 1
    assert mass["option_share"] == pytest.approx(0.8 / 0.9)


def test_no_option_in_the_top_n_is_zero_mass_and_no_choice():
    mass = option_mass([(1, 0.7), (2, 0.2)], [3, 4])
    assert mass["option_mass"] == 0.0
    assert mass["option_share"] == 0.0
    assert mass["chosen_option"] is None
    assert mass["top_token_is_option"] is False


def test_top_probabilities_of_a_real_answer():
    answer = json.loads(ANSWER.read_text())
    top = top_probabilities(answer)
    assert len(top) == 20
    probabilities = [p for _, p in top]
    assert probabilities == sorted(probabilities, reverse=True)
    first = answer["completion_probabilities"][0]["top_logprobs"][0]
    assert top[0] == (first["id"], pytest.approx(math.exp(first["logprob"])))
    assert 0 < sum(probabilities) <= 1.0 + 1e-6
    assert top_token_text(answer) == first["token"]


def test_option_share_of_a_real_answer_matches_its_tokens():
    answer = json.loads(ANSWER.read_text())
    entries = answer["completion_probabilities"][0]["top_logprobs"]
    labels = {e["token"]: e["id"] for e in entries if e["token"] in (" A", " B", " C")}
    mass = option_mass(top_probabilities(answer), list(labels.values()))
    expected = sum(math.exp(e["logprob"]) for e in entries if e["token"] in labels)
    assert mass["option_mass"] == pytest.approx(expected)
    assert mass["top_token_is_option"] == (entries[0]["token"] in labels)


def test_top_probabilities_reads_post_sampling_probs_too():
    answer = {
        "completion_probabilities": [
            {"id": 1, "prob": 0.2, "top_probs": [{"id": 2, "prob": 0.1}, {"id": 1, "prob": 0.2}]}
        ]
    }
    assert top_probabilities(answer) == [(1, 0.2), (2, 0.1)]


def _row(share, top_is_option, ours, theirs, expected, allowed=0.5, mass=0.4, tokens=(9, 9, 9)):
    return {
        "tokens": dict(zip(("bench", "adapter", "llama_server"), tokens, strict=False)),
        "llama_server_option_share": share,
        "llama_server_top_token_is_option": top_is_option,
        "adapter_allowed_token_mass": allowed,
        "llama_server_option_mass": mass,
        "adapter_choice": ours,
        "llama_server_choice": theirs,
        "expected": expected,
    }


def test_summarize_options():
    rows = [
        _row(0.9, True, "a", "a", "a"),
        _row(0.1, False, "b", "a", "b", allowed=0.30, mass=0.25),
        _row(0.5, True, "a", None, "b", allowed=0.20, mass=0.18),
        _row(0.7, False, "c", "c", "a"),
    ]
    summary = summarize_options(rows)
    assert summary["items"] == 4
    assert summary["option_share_median"] == pytest.approx(0.6)
    assert summary["option_share_min"] == pytest.approx(0.1)
    assert summary["top_token_not_an_option"] == 2
    assert summary["top_token_not_an_option_rate"] == 0.5
    assert summary["accuracy"] == {"adapter": 0.5, "llama_server": 0.25}
    assert summary["agreement"] == 0.5
    assert summary["mass_gap_to_adapter_median"] == pytest.approx(0.075)
    assert summary["same_tokens"] is True
    assert (
        summarize_options([_row(0.5, True, "a", "a", "a", tokens=(9, 9, 10))])["same_tokens"]
        is False
    )


def test_token_check_needs_the_same_count_on_both_sides_and_no_reuse():
    same = {"bench": 108, "adapter": {108}, "llama_server": {108}, "cached": {0}}
    assert _token_check(same)["same"] is True
    assert _token_check({**same, "llama_server": {107}})["same"] is False
    assert _token_check({**same, "cached": {0, 100}})["same"] is False
    assert _token_check({**same, "adapter": {108, 109}})["same"] is False


def test_generation_rate_leaves_out_the_first_token():
    streamed = Streamed(first_s=0.5, last_s=2.5, total_s=2.6, events=[])
    assert streamed.generation_rate(41) == pytest.approx(20.0)
    assert Streamed(first_s=0.5, last_s=0.5, total_s=0.6, events=[]).generation_rate(1) == 0.0


def test_every_round_starts_cold_for_llama_servers_prefix_cache(renderer):
    """llama-server reuses any common token prefix: each round's state must differ from the
    last one's near the start, while a round's questions share their whole state."""
    from os.path import commonprefix

    from bench.side_by_side import prepare
    from bench.workloads import long_state

    state = long_state(1000, renderer)
    item = {
        "id": "x",
        "state": "s",
        "question": "q?",
        "options": [{"id": "a"}, {"id": "b"}],
        "expected": "a",
    }
    work = prepare(renderer, state, 2, [item])
    first, second = work.shared_rounds[0], work.shared_rounds[1]
    assert len(first) == 8 and len(first[0].tokens) > 1000
    across_rounds = len(commonprefix([first[0].tokens, second[0].tokens]))
    within_round = len(commonprefix([first[0].tokens, first[1].tokens]))
    assert across_rounds < 100
    assert within_round > 1000
    assert len(commonprefix([first[0].tokens, work.cached_rounds[0][0].tokens])) < 100
    (labelled,) = work.labelled
    assert labelled.expected == "a" and len(labelled.label_tokens) == 2
    assert work.chat_tokens[0] == renderer.engine.bos_token
