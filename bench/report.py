"""`python -m bench.report [RESULT.json]`: docs/benchmarks.md's table (Markdown) from a
result file, the newest in bench/results/ by default, with links to its charts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


# research.readout_cost's files are dated like a `make bench` result: `latest` passes over them.
READOUT_COST_SUFFIX = "-readout-cost.json"
CHAT_VERSUS_SUFFIX = "-chat-versus.json"  # bench.chat_versus: the chat rows alone
CHAT_CONCURRENCY_SUFFIX = "-chat-concurrency.json"  # bench.chat_concurrency
BATCH_EXACTNESS_SUFFIX = "-batch-exactness.json"  # research.batch_exactness
DECISION_CONCURRENCY_SUFFIX = "-decision-concurrency.json"  # bench.decision_concurrency
DECISION_MODELS_SUFFIX = "-decision-models.json"  # bench.decision_models_versus
GPU_BATCHING_SUFFIX = "-gpu-batching.json"  # research.gpu_batching, on the GPU host
OTHER_SUFFIXES = (
    DECISION_MODELS_SUFFIX,
    READOUT_COST_SUFFIX,
    CHAT_VERSUS_SUFFIX,
    CHAT_CONCURRENCY_SUFFIX,
    BATCH_EXACTNESS_SUFFIX,
    DECISION_CONCURRENCY_SUFFIX,
    GPU_BATCHING_SUFFIX,
)


def latest(results: Path = RESULTS) -> Path:
    """The newest `make bench` result, `<date>-<machine>.json`; other benchmarks' JSON files
    (hostile bodies, overload, the readout cost or chat rows alone) live beside it."""
    files = sorted(
        path
        for path in results.glob("[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]-*.json")
        if not path.name.endswith(OTHER_SUFFIXES)
    )
    if not files:
        raise SystemExit("no results in bench/results/: run make bench")
    return files[-1]


def markdown(result: dict, link_prefix: str = "../bench/results/") -> str:
    a, s = result["single_decision"], result["shared_state"]
    machine = result["machine"]
    lines = [
        f"Measured {result['date'][:10]} on {machine['name']} ({machine['threads']} threads, "
        f"load average {machine.get('load_average_1m', '?')}), model `{result['model']}`."
        + _cut_short(result),
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
            # The seconds per level: a run short of budget measures less than the plan's 10 s.
            f"| (d) {run.get('label') or 'DECISION_MAX_QUEUE=' + str(run['max_queue'])}, "
            f"{run['seconds_per_level']:g} s per "
            "level, clients: decisions/s, p95, 503s | "
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
    versus = result.get("llama_server")
    if versus:
        lines += ["", *llama_server_table(versus)]
    charts = result.get("charts") or {}
    if charts:
        lines += ["", " ".join(f"![{name}]({link_prefix}{file})" for name, file in charts.items())]
    return "\n".join(lines)


RATIO_MEANING = (
    "Ratio: the adapter's figure over llama-server's, measured in the same run on the same "
    "prompt tokens, the two taking turns request by request; for times below 1 means the "
    "adapter is faster, for tokens/s above 1 does."
)


def _cut_short(result: dict) -> str:
    cut = (result.get("run") or {}).get("cut_short")
    if not cut:
        return ""
    return f" The time budget cut these short of the plan: {', '.join(cut)}."


def _x(value: float | None) -> str:
    return "-" if value is None else f"**{value:.2f}x**"


def _met(row: dict, sign: str, key: str) -> str:
    return f"{sign} {row[key]} ({'met' if row['meets_target'] else 'missed'})"


def llama_server_table(versus: dict) -> list[str]:
    """The side-by-side rows (bench.side_by_side), or the reason they are missing."""
    if versus.get("skipped_reason"):
        reason = versus["skipped_reason"].strip().splitlines()[0]
        return [f"Side by side with llama-server: skipped ({reason})."]
    lines = [
        "| Side by side with llama-server | adapter | llama-server | ratio | target |",
        "|---|---|---|---|---|",
    ]
    a = versus.get("single_decision")
    if a:
        lines += [
            f"| (a) one decision, {a['prompt_tokens']} tokens, vs a one-token completion with "
            f"n_probs={a['n_probs']} | {a['adapter_median_ms']:.0f} ms | "
            f"{a['llama_server_median_ms']:.0f} ms | {_x(a['ratio'])} | "
            f"{_met(a, '<=', 'target_max')} |",
            _phases_row("(a) where the time goes (medians)", a["phases_median_ms"]),
        ]
    b = versus.get("eight_questions_shared")
    if b:
        lines.append(
            f"| (b) {b['questions']} questions on a {b['state_prompt_tokens']}-token prompt, "
            f"state cache off: our one `decisions` request vs its {b['questions']} requests "
            f"(prompt cache on, {b['llama_server_reused_tokens_median']:.0f} tokens reused) | "
            f"{b['adapter_one_request_median_ms']:.0f} ms | "
            f"{b['llama_server_eight_requests_median_ms']:.0f} ms | {_x(b['ratio'])} | |"
        )
    c = versus.get("eight_questions_cached")
    if c:
        first, follow = c["first_median_ms"], c["follow_up_median_ms"]
        totals = c["eight_total_median_ms"]
        lines += [
            f"| (b) the same as {c['questions']} separate requests, our state cache vs its "
            f"prompt cache: each follow-up question | {follow['adapter']:.0f} ms | "
            f"{follow['llama_server']:.0f} ms | {_x(c['follow_up_ratio'])} | "
            f"{_met(c, '<=', 'target_max')} |",
            f"| (b) ... the first question; all {c['questions']} | {first['adapter']:.0f} ms; "
            f"{totals['adapter']:.0f} ms | {first['llama_server']:.0f} ms; "
            f"{totals['llama_server']:.0f} ms | {_x(c['eight_total_ratio'])} all | |",
        ]
        if c.get("follow_up_phases_median_ms"):
            lines.append(
                _phases_row("(b) a follow-up: where the time goes", c["follow_up_phases_median_ms"])
            )
    for key in ("chat", "chat_top_p"):
        chat = versus.get(key)
        if not chat:
            continue
        ours, theirs, ratios = chat["adapter"], chat["llama_server"], chat["ratios"]
        # The greedy row keeps its name; a sampled one says how it sampled.
        how = ", ".join(f"{name} {value}" for name, value in chat.get("sampling", {}).items())
        name = "chat" if key == "chat" else f"chat ({how})"
        lines += [
            f"| {name}, streamed: generation tokens/s ({chat['max_tokens']} tokens, "
            f"{chat['prompt_tokens'][0]}-token prompt) | "
            f"{ours['streamed_generation_tokens_per_s']:.1f} | "
            f"{theirs['streamed_generation_tokens_per_s']:.1f} | "
            f"{_x(ratios['streamed_generation_tokens_per_s'])} | "
            f"{_met(chat, '>=', 'target_min_generation')} |",
            f"| {name}, streamed: time to first token | "
            f"{ours['streamed_first_token_median_ms']:.0f} ms | "
            f"{theirs['streamed_first_token_median_ms']:.0f} ms | "
            f"{_x(ratios['streamed_first_token'])} | |",
            f"| {name}, not streamed: whole answer | {ours['whole_median_ms']:.0f} ms "
            f"({ours['whole_tokens_per_s']:.1f} tokens/s) | {theirs['whole_median_ms']:.0f} ms "
            f"({theirs['whole_tokens_per_s']:.1f} tokens/s) | {_x(ratios['whole_latency'])} | |",
        ]
    options = versus.get("options")
    if options:
        accuracy = options["accuracy"]
        lines.append(
            f"| options: {options['items']} labelled decisions, llama-server's top-"
            f"{options['n_probs']} mass on the options' labels | probabilities over the options "
            f"only; accuracy {_pct(accuracy['adapter'])} | median share "
            f"{options['option_share_median']:.0%} (lowest {options['option_share_min']:.0%}); "
            f"top token not an option {options['top_token_not_an_option']} of "
            f"{options['items']}; accuracy {_pct(accuracy['llama_server'])} | | |"
        )
    for key, error in (versus.get("errors") or {}).items():
        lines.append(f"| {key} | failed: {error} | | | |")
    return [*lines, "", RATIO_MEANING]


def _phases_row(title: str, phases: dict) -> str:
    """Our model work (state prefill or restore, question, readout), tokenizing, the rest of
    the handler and what lies outside it, against llama-server's own prompt and sampling
    timings and what lies outside them."""
    ours, theirs = phases["adapter"], phases["llama_server"]
    model = _ratio(ours["model_ms"], theirs["prompt_ms"] + theirs["predicted_ms"])
    return (
        f"| {title} | model {ours['model_ms']:.0f} ms, tokenizing {ours['prepare_ms']:.0f} ms, "
        f"rest of the handler {ours['handler_other_ms']:.0f} ms, HTTP and client "
        f"{ours['outside_handler_ms']:.0f} ms | prompt {theirs['prompt_ms']:.0f} ms, sampling "
        f"{theirs['predicted_ms']:.0f} ms, HTTP and client {theirs['outside_model_ms']:.0f} ms "
        f"| {_x(model)} model | |"
    )


def _ratio(ours: float, theirs: float) -> float | None:
    return ours / theirs if theirs > 0 else None


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


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
