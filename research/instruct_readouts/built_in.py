"""Which readout and temperature a model without a profile gets, from three models together.

The built-in readout of an instruct model is served to every model without a profile, so it is
chosen on the dev splits of the three instruct models together, never on one: each model's
`variants.py` results on dev and on test (a split nothing here is tuned on). For the incumbent
(`json_choice` at T = 1) and each candidate variant, every model's test split is measured at
three temperatures, each chosen on dev alone:

- `pooled`: fitted on the three dev splits pooled;
- `own`: each model's own dev fit (what a profile would gain);
- `no_worse`: the built-in rule. Among the temperatures at which no model's dev NLL is worse
  than with the incumbent, the one best for the model that reads best on dev (its dev NLL). A
  small model wants a temperature of 8-14 and the model that reads about 2 (one pooled fit
  serves neither); this one serves the model that reads, as the 1.5B-4B models users deploy
  do, without leaving another model worse calibrated on dev than it was.

    python -m research.instruct_readouts.built_in --model qwen2.5-coder-1.5b \\
        --model qwen2.5-coder-0.5b --model smollm2 --out results/built-in.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from evaluation import metrics, readout_choice
from evaluation.labelled import Case

from .held_out import cases_of, report

RESULTS = Path(__file__).parent / "results"
INCUMBENT = "json_choice"
CANDIDATES = ("json_choice", "json_choice_sum", "levels_by_words_sum")
FIGURES = ("accuracy", "ece", "nll")


def fitted(cases: list[Case]) -> float:
    return metrics.fit_temperature(
        [c.logits for c in cases], [c.expected_index for c in cases]
    ).temperature


def at(cases: list[Case], temperature: float) -> dict[str, Any]:
    return report(readout_choice.rescaled(cases, lambda c: temperature))


GRID = [round(1.0 + 0.05 * step, 2) for step in range(181)]  # T = 1 ... 10


def no_worse(dev: dict[str, dict[str, list[Case]]], variant: str) -> float | None:
    """The `no_worse` rule on the dev splits; None where no temperature on GRID meets it."""
    incumbent = {m: at(cases[INCUMBENT], 1.0)["nll"] for m, cases in dev.items()}
    reader = max(dev, key=lambda m: at(dev[m][variant], 1.0)["accuracy"])
    allowed = [t for t in GRID if all(at(dev[m][variant], t)["nll"] <= incumbent[m] for m in dev)]
    return min(allowed, key=lambda t: at(dev[reader][variant], t)["nll"], default=None)


def compare(splits: dict[str, tuple[dict[str, list[Case]], dict[str, list[Case]]]]) -> dict:
    out: dict[str, Any] = {"models": list(splits), "variants": {}}
    dev = {model: cases for model, (cases, _) in splits.items()}
    for variant in CANDIDATES:
        pooled = fitted([c for cases in dev.values() for c in cases[variant]])
        rule = no_worse(dev, variant)
        rows = {}
        for model, (ours, test) in splits.items():
            own = fitted(ours[variant])
            rows[model] = {
                "own_dev_temperature": own,
                "test_at_1": at(test[variant], 1.0),
                "test_at_pooled": at(test[variant], pooled),
                "test_at_own": at(test[variant], own),
                "test_at_no_worse": at(test[variant], rule) if rule else None,
            }
        out["variants"][variant] = {
            "pooled_dev_temperature": pooled,
            "no_worse_dev_temperature": rule,
            "models": rows,
        }
    return out


def figures(r: dict[str, Any]) -> str:
    return " ".join(f"{k} {r[k]:.3f}" for k in FIGURES) + f" below {len(r['below_majority'])}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.instruct_readouts.built_in")
    parser.add_argument("--model", action="append", required=True, help="a results name")
    parser.add_argument("--out", type=Path, required=True, help="where the JSON goes")
    args = parser.parse_args(argv)
    splits = {
        m: (
            cases_of(RESULTS / f"variants-{m}-dev.json"),
            cases_of(RESULTS / f"variants-{m}-test.json"),
        )
        for m in args.model
    }
    result = compare(splits)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for variant, v in result["variants"].items():
        print(
            f"{variant}: pooled dev T {v['pooled_dev_temperature']:.2f}, "
            f"no-worse dev T {v['no_worse_dev_temperature']}",
            file=sys.stderr,
        )
        for model, row in v["models"].items():
            rule = row["test_at_no_worse"]
            print(
                f"  {model:20s} T=1: {figures(row['test_at_1'])} | pooled: "
                f"{figures(row['test_at_pooled'])} | own T {row['own_dev_temperature']:.2f}: "
                f"{figures(row['test_at_own'])} | no-worse: {figures(rule) if rule else '-'}",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
