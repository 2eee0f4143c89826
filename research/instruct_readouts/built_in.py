"""Which readout and temperature a model without a profile gets, from three models together.

The built-in readout of an instruct model is served to every model without a profile, so it is
chosen on the dev splits of the three instruct models together, never on one: each model's
`variants.py` results on dev and on test (a split nothing here is tuned on). For the incumbent
(`json_choice` at T = 1) and each candidate variant, the temperature is fitted on the three dev
splits pooled, then every model's test split is measured at it; each model's own dev fit is
shown beside it, for what a profile would gain.

    python -m research.instruct_readouts.built_in --model qwen2.5-coder-1.5b \\
        --model qwen2.5-coder-0.5b --model smollm2 --out results/built-in.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench import metrics, readout_choice
from bench.labelled import Case

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


def compare(splits: dict[str, tuple[dict[str, list[Case]], dict[str, list[Case]]]]) -> dict:
    out: dict[str, Any] = {"models": list(splits), "variants": {}}
    for variant in CANDIDATES:
        pooled = fitted([c for dev, _ in splits.values() for c in dev[variant]])
        rows = {}
        for model, (dev, test) in splits.items():
            own = fitted(dev[variant])
            rows[model] = {
                "own_dev_temperature": own,
                "test_at_1": at(test[variant], 1.0),
                "test_at_pooled": at(test[variant], pooled),
                "test_at_own": at(test[variant], own),
            }
        out["variants"][variant] = {"pooled_dev_temperature": pooled, "models": rows}
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
        print(f"{variant}: pooled dev T {v['pooled_dev_temperature']:.2f}", file=sys.stderr)
        for model, row in v["models"].items():
            print(
                f"  {model:20s} T=1: {figures(row['test_at_1'])} | pooled: "
                f"{figures(row['test_at_pooled'])} | own T {row['own_dev_temperature']:.2f}: "
                f"{figures(row['test_at_own'])}",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
