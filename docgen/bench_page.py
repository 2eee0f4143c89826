"""docs/benchmarks.md's results tables: `bench.report`'s table of the newest `make bench`
result, and the decision model beside llama-server (bench.decision_models_versus)."""

from __future__ import annotations

import json
from typing import Any

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


CONCURRENCY_SOURCE = "the newest bench/results/<date>-<machine>-{decision,chat}-concurrency.json"


def _newest(suffix: str) -> tuple[dict[str, Any], str]:
    from bench.report import RESULTS

    newest = sorted(RESULTS.glob(f"*{suffix}"))[-1]
    link = f"[{newest.name}](../bench/results/{newest.name})"
    return json.loads(newest.read_text(encoding="utf-8")), link


def render_decision_concurrency() -> str:
    """bench.decision_concurrency's newest run: decisions/s (p95 ms) per client level."""
    from bench.report import DECISION_CONCURRENCY_SUFFIX

    result, link = _newest(DECISION_CONCURRENCY_SUFFIX)
    rows = [("adapter, one at a time", result["adapter_one_at_a_time"]["levels"])]
    rows.append(("adapter, 8 at once", result["adapter_batched"]["levels"]))
    for run in result["llama_server"]["runs"]:
        slots = run["arguments"][run["arguments"].index("--parallel") + 1]
        rows.append((f"llama-server `-np {slots}`", run["levels"]))
    clients = [level["clients"] for level in rows[0][1]]
    table = ["| decisions/s (p95 ms) | " + " | ".join(map(str, clients)) + " |"]
    table.append("|---" * (len(clients) + 1) + "|")
    for name, levels in rows:
        cells = [f"{lv['throughput_rps']:.2f} ({lv['latency']['p95_ms']:.0f})" for lv in levels]
        table.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(table) + f"\n\nFrom {link}, load average {_load(result)}."


def render_chat_concurrency() -> str:
    """bench.chat_concurrency's newest run: generated tokens/s per client level."""
    from bench.report import CHAT_CONCURRENCY_SUFFIX

    result, link = _newest(CHAT_CONCURRENCY_SUFFIX)
    rows = [
        ("model alone: one round's batch", result["model_rounds"]),
        ("adapter, streams take turns", result["adapter_turns"]["levels"]),
        ("adapter, streams share batches", result["adapter_shared"]["levels"]),
        ("adapter, one stream at a time", result["adapter_one_at_a_time"]["levels"]),
        ("llama-server, as many slots", result["llama_server"]["levels"]),
    ]
    clients = [level["clients"] for level in rows[1][1]]
    table = ["| tokens/s at clients (streams) | " + " | ".join(map(str, clients)) + " |"]
    table.append("|---" * (len(clients) + 1) + "|")
    for name, levels in rows:
        table.append(
            f"| {name} | " + " | ".join(f"{lv['tokens_per_s']:.1f}" for lv in levels) + " |"
        )
    first = {
        name: result[key]["first_token_ms"]
        for name, key in (
            ("taking turns", "adapter_turns"),
            ("sharing", "adapter_shared"),
            ("one at a time", "adapter_one_at_a_time"),
            ("llama-server", "llama_server"),
        )
    }
    firsts = ", ".join(f"{ms:.0f} ms {name}" for name, ms in first.items())
    return (
        "\n".join(table)
        + f"\n\nTime to first token, one stream: {firsts}."
        + f"\n\nFrom {link}, load average {_load(result)}."
    )


def _load(result: dict[str, Any]) -> str:
    before, after = result["load_average_before"][0], result["load_average_after"][0]
    return f"{before:.1f} before and {after:.1f} after"
