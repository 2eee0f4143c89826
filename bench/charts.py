"""PNG charts (matplotlib, Agg backend): one per benchmark experiment. Each function takes the
JSON-ready result dict and a path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evaluation.charts import save_figure  # noqa: E402

ADAPTER = "#1f77b4"
FLOOR = "#7f7f7f"
SECOND = "#d62728"
THIRD = "#2ca02c"


def _subtitle(result: dict[str, Any]) -> str:
    machine = result.get("machine", {})
    threads = machine.get("threads", "?")
    return f"{result.get('model', '')}, {machine.get('name', '')}, {threads} threads"


# --- benchmark experiments -------------------------------------------------------------------
def single_decision(result: dict[str, Any], path: Path) -> Path:
    """(a) one decision over HTTP versus llama.cpp's own prefill of the same tokens."""
    a = result["single_decision"]
    figure, axis = plt.subplots(figsize=(6.5, 4))
    samples = [a["samples_ms"]["http"], a["samples_ms"]["llama_cpp_prefill"]]
    box = axis.boxplot(samples, patch_artist=True, widths=0.5)
    axis.set_xticks([1, 2], ["adapter, HTTP end to end", "llama.cpp prefill (floor)"])
    for patch, colour in zip(box["boxes"], (ADAPTER, FLOOR), strict=False):
        patch.set_facecolor(colour)
        patch.set_alpha(0.5)
    axis.set_ylabel("milliseconds")
    axis.set_ylim(bottom=0)
    axis.set_title(
        f"(a) One decision, {a['prompt_tokens']} prompt tokens: overhead "
        f"{a['overhead_ratio']:.2f}x the floor\n{_subtitle(result)}",
        fontsize=10,
    )
    return save_figure(figure, path)


def shared_state(result: dict[str, Any], path: Path) -> Path:
    """(b) n questions over one state: one `decisions` request versus n single requests."""
    rows = result["shared_state_sweep"]["rows"]
    n = [r["questions"] for r in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(
        n,
        [r["shared_median_ms"] / 1000 for r in rows],
        marker="o",
        color=ADAPTER,
        label="one request, state shared",
    )
    left.plot(
        n,
        [r["separate_median_ms"] / 1000 for r in rows],
        marker="s",
        color=SECOND,
        label="separate requests, one after another",
    )
    cached = (result["shared_state_sweep"].get("with_state_cache") or {}).get("rows")
    if cached:
        left.plot(
            n,
            [r["separate_cached_median_ms"] / 1000 for r in cached],
            marker="^",
            color=THIRD,
            linestyle="--",
            label="separate requests, state cache on",
        )
    left.set_xscale("log", base=2)
    left.set_xticks(n, [str(x) for x in n])
    left.set_xlabel("questions on the same state")
    left.set_ylabel("seconds")
    left.set_ylim(bottom=0)
    left.legend(fontsize=8)
    left.set_title(f"State of {result['shared_state_sweep']['state_tokens']} tokens", fontsize=10)
    positions = range(len(n))
    offset = 0.2 if cached else 0.0
    right.bar(
        [x - offset for x in positions],
        [r["speedup"] for r in rows],
        width=0.4,
        color=ADAPTER,
        label="vs separate requests",
    )
    for x, r in enumerate(rows):
        right.annotate(
            f"{r['speedup']:.1f}x", (x - offset, r["speedup"]), ha="center", va="bottom", fontsize=8
        )
    if cached:
        right.bar(
            [x + offset for x in positions],
            [r["speedup_of_shared"] for r in cached],
            width=0.4,
            color=THIRD,
            label="vs separate requests, state cache on",
        )
        for x, r in enumerate(cached):
            right.annotate(
                f"{r['speedup_of_shared']:.1f}x",
                (x + offset, r["speedup_of_shared"]),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    right.set_xticks(list(positions), [str(x) for x in n])
    right.legend(fontsize=8)
    right.axhline(1, color=FLOOR, linestyle="--")
    right.set_xlabel("questions on the same state")
    right.set_ylabel("speedup (separate / shared)")
    right.set_title("Speedup of sharing", fontsize=10)
    figure.suptitle(f"(b) Shared-state scoring\n{_subtitle(result)}", fontsize=10)
    return save_figure(figure, path)


def prompt_length(result: dict[str, Any], path: Path) -> Path:
    """(c) latency against prompt length, adapter and floor."""
    rows = result["prompt_length"]["rows"]
    tokens = [r["prompt_tokens"] for r in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    adapter = [r["http_median_ms"] for r in rows]
    low = [r["http_median_ms"] - r["http_min_ms"] for r in rows]
    high = [r["http_max_ms"] - r["http_median_ms"] for r in rows]
    left.errorbar(
        tokens,
        adapter,
        yerr=[low, high],
        marker="o",
        color=ADAPTER,
        capsize=3,
        label="adapter, HTTP (median, min-max)",
    )
    if all(r.get("llama_cpp_prefill_median_ms") for r in rows):
        left.plot(
            tokens,
            [r["llama_cpp_prefill_median_ms"] for r in rows],
            marker="s",
            color=FLOOR,
            label="llama.cpp prefill (floor)",
        )
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("prompt tokens")
    left.set_ylabel("milliseconds")
    left.legend(fontsize=8)
    left.set_title("Latency", fontsize=10)
    right.plot(
        tokens,
        [r["prompt_tokens"] / r["http_median_ms"] * 1000 for r in rows],
        marker="o",
        color=ADAPTER,
        label="adapter",
    )
    if all(r.get("llama_cpp_prefill_median_ms") for r in rows):
        floor_rate = [r["prompt_tokens"] / r["llama_cpp_prefill_median_ms"] * 1000 for r in rows]
        right.plot(tokens, floor_rate, marker="s", color=FLOOR, label="llama.cpp prefill")
    right.set_xscale("log", base=2)
    right.set_xlabel("prompt tokens")
    right.set_ylabel("prompt tokens per second")
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    right.set_title("Prefill throughput", fontsize=10)
    figure.suptitle(f"(c) Latency against prompt length\n{_subtitle(result)}", fontsize=10)
    return save_figure(figure, path)


def concurrency(result: dict[str, Any], path: Path) -> Path:
    """(d) clients against throughput, latency percentiles and 503 share, per queue setting."""
    runs = result["concurrency"]["runs"]
    figure, axes = plt.subplots(1, 3, figsize=(13, 4))
    styles = [("-", "o"), ("--", "s"), (":", "^")]
    for (line, marker), run in zip(styles, runs, strict=False):
        rows = run["rows"]
        clients = [r["clients"] for r in rows]
        label = run.get("label") or f"DECISION_MAX_QUEUE={run['max_queue']}"
        axes[0].plot(
            clients,
            [r["throughput_rps"] for r in rows],
            linestyle=line,
            marker=marker,
            color=ADAPTER,
            label=label,
        )
        for key, colour in (("p50_ms", ADAPTER), ("p95_ms", SECOND), ("p99_ms", THIRD)):
            axes[1].plot(
                clients,
                [r["latency"].get(key) for r in rows],
                linestyle=line,
                marker=marker,
                color=colour,
                label=f"{key[:3]}, {label.replace('DECISION_', '')}",
            )
        axes[2].plot(
            clients,
            [100 * r["share_503"] for r in rows],
            linestyle=line,
            marker=marker,
            color=SECOND,
            label=label,
        )
    for axis, ylabel, title in (
        (axes[0], "answered decisions per second", "Throughput"),
        (axes[1], "milliseconds (answered requests)", "Latency"),
        (axes[2], "% of responses that were 503", "Refused (503)"),
    ):
        axis.set_xscale("log", base=2)
        ticks = [r["clients"] for r in runs[0]["rows"]]
        axis.set_xticks(ticks, [str(t) for t in ticks])
        axis.set_xlabel("concurrent clients")
        axis.set_ylabel(ylabel)
        axis.set_ylim(bottom=0)
        axis.set_title(title, fontsize=10)
        axis.legend(fontsize=7)
    figure.suptitle(
        f"(d) Concurrency, one decision of {result['concurrency']['prompt_tokens']} "
        f"tokens per request\n{_subtitle(result)}",
        fontsize=10,
    )
    return save_figure(figure, path)


def chat_alternative(result: dict[str, Any], path: Path) -> Path:
    """(e) decision scoring versus a one-token chat completion asking for the option letter."""
    e = result["chat_alternative"]
    names = ["decision scoring", "chat, 1 token"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    p50 = [e["decision"]["latency"]["p50_ms"], e["chat"]["latency"]["p50_ms"]]
    p95 = [e["decision"]["latency"]["p95_ms"], e["chat"]["latency"]["p95_ms"]]
    x = range(len(names))
    left.bar([i - 0.2 for i in x], p50, width=0.4, color=ADAPTER, label="p50")
    left.bar([i + 0.2 for i in x], p95, width=0.4, color=SECOND, alpha=0.6, label="p95")
    left.set_xticks(list(x), names)
    left.set_ylabel("milliseconds")
    left.legend(fontsize=8)
    left.set_title(f"Latency over {e['items']} labelled decisions", fontsize=10)
    metrics = ["accuracy", "valid_answer_rate"]
    values = [[e["decision"][m] for m in metrics], [e["chat"][m] for m in metrics]]
    for offset, (name, row, colour) in enumerate(
        zip(names, values, (ADAPTER, SECOND), strict=False)
    ):
        positions = [i + (offset - 0.5) * 0.4 for i in range(len(metrics))]
        bars = right.bar(positions, row, width=0.4, color=colour, label=name)
        for bar, value in zip(bars, row, strict=False):
            right.annotate(
                f"{value:.0%}",
                (bar.get_x() + bar.get_width() / 2, value),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    right.set_xticks(range(len(metrics)), ["accuracy", "answer is an option"])
    right.set_ylim(0, 1.1)
    right.legend(fontsize=8)
    right.set_title("What comes back", fontsize=10)
    figure.suptitle(
        f"(e) The alternative: a one-token chat completion, same model and prompt\n"
        f"{_subtitle(result)}",
        fontsize=10,
    )
    return save_figure(figure, path)


EXPERIMENT_CHARTS = {
    "a-single-decision": single_decision,
    "b-shared-state": shared_state,
    "c-prompt-length": prompt_length,
    "d-concurrency": concurrency,
    "e-chat-alternative": chat_alternative,
}


def experiment_charts(result: dict[str, Any], stem: Path) -> dict[str, str]:
    """Every chart whose experiment is in `result`, as `<stem>-<name>.png`."""
    keys = {
        "a-single-decision": "single_decision",
        "b-shared-state": "shared_state_sweep",
        "c-prompt-length": "prompt_length",
        "d-concurrency": "concurrency",
        "e-chat-alternative": "chat_alternative",
    }
    written = {}
    for name, draw in EXPERIMENT_CHARTS.items():
        if result.get(keys[name]):
            path = stem.parent / f"{stem.name}-{name}.png"
            written[name] = str(draw(result, path))
    return written
