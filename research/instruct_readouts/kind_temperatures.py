"""Temperatures per question kind for the built-in readout, fitted on three instruct models.

A model served without a profile gets the built-in readout at the built-in temperatures. Those
cannot come from one model: this fits them on the dev splits of the three instruct models
together (Qwen2.5-Coder 1.5B and 0.5B, SmolLM2 135M, each served with no profile at T = 1),
with the rule `python -m evaluation --choose-readout` applies to one model's profile
(`evaluation.readout_choice.fit_by_kind`: a kind keeps its own temperature only where it lowers that
kind's held-out ECE), and reports every model's held-out split at the single temperature, at
T = 1 and at the kept ones, so a kind's temperature that helps one model and hurts another shows.

    python -m research.instruct_readouts.kind_temperatures \\
        --model NAME DEV_REPORT TEST_REPORT [--model ...] --out results/kind-temperatures.json

The reports are the evaluation's report.json; items served at T = 1 carry their probabilities,
whose logarithms are the option logits up to a constant the softmax ignores (newer reports carry
the logits themselves).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from decision_adapter.contract import question_kind

from evaluation import metrics, readout_choice
from evaluation.labelled import Case


def cases_of(report_path: Path) -> list[Case]:
    report = json.loads(report_path.read_text())
    if report.get("served_temperature") not in (1, 1.0):
        raise ValueError(f"{report_path}: served at T = {report.get('served_temperature')}, not 1")
    cases = []
    for item in report["items"]:
        option_ids = list(item["probabilities"])
        logits = item.get("logits") or {
            k: math.log(max(p, 1e-12)) for k, p in item["probabilities"].items()
        }
        cases.append(
            Case(
                item_id=item["id"],
                category=item["category"],
                option_ids=option_ids,
                probabilities=[item["probabilities"][k] for k in option_ids],
                logits=[float(logits[k]) for k in option_ids],
                expected=str(item["expected"]).lower()
                if str(item["expected"]) in ("True", "False")
                else str(item["expected"]),
                latency_s=item.get("latency_ms", 0.0) / 1000,
            )
        )
    return cases


def served_at(cases: list[Case], temperatures: dict[str, float], single: float) -> dict[str, Any]:
    rescaled = [
        metrics.softmax(c.logits, temperatures.get(question_kind(c.option_ids), single))
        for c in cases
    ]
    return metrics.summary(rescaled, [c.expected_index for c in cases])


def study(models: dict[str, tuple[Path, Path]]) -> dict[str, Any]:
    dev = {name: cases_of(paths[0]) for name, paths in models.items()}
    test = {name: cases_of(paths[1]) for name, paths in models.items()}
    pooled_dev = [c for cases in dev.values() for c in cases]
    pooled_test = [c for cases in test.values() for c in cases]
    single = metrics.fit_temperature(
        [c.logits for c in pooled_dev], [c.expected_index for c in pooled_dev]
    ).temperature
    kept, fits = readout_choice.fit_by_kind(pooled_dev, pooled_test, single)
    per_model = {}
    for name in models:
        per_model[name] = {
            "at_1": served_at(test[name], {}, 1.0),
            "at_single": served_at(test[name], {}, single),
            "at_kept": served_at(test[name], kept, single),
            "by_kind_at_1": {
                kind: served_at(group, {}, 1.0) for kind, group in _by_kind(test[name]).items()
            },
            "by_kind_at_kept": {
                kind: served_at(group, kept, single) for kind, group in _by_kind(test[name]).items()
            },
        }
    return {
        "models": {name: [str(p) for p in paths] for name, paths in models.items()},
        "pooled_dev_cases": len(pooled_dev),
        "single_temperature": single,
        "kind_fits": fits,
        "kept": kept,
        "held_out": per_model,
    }


def _by_kind(cases: list[Case]) -> dict[str, list[Case]]:
    groups: dict[str, list[Case]] = {}
    for case in cases:
        groups.setdefault(question_kind(case.option_ids), []).append(case)
    return dict(sorted(groups.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.instruct_readouts.kind_temperatures")
    parser.add_argument(
        "--model",
        nargs=3,
        action="append",
        metavar=("NAME", "DEV_REPORT", "TEST_REPORT"),
        required=True,
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = study({name: (Path(d), Path(t)) for name, d, t in args.model})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"single T {result['single_temperature']:.3f}, kept per kind: {result['kept']}")
    for name, held in result["held_out"].items():
        print(
            f"  {name:24s} ECE at 1 {held['at_1']['ece']:.3f}"
            f"  single {held['at_single']['ece']:.3f}"
            f"  kept {held['at_kept']['ece']:.3f}   NLL {held['at_1']['nll']:.3f} -> "
            f"{held['at_kept']['nll']:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
