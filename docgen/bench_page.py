"""docs/benchmarks.md's results table: `bench.report`'s table of the newest `make bench`
result."""

from __future__ import annotations

import json

from bench.report import latest, markdown

SOURCE = "the newest bench/results/<date>-<machine>.json, by bench.report"


def render() -> str:
    return markdown(json.loads(latest().read_text(encoding="utf-8")))
