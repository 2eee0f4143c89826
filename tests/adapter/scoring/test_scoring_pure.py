"""Scoring's arithmetic, without the model: option words, the log-softmax readings, how each
readout combines what was read, token counts, and the content-free LRU. What the model reads
(tokens, decoding, exactness) is tested on the real GGUF in test_scoring.py and
test_readouts.py."""

from __future__ import annotations

import numpy as np
import pytest
from decision_adapter.contract import Question
from decision_adapter.scoring.score import (
    ContentFreeScores,
    QuestionPlan,
    Reading,
    ScoringPlan,
    _combine,
    _log_softmax,
    _option_words,
    _Read,
    _restricted_log_softmax,
    option_labels,
    prefix_tree_batches,
    tree_tokens,
)


def reading(log_probs, first_logits, lengths, single_tokens, argmax=7) -> _Read:
    return _Read(
        log_probs=np.array(log_probs, dtype=np.float64),
        first_logits=np.array(first_logits, dtype=np.float64),
        lengths=np.array(lengths, dtype=np.float64),
        single_tokens=single_tokens,
        argmax=argmax,
    )


def question(readout: str, readings: int = 1) -> QuestionPlan:
    return QuestionPlan(readout, ["A", "B"], [Reading([1], [[2], [3]], [])] * readings, "sha")


def reference_log_softmax(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values - np.log(np.sum(np.exp(values - values.max()))) - values.max()


def test_up_to_26_options_get_single_letters():
    assert option_labels(26) == list("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    assert option_labels(27)[:2] == ["AA", "AB"] and len(option_labels(27)) == 27


# --- option words ----------------------------------------------------------------------
def test_option_words_are_the_answer_words_or_the_ids_with_descriptions_where_given():
    plain = Question("q?", ["true", "false"], ["Yes, it is.", None])
    assert _option_words(plain, with_descriptions=False) == ["true", "false"]
    assert _option_words(plain, with_descriptions=True) == ["true: Yes, it is.", "false"]
    worded = Question("q?", ["true", "false"], [None, "No."], answer_words=["yes", "no"])
    assert _option_words(worded, with_descriptions=False) == ["yes", "no"]
    assert _option_words(worded, with_descriptions=True) == ["yes", "no: No."]


# --- log-softmax -----------------------------------------------------------------------
def test_full_vocabulary_log_probabilities_of_the_asked_tokens_only():
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(262_144) * 4).astype(np.float32)  # Gemma 3's vocabulary
    tokens = [5, 17, 262_143]
    got = _log_softmax(logits, tokens)
    assert got.dtype == np.float64 and got.shape == (3,)
    # The float64 sum matters: summed in float32, 262k terms are off by ~1e-6.
    np.testing.assert_allclose(got, reference_log_softmax(logits)[tokens], rtol=0, atol=1e-9)
    np.testing.assert_allclose(
        _log_softmax(logits, np.array(tokens)), got, rtol=0, atol=0
    )  # an index array reads the same


def test_log_softmax_is_stable_for_large_logits():
    logits = np.array([1000.0, 1001.0, 999.0], dtype=np.float32)
    np.testing.assert_allclose(
        _log_softmax(logits, [0, 1, 2]), reference_log_softmax(logits), atol=1e-12
    )
    np.testing.assert_allclose(
        _restricted_log_softmax(np.array([1000.0, 1001.0])),
        [-np.log1p(np.e), -np.log1p(np.exp(-1))],
        atol=1e-12,
    )


def test_restricted_log_softmax_is_a_distribution_over_the_given_values():
    values = np.array([-3.0, -1.5, -7.25, 0.5])
    got = _restricted_log_softmax(values)
    np.testing.assert_allclose(got, reference_log_softmax(values), atol=1e-12)
    assert np.exp(got).sum() == pytest.approx(1.0, abs=1e-12)


# --- combining the readings ------------------------------------------------------------
def test_letters_read_single_tokens_by_their_raw_logits():
    read = reading([-1.0, -2.0], [3.0, 2.5], [1, 1], single_tokens=True, argmax=42)
    scores = _combine(question("letters"), [read], None)
    assert (scores.readout, scores.strategy, scores.full_vocab_argmax_id) == (
        "single-token",
        "letters",
        42,
    )
    assert np.array_equal(scores.option_log_probs, read.log_probs)
    assert np.array_equal(scores.option_logits, read.first_logits)
    assert scores.option_mean_log_probs is None and scores.content_free is None


def test_letters_with_multi_token_labels_read_the_whole_labels_log_probabilities():
    read = reading([-1.0, -4.0], [3.0, 2.5], [1, 2], single_tokens=False)
    scores = _combine(question("letters"), [read], None)
    assert scores.readout == "label-sequence"
    assert np.array_equal(scores.option_logits, read.log_probs)
    assert np.array_equal(scores.option_log_probs, read.log_probs)


def test_permuted_letters_average_each_rotations_distribution():
    single = reading([-1.0, -2.0], [3.0, 1.0], [1, 1], single_tokens=True, argmax=11)
    multi = reading([-0.5, -3.0], [9.0, 9.0], [1, 2], single_tokens=False, argmax=12)
    scores = _combine(question("permuted_letters", 2), [single, multi], None)
    assert (scores.readout, scores.strategy) == ("rotation-mean", "permuted_letters")
    assert scores.full_vocab_argmax_id == 11  # the first rotation's
    # A single-token rotation contributes its raw logits' distribution, a multi-token one its
    # labels' log-probabilities' distribution.
    expected = (
        reference_log_softmax(single.first_logits) + reference_log_softmax(multi.log_probs)
    ) / 2
    np.testing.assert_allclose(scores.option_logits, expected, atol=1e-12)
    np.testing.assert_allclose(
        scores.option_log_probs, (single.log_probs + multi.log_probs) / 2, atol=1e-12
    )
    three = _combine(question("permuted_letters", 3), [single, single, single], None)
    np.testing.assert_allclose(
        three.option_logits, reference_log_softmax(single.first_logits), atol=1e-12
    )
    np.testing.assert_allclose(three.option_log_probs, single.log_probs, atol=1e-12)


def test_json_choice_sum_reads_each_names_whole_log_probability():
    # A two-token name whose second token is near certain: its mean lifts it over a one-token
    # name the model preferred; its whole log-probability does not.
    read = reading([-2.0, -2.4], [0.0, 0.0], [1, 2], single_tokens=False, argmax=7)
    mean = _combine(question("json_choice"), [read], None)
    whole = _combine(question("json_choice_sum"), [read], None)
    assert np.argmax(mean.option_logits) == 1 and np.argmax(whole.option_logits) == 0
    assert (whole.readout, whole.strategy, whole.full_vocab_argmax_id) == (
        "text-sum",
        "json_choice_sum",
        7,
    )
    assert np.array_equal(whole.option_logits, read.log_probs)
    assert np.array_equal(whole.option_mean_log_probs, [-2.0, -1.2])
    assert whole.content_free is None


@pytest.mark.parametrize("readout", ["option_text", "option_text_desc"])
def test_option_text_reads_the_mean_log_probability_per_token(readout):
    read = reading([-2.0, -9.0], [0.0, 0.0], [1, 3], single_tokens=False, argmax=5)
    scores = _combine(question(readout), [read], None)
    assert (scores.readout, scores.strategy, scores.full_vocab_argmax_id) == (
        "text-mean",
        readout,
        5,
    )
    assert np.array_equal(scores.option_mean_log_probs, [-2.0, -3.0])
    assert np.array_equal(scores.option_logits, [-2.0, -3.0])
    assert np.array_equal(scores.option_log_probs, read.log_probs)
    assert scores.content_free is None


def test_calibrated_subtracts_the_content_free_means():
    read = reading([-2.0, -9.0], [0.0, 0.0], [1, 3], single_tokens=False)
    neutral = np.array([-1.0, -0.5])
    scores = _combine(question("calibrated"), [read], neutral)
    assert (scores.readout, scores.strategy) == ("text-mean-minus-content-free", "calibrated")
    assert np.array_equal(scores.option_logits, [-1.0, -2.5])
    assert np.array_equal(scores.option_mean_log_probs, [-2.0, -3.0])
    assert scores.content_free is neutral


# --- token counts ----------------------------------------------------------------------
def test_a_questions_input_tokens_are_the_prefix_and_each_of_its_suffixes():
    one = QuestionPlan("letters", ["A", "B"], [Reading([1, 2, 3], [[4], [5]], [])], "a")
    rotated = QuestionPlan(
        "permuted_letters",
        ["A", "B"],
        [Reading([1, 2], [[4], [5]], []), Reading([1, 2, 3, 4, 5], [[5], [4]], [])],
        "b",
    )
    plan = ScoringPlan([9] * 10, [one, rotated])
    assert plan.input_tokens(0) == 13
    assert plan.input_tokens(1) == 17


# --- the content-free scores kept ------------------------------------------------------
def test_prefix_tree_paths_are_each_continuation_but_its_last_token_distinct_and_sorted():
    continuations = [[9, 4, 5], [1], [2, 3], [2, 4], [2, 3, 5], [9, 4, 6]]
    assert prefix_tree_batches(continuations, max_tokens=512, max_paths=62) == [
        [(2,), (2, 3), (9, 4)]
    ]
    # Only the set counts: any option order gives the same batches.
    assert prefix_tree_batches(continuations[::-1], 512, 62) == prefix_tree_batches(
        continuations, 512, 62
    )
    assert prefix_tree_batches([[1], [2]], 512, 62) == []


def test_prefix_tree_batches_hold_at_most_max_paths_paths():
    continuations = [[i, 0] for i in range(5)]
    assert prefix_tree_batches(continuations, 512, max_paths=2) == [
        [(0,), (1,)],
        [(2,), (3,)],
        [(4,)],
    ]


def test_prefix_tree_batches_hold_at_most_max_tokens_distinct_prefixes():
    # (1, 2, 3) and (1, 2, 4) share two prefixes: 4 tokens together, 5 with (5,).
    continuations = [[1, 2, 3, 0], [1, 2, 4, 0], [5, 0]]
    assert prefix_tree_batches(continuations, max_tokens=4, max_paths=62) == [
        [(1, 2, 3), (1, 2, 4)],
        [(5,)],
    ]
    assert prefix_tree_batches(continuations, max_tokens=5, max_paths=62) == [
        [(1, 2, 3), (1, 2, 4), (5,)]
    ]
    # A path longer than a batch is a batch of its own (the engine decodes it in chunks).
    assert prefix_tree_batches([[7] * 9, [1, 0], [8, 0]], max_tokens=3, max_paths=62) == [
        [(1,)],
        [(7,) * 8],
        [(8,)],
    ]


def test_tree_tokens_count_each_distinct_prefix_once():
    assert tree_tokens([(1, 2, 3), (1, 2, 4), (5,)]) == 5
    assert tree_tokens([(1, 2), (1, 2, 3)]) == 3
    assert tree_tokens([]) == 0


def test_a_readings_branch_tokens_are_its_tree_tokens_unless_every_label_is_one_token():
    continuations = [[1, 2, 3], [1, 2, 4], [5]]
    batches = prefix_tree_batches(continuations, 512, 62)
    assert Reading([0], continuations, batches).branch_tokens == 2  # (1,) and (1, 2)
    assert Reading([0], [[1], [2]], []).branch_tokens == 0


def _entry_bytes() -> int:
    probe = ContentFreeScores()
    probe.put(("size",), {(1,): 0.0})
    return probe.nbytes


def test_content_free_scores_start_empty_and_keep_what_their_bytes_allow():
    kept = ContentFreeScores(max_bytes=100 * _entry_bytes())
    assert kept.as_dict() == {"entries": 0, "bytes": 0, "hits": 0, "misses": 0}
    for key in range(101):
        kept.put((key,), {(1,): float(key)})
    assert kept.as_dict()["entries"] == 100 and kept.nbytes <= kept.max_bytes
    assert kept.get((0,)) is None and kept.get((1,)) == {(1,): 1.0}
    kept.hits, kept.misses = 3, 2
    assert kept.as_dict() == {"entries": 100, "bytes": kept.nbytes, "hits": 3, "misses": 2}


def test_a_255_option_question_is_kept_in_kilobytes_not_megabytes():
    """The crafted request that kept about 15 MB as Python ints: its suffix and 255
    continuations of 60 tokens each, stored compactly, and the bound holds whatever they are."""
    suffix = tuple(range(2000))
    scores = {tuple(range(n, n + 60)): -float(n) for n in range(255)}
    kept = ContentFreeScores()
    kept.put((suffix, tuple(sorted(scores))), scores)
    assert kept.nbytes < 150_000
    assert kept.get((suffix, tuple(sorted(scores)))) == scores
    tight = ContentFreeScores(max_bytes=kept.nbytes - 1)
    tight.put((suffix, tuple(sorted(scores))), scores)  # over the whole bound: not kept
    assert tight.as_dict()["entries"] == 0 and tight.nbytes == 0
    assert ContentFreeScores(max_bytes=0).get(("x",)) is None


def test_content_free_scores_evict_the_least_recently_used():
    kept = ContentFreeScores(max_bytes=2 * _entry_bytes())
    kept.put(("a",), {(1,): -1.0})
    kept.put(("b",), {(1,): -2.0})
    assert kept.get(("a",)) == {(1,): -1.0}  # now the most recent
    kept.put(("c",), {(1,): -3.0})
    assert kept.get(("b",)) is None and kept.get(("a",)) is not None
    kept.put(("a",), {(1,): -4.0})  # put again: replaced, and the most recent
    kept.put(("d",), {(1,): -5.0})
    assert kept.get(("c",)) is None and kept.get(("a",)) == {(1,): -4.0}
    assert kept.as_dict()["entries"] == 2


# --- the request's budget ----------------------------------------------------------------
def test_a_budget_spends_up_to_its_limit_and_refuses_the_token_past_it():
    from decision_adapter.model.tokenizer import TokenLimitExceeded
    from decision_adapter.scoring.budget import TokenBudget

    budget = TokenBudget(10)
    budget.spend(4)
    assert (budget.spent, budget.left) == (4, 6)
    budget.spend(6)  # exactly the limit: still within it
    assert budget.left == 0
    with pytest.raises(TokenLimitExceeded) as refused:
        budget.spend(1)
    assert refused.value.limit == 10


def test_a_plan_costs_each_pass_and_branch_tokens_at_the_read_cost():
    from decision_adapter.scoring.budget import READ_TOKEN_COST

    branching = Reading([1, 2], [[3, 4], [3, 5]], [[(3,)]])
    assert branching.branch_tokens == 1 and branching.cost == 2 + READ_TOKEN_COST
    calibrated = QuestionPlan("calibrated", ["a", "b"], [branching], "sha")
    rotated = QuestionPlan("permuted_letters", ["A", "B"], [Reading([1], [[2], [3]], [])] * 2, "s")
    assert calibrated.cost == 2 * branching.cost and rotated.cost == 2
    plan = ScoringPlan([9] * 10, [calibrated, rotated], content_free_prefix=[8] * 3)
    assert plan.cost == 10 + 3 + calibrated.cost + rotated.cost
    # The request's own tokens, then what N/A and the calibrated one again add at most.
    assert plan.content_free_tokens == 3 + branching.tokens
    assert plan.total_tokens == 10 + branching.tokens + 2
