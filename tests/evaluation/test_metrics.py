"""evaluation.metrics against values computed by hand on a tiny fixed input (no model involved)."""

import math

import pytest

from evaluation import metrics

# (probabilities, expected index): top-label confidence, hit
PROBABILITIES = [
    [0.7, 0.2, 0.1],  # 0.7, right
    [0.4, 0.6],  # 0.6, wrong
    [0.25, 0.25, 0.5],  # 0.5, right
    [0.9, 0.1],  # 0.9, wrong
    [0.65, 0.35],  # 0.65, right
]
EXPECTED = [0, 0, 2, 1, 0]


def test_accuracy():
    assert metrics.accuracy(PROBABILITIES, EXPECTED) == pytest.approx(3 / 5)


def test_brier_score_is_the_multiclass_sum_of_squares():
    # 0.09+0.04+0.01, 0.36+0.36, 0.0625+0.0625+0.25, 0.81+0.81, 0.1225+0.1225
    per_item = [0.14, 0.72, 0.375, 1.62, 0.245]
    assert metrics.brier_score(PROBABILITIES, EXPECTED) == pytest.approx(sum(per_item) / 5)
    assert metrics.brier_score(PROBABILITIES, EXPECTED) == pytest.approx(0.62)


def test_negative_log_likelihood():
    hand = -(math.log(0.7) + math.log(0.4) + math.log(0.5) + math.log(0.1) + math.log(0.65)) / 5
    assert hand == pytest.approx(0.9398962, abs=1e-7)
    assert metrics.negative_log_likelihood(PROBABILITIES, EXPECTED) == pytest.approx(hand)


def test_nll_clips_a_zero_probability():
    assert metrics.negative_log_likelihood([[1.0, 0.0]], [1]) == pytest.approx(-math.log(1e-12))


def test_expected_calibration_error_with_ten_bins():
    # bins: 0.5 -> 5 (hit), 0.6 and 0.65 -> 6 (miss, hit), 0.7 -> 7 (hit), 0.9 -> 9 (miss)
    # ECE = 1/5*|1-0.5| + 2/5*|0.5-0.625| + 1/5*|1-0.7| + 1/5*|0-0.9| = 0.1+0.05+0.06+0.18
    assert metrics.expected_calibration_error(PROBABILITIES, EXPECTED) == pytest.approx(0.39)


def test_reliability_bins():
    bins = metrics.reliability_bins(PROBABILITIES, EXPECTED)
    assert len(bins) == 10
    assert [b.count for b in bins] == [0, 0, 0, 0, 0, 1, 2, 1, 0, 1]
    assert bins[6].confidence == pytest.approx(0.625)
    assert bins[6].accuracy == pytest.approx(0.5)
    assert bins[0].confidence is None and bins[0].accuracy is None
    assert (bins[6].lower, bins[6].upper) == pytest.approx((0.6, 0.7))


def test_confidence_one_falls_in_the_last_bin():
    bins = metrics.reliability_bins([[1.0, 0.0]], [0])
    assert bins[9].count == 1
    assert metrics.expected_calibration_error([[1.0, 0.0]], [0]) == 0.0


def test_summary_collects_the_four_metrics():
    result = metrics.summary(PROBABILITIES, EXPECTED)
    assert result == pytest.approx(
        {"n": 5, "accuracy": 0.6, "brier": 0.62, "ece": 0.39, "nll": 0.9398962}, abs=1e-7
    )


def test_mismatched_or_out_of_range_labels_are_refused():
    with pytest.raises(ValueError):
        metrics.accuracy(PROBABILITIES, EXPECTED[:-1])
    with pytest.raises(ValueError):
        metrics.accuracy([[0.5, 0.5]], [2])


def test_percentiles_interpolate_between_ranks():
    values = [4.0, 1.0, 3.0, 2.0]
    assert metrics.percentile(values, 50) == pytest.approx(2.5)
    assert metrics.percentile(values, 95) == pytest.approx(3.85)
    assert metrics.percentile(values, 99) == pytest.approx(3.97)
    assert metrics.percentile([7.0], 95) == 7.0
    summary = metrics.latency_summary([0.001, 0.002, 0.003, 0.004])
    assert summary == {"n": 4, "p50_ms": 2.5, "p95_ms": 3.85, "p99_ms": 3.97, "mean_ms": 2.5}


def test_softmax_with_temperature():
    assert metrics.softmax([2.0, 0.0]).tolist() == pytest.approx([0.8807971, 0.1192029])
    assert metrics.softmax([2.0, 0.0], temperature=2.0).tolist() == pytest.approx(
        [1 / (1 + math.exp(-1)), 1 / (1 + math.exp(1))]
    )
    with pytest.raises(ValueError):
        metrics.softmax([1.0, 0.0], temperature=0)


def test_fit_temperature_recovers_the_frequency():
    # Four items with logits [2, 0]; three expect option 0. The best probability for option 0
    # is then 3/4, reached when 2/T = ln 3, so T = 2 / ln 3.
    logits = [[2.0, 0.0]] * 4
    expected = [0, 0, 0, 1]
    fit = metrics.fit_temperature(logits, expected)
    assert fit.temperature == pytest.approx(2 / math.log(3), rel=1e-4)
    sigma = 1 / (1 + math.exp(-2))
    assert fit.nll_before == pytest.approx(-(3 * math.log(sigma) + math.log(1 - sigma)) / 4)
    assert fit.nll_before == pytest.approx(0.626928, abs=1e-6)
    assert fit.nll_after == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert fit.nll_after == pytest.approx(0.562335, abs=1e-6)


def test_fit_temperature_sharpens_underconfident_logits():
    # Always right, logits far apart only at a low temperature: T goes to the lower bound.
    fit = metrics.fit_temperature([[0.5, 0.0], [0.0, 0.5]], [0, 1], bounds=(0.1, 10.0))
    assert fit.temperature == pytest.approx(0.1, rel=1e-3)
    assert fit.nll_after < fit.nll_before


def test_order_sensitivity_matches_options_by_id():
    original = [{"a": 0.6, "b": 0.4}, {"x": 0.2, "y": 0.3, "z": 0.5}]
    reversed_ = [{"b": 0.55, "a": 0.45}, {"z": 0.45, "y": 0.35, "x": 0.2}]
    result = metrics.order_sensitivity(original, reversed_)
    # differences: a 0.15, b 0.15; x 0, y 0.05, z 0.05
    assert result == pytest.approx(
        {
            "items": 2,
            "mean_abs_diff": 0.4 / 5,
            "max_abs_diff": 0.15,
            "mean_item_max_abs_diff": 0.1,
            "argmax_changed": 1,
            "argmax_change_rate": 0.5,
        }
    )


def test_order_sensitivity_tie_is_not_a_change():
    result = metrics.order_sensitivity([{"a": 0.6, "b": 0.4}], [{"b": 0.5, "a": 0.5}])
    assert result["argmax_changed"] == 0
    with pytest.raises(ValueError):
        metrics.order_sensitivity([{"a": 1.0}], [{"b": 1.0}])


def test_ranking_auc_is_one_vs_rest_mann_whitney_averaged_over_options():
    items = [{"a": 0.9, "b": 0.1}, {"a": 0.6, "b": 0.4}, {"a": 0.7, "b": 0.3}, {"a": 0.6, "b": 0.4}]
    expected = ["a", "a", "b", "b"]
    # option a: its items 0.9, 0.6 against 0.7, 0.6 -> pairs won 1 + 1 + 0 + 0.5 (tie) = 2.5 of 4;
    # option b: 0.3, 0.4 against 0.1, 0.4 -> 1 + 0 + 1 + 0.5 = 2.5 of 4
    assert metrics.ranking_auc(items, expected) == pytest.approx(0.625)
    # a bias (every item's probability of "a" raised) changes accuracy, not the ranking
    shifted = [{"a": p["a"] ** 0.2, "b": 1 - p["a"] ** 0.2} for p in items]
    assert metrics.ranking_auc(shifted, expected) == pytest.approx(0.625)
    assert metrics.ranking_auc(items[::-1], expected) == pytest.approx(0.375)  # read backwards


def test_ranking_auc_skips_an_option_that_is_no_items_answer():
    items = [{"x": 0.5, "y": 0.3, "z": 0.2}, {"x": 0.2, "y": 0.7, "z": 0.1}]
    # z is nobody's answer: only x (1 of 1) and y (1 of 1) are ranked
    assert metrics.ranking_auc(items, ["x", "y"]) == 1.0
    assert metrics.ranking_auc(items, ["x", "x"]) is None  # one answer only: nothing to rank
    with pytest.raises(ValueError, match="2 items, 1 labels"):
        metrics.ranking_auc(items, ["x"])
