"""`python -m bench.report [RESULT.json]`: the README's benchmark table (Markdown) from a
result file, the newest in bench/results/ by default, with links to its charts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def latest(results: Path = RESULTS) -> Path:
    """The newest `make bench` result, `<date>-<machine>.json`; other benchmarks' JSON files
    (hostile bodies, overload) live beside it."""
    files = sorted(results.glob("[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]-*.json"))
    if not files:
        raise SystemExit("no results in bench/results/: run make bench")
    return files[-1]


def markdown(result: dict, link_prefix: str = "bench/results/") -> str:
    a, s = result["single_decision"], result["shared_state"]
    machine = result["machine"]
    lines = [
        f"Measured {result['date'][:10]} on {machine['name']} ({machine['threads']} threads, "
        f"load average {machine.get('load_average_1m', '?')}), model `{result['model']}`.",
        "",
        "| Experiment | Result |",
        "|---|---|",
        f"| (a) one decision, {a['prompt_tokens']} tokens | {a['http_median_ms']:.0f} ms over "
        f"HTTP vs {a['llama_cpp_prefill_median_ms']:.0f} ms llama.cpp prefill: "
        f"**{a['overhead_ratio']:.2f}x** "
        f"(target <= {a['target_max']}) |",
        f"| (b) {s['decisions']} decisions on a {s['state_tokens']}-token state | "
        f"{s['shared_request_median_ms']:.0f} ms shared vs "
        f"{s['eight_single_requests_median_ms']:.0f} ms "
        f"separate: **{s['speedup']:.1f}x** (target >= {s['target_min']}) |",
    ]
    sweep = result.get("shared_state_sweep")
    if sweep:
        lines.append(
            "| (b) speedup of sharing, by questions | "
            + ", ".join(f"{r['questions']}: {r['speedup']:.1f}x" for r in sweep["rows"])
            + " |"
        )
        cached = (sweep.get("with_state_cache") or {}).get("rows")
        if cached:
            lines.append(
                "| (b) the same against separate requests with the state cache on | "
                + ", ".join(f"{r['questions']}: {r['speedup_of_shared']:.1f}x" for r in cached)
                + " |"
            )
    lengths = result.get("prompt_length")
    if lengths:
        lines.append(
            "| (c) latency by prompt tokens | "
            + ", ".join(
                f"{r['prompt_tokens']}: {r['http_median_ms']:.0f} ms"
                + (f" ({r['overhead_ratio']:.2f}x floor)" if "overhead_ratio" in r else "")
                for r in lengths["rows"]
            )
            + " |"
        )
    for run in (result.get("concurrency") or {}).get("runs", []):
        lines.append(
            f"| (d) DECISION_MAX_QUEUE={run['max_queue']}, clients: decisions/s, "
            "p95, 503s | "
            + ", ".join(
                f"{r['clients']}: {r['throughput_rps']:.1f}/s, "
                f"{r['latency'].get('p95_ms', 0):.0f} ms, {r['share_503']:.0%}"
                for r in run["rows"]
            )
            + " |"
        )
    cache = result.get("state_cache")
    if cache:
        on, off = cache["with_cache"], cache["without_cache"]
        lines.append(
            f"| state cache: 8 separate requests on one {cache['state_tokens']}-token state | "
            f"requests 2-8 cost at most **{on['worst_ratio']:.2f}x** the first with the cache "
            f"(target <= {cache['target_max_ratio']}), {off['worst_ratio']:.2f}x without; "
            f"first {on['median_ms_by_position'][0]:.0f} ms, then "
            f"{max(on['median_ms_by_position'][1:]):.0f} ms at most; cache "
            f"{on['cache_bytes'] / 2**20:.1f} of {on['cache_budget_bytes'] / 2**20:.0f} MiB |"
        )
    chat = result.get("chat_alternative")
    if chat:
        d, c = chat["decision"], chat["chat"]
        lines.append(
            f"| (e) {chat['items']} labelled decisions: decision vs one-token chat | p50 "
            f"{d['latency']['p50_ms']:.0f} vs {c['latency']['p50_ms']:.0f} ms; accuracy "
            f"{d['accuracy']:.0%} vs {c['accuracy']:.0%}; answer is an option "
            f"{d['valid_answer_rate']:.0%} "
            f"vs {c['valid_answer_rate']:.0%} |"
        )
    readouts = result.get("readout_cost")
    if readouts:
        lines.append(readout_row(readouts))
    charts = result.get("charts") or {}
    if charts:
        lines += ["", " ".join(f"![{name}]({link_prefix}{file})" for name, file in charts.items())]
    return "\n".join(lines)


def readout_row(cost: dict) -> str:
    """The default readout's cost on a 6-option request against letters, each strategy's."""
    default = cost["default"]
    each = ", ".join(
        f"{name} {cost['ratio_to_letters'][name]:.2f}x"
        + (f" (acc {cost['dev_accuracy'][name]:.2f})" if name in cost["dev_accuracy"] else "")
        for name in cost["median_ms"]
    )
    return (
        f"| readouts: one {cost['options']}-option decision | default `{default}` "
        f"**{cost['ratio_to_letters'][default]:.2f}x** letters ({cost['median_ms'][default]:.0f} "
        f"vs {cost['median_ms']['letters']:.0f} ms; target <= {cost['target_max_ratio']}); "
        f"{each}; accuracy on `{cost['accuracy_source']}` |"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else latest()
    print(markdown(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
