"""docs/benchmarks.md's results tables: `bench.report`'s table of the newest `make bench`
result, and the decision model beside llama-server (bench.decision_models_versus)."""

from __future__ import annotations

import json

from bench.report import latest, markdown

SOURCE = "the newest bench/results/<date>-<machine>.json, by bench.report"


def render() -> str:
    return markdown(json.loads(latest().read_text(encoding="utf-8")))


DECISION_MODELS_SOURCE = "the newest bench/results/<date>-<machine>-decision-models.json"


def render_decision_models() -> str:
    from bench.decision_models_versus import markdown as decision_models_markdown
    from bench.report import DECISION_MODELS_SUFFIX, RESULTS

    newest = sorted(RESULTS.glob(f"*{DECISION_MODELS_SUFFIX}"))[-1]
    result = json.loads(newest.read_text(encoding="utf-8"))
    link = f"[{newest.name}](../bench/results/{newest.name})"
    return f"{decision_models_markdown(result)}\n\nFrom {link}."
