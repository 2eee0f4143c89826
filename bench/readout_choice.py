"""Choosing a model's readout from labelled data: the pure parts of `--choose-readout`.

A strategy is anything that answers a request body the way the adapter would with that
readout: `send(kind, body) -> (answer, seconds, retries)`. `AdapterReadout` asks a served
adapter for one strategy by name; tests and studies may pass their own callables. Each strategy
runs over the dev split (with the reversed-order twins), the strategies are ranked by the
issue's targets, the winner's temperature is fitted on dev, and its held-out metrics are
measured on the test split at that temperature. The result is the per-model file beside the
GGUF (`calibration.json`: `temperature`, `readout`, `gguf_sha256`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import metrics
from bench.labelled import Case

Send = Callable[[str, dict[str, Any]], tuple[dict[str, Any], float, int]]

MAX_ORDER_CHANGE = 0.10  # issue 15: top option changes on reversal in at most 10% of examples
MAX_COST_RATIO = 2.0  # issue 15: the default readout costs at most 2x the letter readout


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
    cases: Sequence[Case], pairs: Sequence[tuple[dict, dict, str]] | None
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


def fit_and_hold_out(dev: Sequence[Case], test: Sequence[Case]) -> Held:
    """Temperature on dev's option logits; test measured at that temperature (its raw logits)."""
    usable = [c for c in dev if len(c.logits) == len(c.option_ids)]
    if not usable:
        raise ValueError("the winning readout returned no option logits to fit a temperature")
    found = metrics.fit_temperature([c.logits for c in usable], [c.expected_index for c in usable])
    held = [c for c in test if len(c.logits) == len(c.option_ids)]
    probabilities = [metrics.softmax(c.logits, found.temperature).tolist() for c in held]
    rescaled = [
        Case(**{**c.__dict__, "probabilities": p})
        for c, p in zip(held, probabilities, strict=False)
    ]
    report = strategy_report(rescaled, None) if rescaled else {}
    return Held(found.temperature, found.nll_before, found.nll_after, report)


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
    if gguf_sha256:
        out["gguf_sha256"] = gguf_sha256  # the adapter refuses this file beside another GGUF
    return out


class AdapterReadout:
    """One strategy of a served adapter: its requests name the readout (`readout` in the
    decision format, `x_readout` in a System One request), sent with the target's retries."""

    def __init__(self, target: Any, name: str) -> None:
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
