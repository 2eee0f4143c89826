"""`python -m bench`: the adapter's latency and throughput, measured in one run on this machine.

(a) overhead: median end-to-end HTTP latency of one decision divided by the median time
    llama.cpp itself takes to prefill the same prompt tokens (the floor); target <= 1.15.
(b) sharing: 1, 2, 4, 8 and 16 decisions on one 1,000-token state in one `decisions` request
    versus as many single requests; target for eight: >= 4x faster.
(c) latency against prompt length, 64 to 4,096 tokens, adapter and floor.
(d) concurrency: 1-16 closed-loop clients against the default server (DECISION_MAX_QUEUE=0:
    503 at once when busy) and a queueing one (DECISION_MAX_QUEUE=16): throughput, p50/p95/p99
    and the share of 503s.
(e) the alternative: a one-token chat completion asking for the option letter, same model and
    prompt text, over the labelled examples: latency, accuracy and how often it names an option.
(f) side by side with llama-server, built once in the engine's own build folder (the same tree
    and flags as the adapter's libllama: bench.llama_server_build) and started with the adapter's
    settings:
    see bench.side_by_side. If it cannot be built or started, the run says why and goes on.

Writes bench/results/<date>-<machine>.json and one PNG per experiment beside it. Repetitions
beyond the first stop when the run's time budget (--budget-minutes) runs short.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench import experiments, side_by_side
from bench.experiments import QUICK, Plan
from bench.floor import Floor
from bench.llama_server import start_beside
from bench.llama_server_build import Build, ensure_llama_server
from bench.timing import REQUEST_TIMEOUT_S, Budget, Caller
from bench.workloads import (
    OPTIONS,
    QUESTIONS,
    SHORT_STATE,
    THREADS,
    long_state,
    machine_name,
    prompt_tokens,
    state_for_prompt_length,
)
from evaluation import labelled
from launcher import running_adapter
from launcher.models import DEFAULT, LOCAL_MODELS, local_model

RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLES = labelled.DATA / "examples.jsonl"
SHARED_STATE_TOKENS = 1000
QUEUED_ADMISSION_WAIT_S = 5.0
STATE_CACHE_BYTES = 256 << 20
ADAPTER_ENV = {"DECISION_N_THREADS": str(THREADS), "DECISION_STATE_CACHE_BYTES": "0"}


@dataclasses.dataclass
class Prepared:
    gguf: Path
    single_tokens: list[int]
    state_1000: str
    length_cases: list[tuple[int, str, list[int]]]
    examples: list[dict]
    versus: side_by_side.Workload


def prepare(plan: Plan, gguf: Path) -> Prepared:
    """Tokenize with the adapter's own renderer, so the floor prefills the very same tokens."""
    from decision_adapter.model.engine import Engine, EngineConfig
    from decision_adapter.scoring.prompts import PromptRenderer

    engine = Engine(
        gguf, EngineConfig(n_ctx=8192, n_batch=512, n_threads=THREADS, n_gpu_layers=0, n_seq_max=16)
    )
    try:
        renderer = PromptRenderer(engine)
        single = prompt_tokens(renderer, SHORT_STATE, QUESTIONS[0], OPTIONS)
        cases = [(n, *state_for_prompt_length(renderer, n)) for n in plan.lengths]
        state = long_state(SHARED_STATE_TOKENS, renderer)
        examples = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
        versus = side_by_side.prepare(
            renderer, state, plan.versus_rounds, examples[: plan.chat_items or len(examples)]
        )
    finally:
        engine.close()
    return Prepared(gguf, single, state, cases, examples, versus)


def log(budget: Budget, message: str) -> None:
    print(f"[{budget.elapsed():6.1f}s] {message}", flush=True)


# A comparison that fails half-way is reported as such; the rest of the run still counts.
SIDE_BY_SIDE_ERRORS = (httpx.HTTPError, RuntimeError, KeyError, ValueError, IndexError)


def beside(budget: Budget, what: str, versus: dict, key: str, measure) -> None:
    log(budget, f"(f) llama-server: {what}")
    try:
        versus[key] = measure()
    except SIDE_BY_SIDE_ERRORS as error:
        versus.setdefault("errors", {})[key] = f"{type(error).__name__}: {error}"
        log(budget, f"(f) {what} failed: {type(error).__name__}: {error}")


def run(plan: Plan, budget: Budget, build: Build, gguf: Path) -> dict:
    log(budget, "tokenizing")
    prepared = prepare(plan, gguf)
    adapter_env = {**ADAPTER_ENV, "DECISION_MODEL_PATH": str(gguf)}

    result: dict = {}
    callers: list[Caller] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        httpx.Client(timeout=REQUEST_TIMEOUT_S) as client,
        contextlib.ExitStack() as llama_server_stack,
    ):
        tmp_dir = Path(tmp)
        log(budget, "starting llama-server beside the adapter")
        server, versus = start_beside(llama_server_stack, build, prepared.gguf, THREADS, tmp_dir)
        if server is None:
            log(budget, f"(f) llama-server side by side skipped: {versus['skipped_reason']}")
        # The state cache (on by default) would answer repeated states without prefilling them:
        # (a)-(e) measure the model path with it off; (b) is measured once more with it on.
        with running_adapter(tmp_dir, **adapter_env) as adapter, Floor(prepared.gguf) as floor:
            caller = Caller(client)
            callers.append(caller)
            url = adapter.url + "/invocations"
            log(budget, "(a) single decision")
            result["single_decision"] = experiments.single_decision(
                caller, url, plan, budget, prepared.single_tokens, floor
            )
            log(budget, "(b) shared state")
            result["shared_state_sweep"], result["shared_state"] = experiments.shared_state(
                caller, url, plan, budget, prepared.state_1000
            )
            log(budget, "(c) prompt length")
            result["prompt_length"] = experiments.prompt_length(
                caller, url, plan, budget, prepared.length_cases, floor
            )
            log(budget, "(e) chat alternative")
            result["chat_alternative"] = experiments.chat_alternative(
                caller, adapter.url, plan, budget, prepared.examples
            )
            log(budget, "readouts: one 6-option decision read each way")
            result["readout_cost"] = experiments.readout_cost(caller, url, plan.readout_repeats)
            if server is not None:
                sides = side_by_side.Sides(caller, adapter.url, server.url)
                work = prepared.versus
                beside(
                    budget,
                    "(a) one decision vs a one-token completion",
                    versus,
                    "single_decision",
                    lambda: side_by_side.single_decision(
                        sides, work.single, plan.versus_single_repeats
                    ),
                )
                beside(
                    budget,
                    "(b) one decisions request vs 8 requests with its prompt cache",
                    versus,
                    "eight_questions_shared",
                    lambda: side_by_side.eight_shared(sides, work.shared_rounds),
                )
                beside(
                    budget,
                    "chat, streamed and not",
                    versus,
                    "chat",
                    lambda: side_by_side.chat(
                        sides,
                        work.chat_messages,
                        work.chat_tokens,
                        plan.versus_chat_max_tokens,
                        plan.versus_chat_repeats,
                    ),
                )
                beside(
                    budget,
                    "chat sampled with top_p 0.9, streamed and not",
                    versus,
                    "chat_top_p",
                    lambda: side_by_side.chat(
                        sides,
                        work.story_messages,
                        work.story_tokens,
                        plan.versus_chat_max_tokens,
                        plan.versus_chat_repeats,
                        side_by_side.SAMPLED_CHAT,
                    ),
                )
                beside(
                    budget,
                    "options in its top-N over the labelled decisions",
                    versus,
                    "options",
                    lambda: side_by_side.option_answers(sides, work.labelled),
                )
            log(budget, "state cache off: eight follow-up requests")
            cache_off = experiments.state_cache_follow_ups(
                caller, adapter.url, prepared.state_1000, plan.follow_up_repeats, "off"
            )
        log(budget, "(b) separate requests with the state cache on")
        cache_env = {**adapter_env, "DECISION_STATE_CACHE_BYTES": str(STATE_CACHE_BYTES)}
        with running_adapter(tmp_dir, **cache_env) as cached:
            caller = Caller(client)
            callers.append(caller)
            sweep = result["shared_state_sweep"]
            sweep["with_state_cache"] = experiments.separate_with_state_cache(
                caller, cached.url + "/invocations", plan, budget, prepared.state_1000, sweep
            )
            log(budget, "state cache on: eight follow-up requests")
            cache_on = experiments.state_cache_follow_ups(
                caller, cached.url, prepared.state_1000, plan.follow_up_repeats, "on"
            )
            if server is not None:
                sides = side_by_side.Sides(caller, cached.url, server.url)
                beside(
                    budget,
                    "(b) 8 separate requests, state cache vs its prompt cache",
                    versus,
                    "eight_questions_cached",
                    lambda: side_by_side.eight_cached(sides, prepared.versus.cached_rounds),
                )
        llama_server_stack.close()  # (d) below runs the adapter alone
        result["state_cache"] = {
            "state_tokens": SHARED_STATE_TOKENS,
            "target_max_ratio": experiments.CACHE_TARGET,
            "with_cache": cache_on,
            "without_cache": cache_off,
            "meets_target": cache_on["worst_ratio"] <= experiments.CACHE_TARGET
            and cache_on["within_budget"],
        }
        seconds = load_seconds(plan, budget)
        runs = []
        settings = [(queue, 1) for queue in plan.queues]
        settings += [(max(plan.queues), lanes) for lanes in plan.batched]
        for queue, lanes in settings:
            label = experiments.run_label(queue, lanes)
            log(budget, f"(d) concurrency, {label}, {seconds:.1f}s per level")
            env = {
                **adapter_env,
                "DECISION_MAX_QUEUE": str(queue),
                "DECISION_ADMISSION_WAIT_S": str(QUEUED_ADMISSION_WAIT_S),
                "DECISION_MAX_SCORING_REQUESTS": str(lanes),
            }
            with running_adapter(tmp_dir, **env) as loaded:
                runs.append(
                    experiments.concurrency_run(
                        loaded.url + "/invocations",
                        plan,
                        seconds,
                        queue,
                        QUEUED_ADMISSION_WAIT_S if queue else 0.0,
                        lanes,
                    )
                )
    result["concurrency"] = {
        "prompt_tokens": len(prepared.single_tokens),
        "client": "closed loop: the next request as soon as the last one answered; after a 503 "
        "the client waits the Retry-After (1 s) before its next request",
        "runs": runs,
    }
    result["sequential_503s"] = sum(c.refused_503 for c in callers)
    result["llama_server"] = versus
    return result | {"gguf": prepared.gguf.name}


def load_seconds(plan: Plan, budget: Budget) -> float:
    """Seconds per concurrency level: the plan's, or less if the budget is short (an adapter
    start per queue setting and the charts still need time)."""
    runs = len(plan.queues) + len(plan.batched)
    levels = len(plan.clients) * runs
    fits = (budget.remaining() - 15 * runs - 15) / levels - 2
    return round(max(2.0, min(plan.load_seconds, fits)), 1)


def cut_short(budget: Budget, measured: dict, plan: Plan) -> list[str]:
    """The experiments that ran fewer repetitions (or shorter load levels) than the plan, because
    the budget ran out: a slower machine needs a larger --budget-minutes to measure them all."""
    names = {share: name for name, share in experiments.SHARES.items()}
    cut = [names[share] for share in budget.refused]
    runs = (measured.get("concurrency") or {}).get("runs") or []
    if any(run["seconds_per_level"] < plan.load_seconds for run in runs):
        cut.append("concurrency")
    return cut


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: fewer sizes and repetitions (about two minutes)",
    )
    parser.add_argument("--repeats", type=int, help="repetitions of the single decision (a)")
    parser.add_argument(
        "--budget-minutes",
        type=float,
        default=None,
        help="time budget for the measurements (default 13, --quick 4)",
    )
    parser.add_argument(
        "--no-llama-server",
        action="store_true",
        help="skip building and comparing with llama-server",
    )
    parser.add_argument("--output", type=Path, default=None, help="JSON path (charts beside it)")
    parser.add_argument(
        "--model", choices=LOCAL_MODELS, default=DEFAULT, help="the model to measure (make MODEL=)"
    )
    args = parser.parse_args()

    plan = QUICK if args.quick else Plan()
    if args.repeats:
        plan = dataclasses.replace(plan, single_repeats=args.repeats)
    if args.no_llama_server:
        build = Build("-", Path(), reason="--no-llama-server")
    else:
        print("llama-server: the cached build, or a build now (minutes, once)", flush=True)
        build = ensure_llama_server()
        print(f"llama-server: {build.binary or 'skipped: ' + str(build.reason)}", flush=True)
    budget = Budget((args.budget_minutes or (4 if args.quick else 13)) * 60)
    measured = run(plan, budget, build, local_model(args.model))
    gguf = measured.pop("gguf")
    now = datetime.now(UTC)
    result = {
        "date": now.isoformat(timespec="seconds"),
        "machine": {
            "name": machine_name(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "threads": THREADS,
            "load_average_1m": round(os.getloadavg()[0], 2),
        },
        "model": gguf,
        "run": {
            "quick": args.quick,
            "budget_s": budget.total_s,
            "adapter_env": ADAPTER_ENV,
            "state_cache_run_bytes": STATE_CACHE_BYTES,
            "measured_s": round(budget.elapsed(), 1),
            "plan": dataclasses.asdict(plan),
            "cut_short": cut_short(budget, measured, plan),
        },
        **measured,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    model = "" if args.model == DEFAULT else f"-{args.model}"
    output = args.output or RESULTS / f"{now:%Y-%m-%d}-{machine_name()}{model}.json"
    output.parent.mkdir(parents=True, exist_ok=True)

    from bench.charts import experiment_charts
    from bench.report import markdown

    result["charts"] = {
        name: Path(path).name
        for name, path in experiment_charts(result, output.with_suffix("")).items()
    }
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    print(f"written to {output} (+ {len(result['charts'])} charts) after {budget.elapsed():.0f}s")
    if result["run"]["cut_short"]:
        print(
            f"the budget cut short: {', '.join(result['run']['cut_short'])}; "
            "a larger --budget-minutes measures the whole plan"
        )


if __name__ == "__main__":
    main()
