"""Two python -m evaluation reports of one labelled file set side by side: the adapter and a peer
server (typed-gguf) on the same GGUF and split, question by question and kind by kind.

Pure: reads the reports `evaluation.cli.report` writes and returns the side-by-side JSON
(accuracy, ECE(10), NLL, Brier per column; per question category and per kind with its
majority-class baseline; how many questions and kinds each column answers at or above it).
`python -m evaluation --peer` writes one after the peer's run; two reports already made (a new
readout of ours beside a committed peer run) are set side by side without running either:

    python -m evaluation.peer_compare adapter=OURS/report.json typed-gguf=THEIRS/report.json \
        --out side_by_side.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

FIGURES = ("accuracy", "ece", "nll", "brier")


class NotComparable(ValueError):
    """The reports did not score the same questions, so their figures cannot stand together."""


def scored_ids(report: dict[str, Any]) -> list[str]:
    return sorted(item["id"] for item in report["items"])


def check_comparable(reports: dict[str, dict[str, Any]]) -> None:
    (first, base), *others = reports.items()
    for name, other in others:
        if other["file_sha256"] != base["file_sha256"]:
            raise NotComparable(f"{name} scored another file than {first} ({other['file']})")
        if scored_ids(other) != scored_ids(base):
            raise NotComparable(f"{name} and {first} scored different questions (--limit?)")
        ours, theirs = base["model"].get("gguf_sha256"), other["model"].get("gguf_sha256")
        if ours and theirs and ours != theirs:
            raise NotComparable(f"{name} ran GGUF {theirs[:12]}, {first} ran {ours[:12]}")


def _figures(group: dict[str, Any]) -> dict[str, Any]:
    return {k: group[k] for k in (*FIGURES, "auc") if k in group}


def _side_by_side(groups: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """{column: {group: figures}} -> {group: {n, majority, column: figures}}."""
    first = next(iter(groups.values()))
    return {
        name: {
            "n": group["n"],
            "majority": group["majority"],
            **{column: _figures(by_group[name]) for column, by_group in groups.items()},
        }
        for name, group in first.items()
    }


def _at_or_above(groups: dict[str, dict[str, Any]]) -> dict[str, int]:
    met = sum(group["vs_majority"] >= -1e-9 for group in groups.values())
    return {"at_or_above": met, "of": len(groups)}


def compare(reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The side-by-side of `reports` ({column name: an evaluation's report}), in their order."""
    check_comparable(reports)
    base = next(iter(reports.values()))
    return {
        "file": base["file"],
        "file_sha256": base["file_sha256"],
        "columns": list(reports),
        "models": {name: r["model"] for name, r in reports.items()},
        "targets": {name: r["target"] for name, r in reports.items()},
        "dates": {name: r["date"] for name, r in reports.items()},
        "served_temperature": {name: r.get("served_temperature") for name, r in reports.items()},
        "overall": {
            name: {"n": r["metrics"]["n"], **_figures(r["metrics"])} for name, r in reports.items()
        },
        "questions_vs_majority": {
            name: _at_or_above(r["by_category"]) for name, r in reports.items()
        },
        "kinds_vs_majority": {name: _at_or_above(r["by_kind"]) for name, r in reports.items()},
        "by_category": _side_by_side({name: r["by_category"] for name, r in reports.items()}),
        "by_kind": _side_by_side({name: r["by_kind"] for name, r in reports.items()}),
        "latency": {name: r["latency"] for name, r in reports.items()},
    }


def render(side: dict[str, Any]) -> str:
    columns = side["columns"]
    lines = [f"{side['file']}: {' | '.join(columns)}"]
    for name in columns:
        o, q = side["overall"][name], side["questions_vs_majority"][name]
        lines.append(
            f"  {name:<10} accuracy {o['accuracy']:.3f}  ECE(10) {o['ece']:.4f}  NLL "
            f"{o['nll']:.4f}  questions at or above majority {q['at_or_above']} of {q['of']}"
            f"  p50 {side['latency'][name]['p50_ms']:.0f} ms"
        )
    for title, groups in (("question", side["by_category"]), ("kind", side["by_kind"])):
        lines.append(f"  per {title} (accuracy: {' / '.join(columns)}; majority):")
        for name, group in groups.items():
            accuracies = " / ".join(f"{group[c]['accuracy']:.3f}" for c in columns)
            lines.append(f"    {name:<28} {accuracies}   {group['majority']:.3f}  (n={group['n']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.peer_compare")
    parser.add_argument("columns", nargs="+", metavar="NAME=REPORT", help="a column's report")
    parser.add_argument("--out", type=Path, required=True, help="where side_by_side.json goes")
    args = parser.parse_args(argv)
    paths = dict(column.partition("=")[::2] for column in args.columns)
    if len(paths) < 2 or not all(paths.values()):
        parser.error("give two or more NAME=REPORT columns")
    try:
        side = compare({name: json.loads(Path(path).read_text()) for name, path in paths.items()})
    except (OSError, ValueError) as error:  # NotComparable is a ValueError
        print(f"evaluation.peer_compare: error: {error}", file=sys.stderr)
        return 1
    side["reports"] = paths
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(side, indent=2, ensure_ascii=False) + "\n")
    print(render(side))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
