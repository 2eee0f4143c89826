"""The answer-cue variants held out: a temperature fitted on the dev split, measured on test.

A variant that reads better but is sharper (the whole log-probability) can only be judged at a
temperature, and a temperature fitted on the split it is measured on flatters it. This reads
two runs of `variants.py` over the same served model, one on the dev split and one on the test
split, fits each variant's temperature (and per question kind, where it earns it) on dev with
the same rule `python -m evaluation --choose-readout` uses, and measures test at T = 1 and at the
fitted temperature.

    python -m research.instruct_readouts.held_out results/variants-NAME-dev.json \\
        results/variants-NAME-test.json --out results/held-out-NAME.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from decision_adapter.contract import question_kind

from evaluation import readout_choice
from evaluation.labelled import Case

from .variants import case_from_record, report


def cases_of(path: Path) -> dict[str, list[Case]]:
    data = json.loads(path.read_text())
    if "cases" not in data:
        raise SystemExit(f"{path}: no per-case scores; rerun variants.py to record them")
    return {
        variant: [case_from_record(r) for r in records]
        for variant, records in data["cases"].items()
    }


def hold_out(dev: dict[str, list[Case]], test: dict[str, list[Case]]) -> dict[str, Any]:
    out = {}
    for variant in sorted(dev.keys() & test.keys()):
        held = readout_choice.fit_and_hold_out(dev[variant], test[variant])
        fitted = readout_choice.rescaled(
            test[variant],
            lambda c, h=held: h.by_kind.get(question_kind(c.option_ids), h.temperature),
        )
        out[variant] = {
            "temperature": held.temperature,
            "temperature_by_kind": held.by_kind,
            "kind_fits": held.kind_fits,
            "test_at_t1": report(test[variant]),
            "test_at_fitted": report(fitted),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.instruct_readouts.held_out")
    parser.add_argument("dev", type=Path, help="variants.py's results on the dev split")
    parser.add_argument("test", type=Path, help="variants.py's results on the test split")
    parser.add_argument("--out", type=Path, required=True, help="where the JSON goes")
    args = parser.parse_args(argv)
    result = {
        "dev": str(args.dev),
        "test": str(args.test),
        "variants": hold_out(cases_of(args.dev), cases_of(args.test)),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for variant, r in result["variants"].items():
        t1, fit = r["test_at_t1"], r["test_at_fitted"]
        print(
            f"{variant:34s} T {r['temperature']:5.2f} acc {fit['accuracy']:.3f} "
            f"nll {t1['nll']:.3f}->{fit['nll']:.3f} ece {t1['ece']:.3f}->{fit['ece']:.3f} "
            f"below majority {len(fit['below_majority'])}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
