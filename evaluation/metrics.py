"""Scoring metrics for labelled decisions: plain functions over probabilities and labels.

Every function takes per-item probability vectors (each summing to 1, any number of options per
item) and the index of the expected option, so items with different option counts mix freely.

- accuracy: share of items whose highest probability is the expected option (ties: first wins);
- Brier score: mean over items of sum_k (p_k - y_k)^2, the multi-class form (0 best, 2 worst);
- expected calibration error: top-label confidence in 10 equal-width bins, sum over bins of
  (items in bin / items) * |accuracy in bin - mean confidence in bin|; a confidence c falls in
  bin min(floor(c * bins), bins - 1), so 1.0 lands in the last bin;
- negative log-likelihood: mean of -ln p(expected), p clipped below at 1e-12;
- ranking AUC: for each option, the chance that an item whose answer it is gives it more
  probability than an item whose answer it is not (ties half), averaged over the options that
  are some items' answer and not others' (one-vs-rest, macro). It ignores any bias or
  temperature: 0.5 means the probabilities do not order the items by their answer at all;
- temperature: softmax(logits / T); `fit_temperature` minimises the NLL over T.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PROBABILITY_FLOOR = 1e-12
DEFAULT_BINS = 10
TEMPERATURE_BOUNDS = (0.05, 20.0)

# A vector is a list of floats or a numpy array (what `softmax` returns).
Vector = Sequence[float] | np.ndarray
Vectors = Sequence[Vector]


def _arrays(probabilities: Vectors) -> list[np.ndarray]:
    return [np.asarray(p, dtype=float) for p in probabilities]


def _check(probabilities: Vectors, expected: Sequence[int]) -> None:
    if len(probabilities) != len(expected):
        raise ValueError(f"{len(probabilities)} probability vectors, {len(expected)} labels")
    if not len(expected):
        raise ValueError("no items")
    for p, e in zip(probabilities, expected, strict=False):
        if not 0 <= e < len(p):
            raise ValueError(f"expected index {e} outside {len(p)} options")


def predictions(probabilities: Vectors) -> list[int]:
    return [int(np.argmax(p)) for p in _arrays(probabilities)]


def accuracy(probabilities: Vectors, expected: Sequence[int]) -> float:
    _check(probabilities, expected)
    return sum(p == e for p, e in zip(predictions(probabilities), expected, strict=False)) / len(
        expected
    )


def brier_score(probabilities: Vectors, expected: Sequence[int]) -> float:
    _check(probabilities, expected)
    total = 0.0
    for p, e in zip(_arrays(probabilities), expected, strict=False):
        target = np.zeros_like(p)
        target[e] = 1.0
        total += float(((p - target) ** 2).sum())
    return total / len(expected)


def negative_log_likelihood(probabilities: Vectors, expected: Sequence[int]) -> float:
    _check(probabilities, expected)
    return -sum(
        math.log(max(float(p[e]), PROBABILITY_FLOOR))
        for p, e in zip(probabilities, expected, strict=False)
    ) / len(expected)


@dataclass(frozen=True)
class Bin:
    lower: float
    upper: float
    count: int
    confidence: float | None  # mean top-label probability of the items in the bin
    accuracy: float | None  # share of those items whose top label is the expected one

    def as_dict(self) -> dict[str, float | None]:
        return {
            "lower": self.lower,
            "upper": self.upper,
            "count": self.count,
            "confidence": self.confidence,
            "accuracy": self.accuracy,
        }


def reliability_bins(
    probabilities: Vectors, expected: Sequence[int], bins: int = DEFAULT_BINS
) -> list[Bin]:
    _check(probabilities, expected)
    members: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for p, e in zip(_arrays(probabilities), expected, strict=False):
        top = int(np.argmax(p))
        confidence = float(p[top])
        members[min(int(confidence * bins), bins - 1)].append((confidence, top == e))
    result = []
    for index, items in enumerate(members):
        result.append(
            Bin(
                lower=index / bins,
                upper=(index + 1) / bins,
                count=len(items),
                confidence=sum(c for c, _ in items) / len(items) if items else None,
                accuracy=sum(hit for _, hit in items) / len(items) if items else None,
            )
        )
    return result


def expected_calibration_error(
    probabilities: Vectors, expected: Sequence[int], bins: int = DEFAULT_BINS
) -> float:
    table = reliability_bins(probabilities, expected, bins)
    total = sum(b.count for b in table)
    return sum(
        b.count / total * abs(b.accuracy - b.confidence)
        for b in table
        if b.accuracy is not None and b.confidence is not None  # both None: an empty bin
    )


def ranking_auc(by_id: Sequence[dict[str, float]], expected: Sequence[str]) -> float | None:
    """One-vs-rest macro AUC (Mann-Whitney) over `{option id: probability}` items; None when
    no option is the answer of some items and not of others (nothing to rank)."""
    from scipy.stats import mannwhitneyu

    if len(by_id) != len(expected):
        raise ValueError(f"{len(by_id)} items, {len(expected)} labels")
    areas = []
    for option in sorted({k for item in by_id for k in item}):
        scored = [
            (item[option], answer == option)
            for item, answer in zip(by_id, expected, strict=False)
            if option in item
        ]
        hits = [p for p, hit in scored if hit]
        misses = [p for p, hit in scored if not hit]
        if hits and misses:
            u = mannwhitneyu(hits, misses, alternative="two-sided").statistic
            areas.append(float(u) / (len(hits) * len(misses)))
    return sum(areas) / len(areas) if areas else None


# --- latency ---------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default): rank = q/100 * (n - 1)."""
    if not len(values):
        raise ValueError("no values")
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """Milliseconds: p50, p95, p99, mean, and the count."""
    if not len(seconds):
        return {"n": 0}
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p95_ms": round(percentile(ms, 95), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "mean_ms": round(sum(ms) / len(ms), 2),
    }


# --- temperature -----------------------------------------------------------------------------
def softmax(logits: Vector, temperature: float = 1.0) -> np.ndarray:
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    scaled = np.asarray(logits, dtype=float) / temperature
    scaled -= scaled.max()
    weights = np.exp(scaled)
    probabilities: np.ndarray = weights / weights.sum()  # numpy's stubs: Any
    return probabilities


def nll_at_temperature(logits: Vectors, expected: Sequence[int], temperature: float) -> float:
    return negative_log_likelihood([softmax(z, temperature) for z in logits], expected)


@dataclass(frozen=True)
class TemperatureFit:
    temperature: float
    nll_before: float  # at T = 1
    nll_after: float


def fit_temperature(
    logits: Vectors, expected: Sequence[int], bounds: tuple[float, float] = TEMPERATURE_BOUNDS
) -> TemperatureFit:
    """The T in `bounds` minimising the NLL of softmax(logits / T): a bounded 1-D search over
    ln T (scipy's Brent method), which is smooth and unimodal enough for one parameter."""
    from scipy.optimize import minimize_scalar

    _check(logits, expected)
    found = minimize_scalar(
        lambda log_t: nll_at_temperature(logits, expected, math.exp(log_t)),
        bounds=(math.log(bounds[0]), math.log(bounds[1])),
        method="bounded",
        options={"xatol": 1e-6},
    )
    temperature = math.exp(found.x)
    before = nll_at_temperature(logits, expected, 1.0)
    after = nll_at_temperature(logits, expected, temperature)
    if before <= after:  # the search never makes things worse than not calibrating
        temperature, after = 1.0, before
    return TemperatureFit(temperature, before, after)


# --- option order ----------------------------------------------------------------------------
def order_sensitivity(
    original: Sequence[dict[str, float]], reordered: Sequence[dict[str, float]]
) -> dict[str, float]:
    """How far probabilities move when the same options are shown in another order.

    Each item is {option id: probability}; options are matched by id, never by position.
    Returns the mean and max absolute difference over all (item, option) pairs, the mean over
    items of each item's largest difference, and how often the top option changes.
    """
    if len(original) != len(reordered) or not original:
        raise ValueError("need the same, non-zero number of items in both orders")
    differences, item_max, flips = [], [], 0
    for first, second in zip(original, reordered, strict=False):
        if set(first) != set(second):
            raise ValueError("both orders must score the same option ids")
        diffs = [abs(first[k] - second[k]) for k in first]
        differences += diffs
        item_max.append(max(diffs))
        # Both argmaxes walk the original order, so a tie cannot count as a change by itself.
        flips += max(first, key=first.__getitem__) != max(first, key=second.__getitem__)
    return {
        "items": len(original),
        "mean_abs_diff": sum(differences) / len(differences),
        "max_abs_diff": max(differences),
        "mean_item_max_abs_diff": sum(item_max) / len(item_max),
        "argmax_changed": flips,
        "argmax_change_rate": flips / len(original),
    }


def summary(
    probabilities: Vectors, expected: Sequence[int], bins: int = DEFAULT_BINS
) -> dict[str, float]:
    return {
        "n": len(expected),
        "accuracy": accuracy(probabilities, expected),
        "brier": brier_score(probabilities, expected),
        "ece": expected_calibration_error(probabilities, expected, bins),
        "nll": negative_log_likelihood(probabilities, expected),
    }
