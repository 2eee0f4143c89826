"""Choosing a model's readout from labelled data: the pure parts of `--choose-readout`.

A strategy is anything that answers a request body the way the adapter would with that
readout: `send(kind, body) -> (answer, seconds, retries)`. `AdapterReadout` asks a served
adapter for one strategy by name; tests and studies may pass their own callables. Each strategy
runs over the dev split (with the reversed-order twins), the strategies are ranked by the
targets below, the winner's temperature is fitted on dev, and its held-out metrics are
measured on the test split at that temperature. The result is the per-model file beside the
GGUF (`calibration.json`: `temperature`, `readout`, `gguf_sha256`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from decision_adapter.contract import question_kind

from evaluation import metrics
from evaluation.labelled import Case

Send = Callable[[str, dict[str, Any]], tuple[dict[str, Any], float, int]]

# A readout the adapter defaults to must keep its answer when the options are reversed, and
# cost little more than the cheapest readout.
MAX_ORDER_CHANGE = 0.10  # top option changes on reversal in at most 10% of examples
MAX_COST_RATIO = 2.0  # the default readout costs at most 2x the letter readout
# A question kind gets a temperature of its own only from this many dev cases of it: fewer fit
# noise (a split holds 40-90 cases of each kind).
MIN_KIND_CASES = 20


def kind_of(category: str) -> str:
    """`routing.queue` -> `routing`: the kind of decision a question is."""
    return category.split(".", 1)[0]


def majority_accuracy(expected: Sequence[str]) -> float:
    """What always answering the most common label scores: the floor a readout must beat."""
    counts: dict[str, int] = defaultdict(int)
    for label in expected:
        counts[label] += 1
    return max(counts.values()) / len(expected)


def grouped(cases: Sequence[Case], key: Callable[[Case], str]) -> dict[str, dict[str, Any]]:
    """Accuracy, NLL, ECE, ranking AUC and the majority-class baseline per group of cases."""
    groups: dict[str, list[Case]] = defaultdict(list)
    for case in cases:
        groups[key(case)].append(case)
    out = {}
    for name, group in sorted(groups.items()):
        summary = metrics.summary(
            [c.probabilities for c in group], [c.expected_index for c in group]
        )
        majority = majority_accuracy([c.expected for c in group])
        out[name] = {
            **summary,
            "majority": majority,
            "vs_majority": summary["accuracy"] - majority,
            "auc": metrics.ranking_auc([c.by_id for c in group], [c.expected for c in group]),
        }
    return out


def below_majority(groups: dict[str, dict[str, Any]]) -> list[str]:
    return [name for name, group in groups.items() if group["vs_majority"] < -1e-9]


def strategy_report(
    cases: Sequence[Case], pairs: Sequence[tuple[dict[str, float], dict[str, float], str]] | None
) -> dict[str, Any]:
    """Everything the choice looks at for one strategy on one split."""
    report: dict[str, Any] = {
        **metrics.summary([c.probabilities for c in cases], [c.expected_index for c in cases]),
        "latency": metrics.latency_summary([c.latency_s for c in cases]),
        "by_question": grouped(cases, lambda c: c.category),
        "by_kind": grouped(cases, lambda c: kind_of(c.category)),
    }
    report["below_majority"] = below_majority(report["by_question"])
    if pairs:
        order = metrics.order_sensitivity([a for a, _, _ in pairs], [b for _, b, _ in pairs])
        report["order_change_rate"] = order["argmax_change_rate"]
    return report


def rank(
    reports: dict[str, dict[str, Any]],
    baseline: str | None = "letters",
    *,
    max_order_change: float = MAX_ORDER_CHANGE,
    max_cost_ratio: float = MAX_COST_RATIO,
) -> list[tuple[str, list[str]]]:
    """Strategies best first, each with the targets it misses (an empty list: all met).

    Order: fewest missed targets, then fewest questions below their majority class, then
    accuracy, then NLL. Cost is p50 latency relative to `baseline` when it was measured.
    """
    base_latency = reports[baseline]["latency"]["p50_ms"] if baseline in reports else None
    missed: dict[str, list[str]] = {}
    for name, report in reports.items():
        misses = []
        if report["below_majority"]:
            misses.append(f"{len(report['below_majority'])} question(s) below majority")
        if report.get("order_change_rate", 0.0) > max_order_change:
            misses.append(f"order change {report['order_change_rate']:.0%}")
        if base_latency and report["latency"]["p50_ms"] > max_cost_ratio * base_latency:
            ratio = report["latency"]["p50_ms"] / base_latency
            misses.append(f"cost {ratio:.1f}x {baseline}")
        missed[name] = misses
    order = sorted(
        reports,
        key=lambda n: (
            len(missed[n]),
            len(reports[n]["below_majority"]),
            -reports[n]["accuracy"],
            reports[n]["nll"],
        ),
    )
    return [(name, missed[name]) for name in order]


@dataclass
class Held:
    """The winner's temperature, fitted on dev, and its metrics on the held-out split."""

    temperature: float
    nll_dev_before: float
    nll_dev_after: float
    test: dict[str, Any]
    # Per question kind, where a kind's own temperature (fitted on dev) improved its held-out
    # ECE over the single one's; `test` is measured with them.
    by_kind: dict[str, float] = field(default_factory=dict)
    # Per kind: dev cases, its own fitted temperature, held-out ECE at the single and at its own.
    kind_fits: dict[str, dict[str, Any]] = field(default_factory=dict)


def _with_logits(cases: Sequence[Case]) -> list[Case]:
    return [c for c in cases if len(c.logits) == len(c.option_ids)]


def rescaled(cases: Sequence[Case], temperature_of: Callable[[Case], float]) -> list[Case]:
    """The cases as served at a temperature per case (their raw option logits rescaled)."""
    return [
        Case(
            **{**c.__dict__, "probabilities": metrics.softmax(c.logits, temperature_of(c)).tolist()}
        )
        for c in cases
    ]


def _at(temperature: float) -> Callable[[Case], float]:
    """Every case at one temperature (for `rescaled`)."""
    return lambda _case: temperature


def _ece(cases: Sequence[Case]) -> float:
    return metrics.expected_calibration_error(
        [c.probabilities for c in cases], [c.expected_index for c in cases]
    )


def fit_by_kind(
    dev: Sequence[Case], test: Sequence[Case], temperature: float
) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """A temperature per question kind (noul, choice, score), fitted on dev's cases of that kind
    and kept only where it lowers that kind's held-out ECE below the single temperature's: one
    T can leave yes/no questions over-confident and levels under-confident at once, but a kind's
    own T must earn its place on data it was not fitted on."""
    kept: dict[str, float] = {}
    fits: dict[str, dict[str, Any]] = {}
    for kind in sorted({question_kind(c.option_ids) for c in dev}):
        ours = [c for c in dev if question_kind(c.option_ids) == kind]
        held = [c for c in test if question_kind(c.option_ids) == kind]
        if len(ours) < MIN_KIND_CASES or not held:
            continue
        own = metrics.fit_temperature([c.logits for c in ours], [c.expected_index for c in ours])
        single = _ece(rescaled(held, _at(temperature)))
        separate = _ece(rescaled(held, _at(own.temperature)))
        fits[kind] = {
            "dev_cases": len(ours),
            "temperature": own.temperature,
            "held_out_ece_single": single,
            "held_out_ece_own": separate,
        }
        if separate < single:
            kept[kind] = own.temperature
    return kept, fits


def fit_and_hold_out(dev: Sequence[Case], test: Sequence[Case]) -> Held:
    """Temperature on dev's option logits, and per question kind where it earns it (fit_by_kind);
    test measured at those temperatures (its raw logits)."""
    usable = _with_logits(dev)
    if not usable:
        raise ValueError("the winning readout returned no option logits to fit a temperature")
    found = metrics.fit_temperature([c.logits for c in usable], [c.expected_index for c in usable])
    held = _with_logits(test)
    by_kind, fits = fit_by_kind(usable, held, found.temperature)
    at_fitted = rescaled(
        held, lambda c: by_kind.get(question_kind(c.option_ids), found.temperature)
    )
    report = strategy_report(at_fitted, None) if at_fitted else {}
    return Held(found.temperature, found.nll_before, found.nll_after, report, by_kind, fits)


def readout_file(
    winner: str,
    held: Held,
    *,
    dev_file: Path,
    test_file: Path,
    gguf_sha256: str | None,
    ranking: list[tuple[str, list[str]]],
    created_at: str,
) -> dict[str, Any]:
    """The per-model file: what the adapter reads (`temperature`, `readout`, `gguf_sha256`)
    and, beside it, where they came from."""
    out: dict[str, Any] = {
        "readout": winner,
        "temperature": round(held.temperature, 6),
        "applies_to": f"option_logits of the {winner} readout (softmax(option_logits / T))",
        "fitted_on": dev_file.name,
        "held_out": test_file.name,
        "nll_before": round(held.nll_dev_before, 6),
        "nll_after": round(held.nll_dev_after, 6),
        "held_out_metrics": {
            k: held.test[k] for k in ("n", "accuracy", "nll", "ece", "brier") if k in held.test
        },
        "ranking": [{"readout": name, "missed": misses} for name, misses in ranking],
        "created_at": created_at,
    }
    if held.by_kind:
        out["temperatures"] = {kind: round(t, 6) for kind, t in held.by_kind.items()}
    if held.kind_fits:
        out["per_kind_fits"] = held.kind_fits
    if gguf_sha256:
        out["gguf_sha256"] = gguf_sha256  # the adapter refuses this file beside another GGUF
    return out


class Sender(Protocol):
    """What `AdapterReadout` sends through: evaluation.cli's Target, with its retry count."""

    retries: int

    def send(self, kind: str, body: dict[str, Any]) -> tuple[dict[str, Any], float, int]: ...


class AdapterReadout:
    """One strategy of a served adapter: its requests name the readout (`readout` in the
    decision format, `x_readout` in a System One request), sent with the target's retries."""

    def __init__(self, target: Sender, name: str) -> None:
        self.target = target
        self.name = name

    def send(self, kind: str, body: dict[str, Any]) -> tuple[dict[str, Any], float, int]:
        if kind == "decision":
            body = {**body, "decision": {**body["decision"], "readout": self.name}}
        else:
            body = {**body, "x_readout": self.name}
        return self.target.send(kind, body)

    @property
    def retries(self) -> int:
        return self.target.retries
