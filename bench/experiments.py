"""The five experiments of `python -m bench`, each returning its JSON-ready result.

(a) one decision over HTTP versus llama.cpp's own prefill of the same tokens (the floor);
(b) 1..16 questions over one 1,000-token state: one `decisions` request versus separate ones;
(c) latency against prompt length, adapter and floor;
(d) concurrency: closed-loop clients, throughput, latency percentiles, share of 503s;
(e) the alternative: a one-token chat completion asking for the option letter;
readouts: one 6-option decision read with each readout strategy, cost against letters.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.concurrency import run_load
from bench.floor import Floor
from bench.timing import REQUEST_TIMEOUT_S, Budget, Caller, median_ms, ms, samples_ms
from bench.workloads import (
    QUESTIONS,
    SHORT_STATE,
    chat_prompt,
    decision,
    load_decision,
    parse_letter,
)
from evaluation import metrics

OVERHEAD_TARGET = 1.15
SHARING_TARGET = 4.0
SHARING_DECISIONS = 8  # the must-show comparison: eight decisions on one state


@dataclass(frozen=True)
class Plan:
    """Repetitions and sizes; a repetition beyond the first runs only within the budget."""

    single_repeats: int = 15
    shared_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    shared_repeats: int = 5
    separate_repeats: int = 3
    lengths: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048, 4096)
    length_repeats: int = 5
    clients: tuple[int, ...] = (1, 2, 4, 8, 16)
    load_seconds: float = 10.0
    queues: tuple[int, ...] = (0, 16)
    # DECISION_MAX_SCORING_REQUESTS of the batched runs (queue 16): decisions sharing batches.
    batched: tuple[int, ...] = (8,)
    chat_items: int | None = None  # None: every labelled example
    follow_up_repeats: int = 3
    # side by side with llama-server (bench.side_by_side)
    versus_single_repeats: int = 15
    versus_rounds: int = 3
    versus_chat_repeats: int = 3
    versus_chat_max_tokens: int = 64
    readout_repeats: int = 7


QUICK = Plan(
    single_repeats=5,
    shared_sizes=(1, 2, 4, 8),
    shared_repeats=1,
    separate_repeats=1,
    lengths=(64, 256, 1024),
    length_repeats=1,
    load_seconds=2.0,
    chat_items=8,
    follow_up_repeats=1,
    versus_single_repeats=5,
    versus_rounds=1,
    versus_chat_repeats=1,
    versus_chat_max_tokens=32,
    readout_repeats=2,
)

# Cumulative shares of the budget: the deadline by which each phase stops adding repetitions.
SHARES = {"single": 0.05, "shared": 0.35, "length": 0.58, "chat": 0.66, "cached": 0.72}


# --- (a) ------------------------------------------------------------------------------------
def single_decision(
    caller: Caller, url: str, plan: Plan, budget: Budget, tokens: list[int], floor: Floor
) -> dict[str, Any]:
    """Adapter and floor take turns, request by request, so both see the same machine (on a
    shared one, background load drifts by the minute)."""
    body = {"decision": decision(SHORT_STATE, QUESTIONS[0])}
    for _ in range(3):
        caller.seconds(url, body)  # warm-up
        floor.prefill(tokens)
    single: list[float] = []
    prefill: list[float] = []
    while len(single) < plan.single_repeats and budget.more(SHARES["single"], len(single), 5):
        prefill.append(floor.prefill(tokens))
        single.append(caller.seconds(url, body))
    overhead = statistics.median(single) / statistics.median(prefill)
    return {
        "prompt_tokens": len(tokens),
        "http_median_ms": median_ms(single),
        "http_p95_ms": ms(metrics.percentile(single, 95)),
        "llama_cpp_prefill_median_ms": median_ms(prefill),
        "overhead_ratio": round(overhead, 3),
        "paired_overhead_median": round(
            statistics.median(h / f for h, f in zip(single, prefill, strict=False)), 3
        ),
        "target_max": OVERHEAD_TARGET,
        "meets_target": overhead <= OVERHEAD_TARGET,
        "repeats": len(single),
        "samples_ms": {"http": samples_ms(single), "llama_cpp_prefill": samples_ms(prefill)},
    }


# --- (b) ------------------------------------------------------------------------------------
def shared_state(
    caller: Caller, url: str, plan: Plan, budget: Budget, state: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Returns the sweep and, for n = 8, the must-show summary under its established keys.

    Separate requests run one after another, so n of them take the sum of their latencies:
    each repetition sends every question once alone and sums the first n for each n."""
    largest = max(plan.shared_sizes)
    decisions = [decision(state, question, i) for i, question in enumerate(QUESTIONS[:largest])]
    _, answer = caller.post(url, {"decisions": decisions[:1]})  # warm-up
    shared: dict[int, list[float]] = {n: [] for n in plan.shared_sizes}
    separate: dict[int, list[float]] = {n: [] for n in plan.shared_sizes}
    repeats = max(plan.shared_repeats, plan.separate_repeats)
    done = 0
    while done < repeats and budget.more(SHARES["shared"], done):
        for n in plan.shared_sizes:
            if done < plan.shared_repeats:
                shared[n].append(caller.seconds(url, {"decisions": decisions[:n]}))
        if done < plan.separate_repeats:
            alone = [caller.seconds(url, {"decision": d}) for d in decisions]
            for n in plan.shared_sizes:
                separate[n].append(sum(alone[:n]))
        done += 1
    rows = []
    for n in plan.shared_sizes:
        shared_s, separate_s = statistics.median(shared[n]), statistics.median(separate[n])
        rows.append(
            {
                "questions": n,
                "shared_median_ms": ms(shared_s),
                "separate_median_ms": ms(separate_s),
                "speedup": round(separate_s / shared_s, 2),
                "shared_ms_per_question": ms(shared_s / n),
                "shared_samples_ms": samples_ms(shared[n]),
                "separate_samples_ms": samples_ms(separate[n]),
            }
        )
    state_tokens = answer["timing"]["prefix_tokens"]
    sweep = {
        "state_tokens": state_tokens,
        "shared_repeats": len(shared[plan.shared_sizes[0]]),
        "separate_repeats": len(separate[plan.shared_sizes[0]]),
        "rows": rows,
    }
    eight = next((r for r in rows if r["questions"] == SHARING_DECISIONS), rows[-1])
    summary = {
        "state_tokens": state_tokens,
        "decisions": eight["questions"],
        "shared_request_median_ms": eight["shared_median_ms"],
        "eight_single_requests_median_ms": eight["separate_median_ms"],
        "speedup": eight["speedup"],
        "target_min": SHARING_TARGET,
        "meets_target": eight["speedup"] >= SHARING_TARGET,
    }
    return sweep, summary


def separate_with_state_cache(
    caller: Caller, url: str, plan: Plan, budget: Budget, state: str, sweep: dict[str, Any]
) -> dict[str, Any]:
    """(b) again with the adapter's state cache on (its default): separate requests on one state
    now prefill it once and restore it for the others. Each repetition uses a new state (a
    suffix marks it), so its first request misses the cache as a first request would."""
    largest = max(plan.shared_sizes)
    separate: dict[int, list[float]] = {n: [] for n in plan.shared_sizes}
    hits = 0
    done = 0
    while done < plan.separate_repeats and budget.more(SHARES["cached"], done):
        fresh = f"{state}(Repetition {done}.)"
        alone = []
        for i, question in enumerate(QUESTIONS[:largest]):
            seconds, answer = caller.post(url, {"decision": decision(fresh, question, i)})
            alone.append(seconds)
            hits += answer["result"]["timing"].get("state_cache") == "hit"
        for n in plan.shared_sizes:
            separate[n].append(sum(alone[:n]))
        done += 1
    rows = []
    for row in sweep["rows"]:
        n = row["questions"]
        cached_s = statistics.median(separate[n])
        rows.append(
            {
                "questions": n,
                "separate_cached_median_ms": ms(cached_s),
                "speedup_of_shared": round(cached_s * 1000 / row["shared_median_ms"], 2),
                "separate_cached_samples_ms": samples_ms(separate[n]),
            }
        )
    return {"repeats": done, "cache_hits": hits, "requests": done * largest, "rows": rows}


# --- (c) ------------------------------------------------------------------------------------
def prompt_length(
    caller: Caller,
    url: str,
    plan: Plan,
    budget: Budget,
    cases: list[tuple[int, str, list[int]]],
    floor: Floor,
) -> dict[str, Any]:
    """Each length over HTTP and then on the floor, in turns (see single_decision)."""
    from bench.workloads import LENGTH_OPTIONS, LENGTH_QUESTION

    bodies = {
        target: {"decision": decision(state, LENGTH_QUESTION, options=LENGTH_OPTIONS)}
        for target, state, _ in cases
    }
    caller.seconds(url, bodies[cases[0][0]])  # warm-up
    floor.prefill(cases[0][2])
    http: dict[int, list[float]] = {target: [] for target, _, _ in cases}
    prefill: dict[int, list[float]] = {target: [] for target, _, _ in cases}
    done = 0
    while done < plan.length_repeats and budget.more(SHARES["length"], done):
        for target, _, tokens in cases:
            http[target].append(caller.seconds(url, bodies[target]))
            prefill[target].append(floor.prefill(tokens))
        done += 1
    rows = []
    for target, _, tokens in cases:
        h, f = http[target], prefill[target]
        rows.append(
            {
                "target_tokens": target,
                "prompt_tokens": len(tokens),
                "http_median_ms": median_ms(h),
                "http_min_ms": ms(min(h)),
                "http_max_ms": ms(max(h)),
                "llama_cpp_prefill_median_ms": median_ms(f),
                "overhead_ratio": round(statistics.median(h) / statistics.median(f), 3),
                "http_samples_ms": samples_ms(h),
                "llama_cpp_prefill_samples_ms": samples_ms(f),
            }
        )
    return {
        "question": LENGTH_QUESTION,
        "options": [o["id"] for o in LENGTH_OPTIONS],
        "repeats": done,
        "rows": rows,
    }


# --- (d) ------------------------------------------------------------------------------------
def run_label(max_queue: int, max_scoring_requests: int = 1) -> str:
    """A (d) run's settings as its charts and report name it."""
    queue = f"DECISION_MAX_QUEUE={max_queue}"
    if max_scoring_requests == 1:
        return queue
    return f"DECISION_MAX_SCORING_REQUESTS={max_scoring_requests}, {queue}"


def concurrency_run(
    url: str,
    plan: Plan,
    seconds: float,
    max_queue: int,
    admission_wait_s: float,
    max_scoring_requests: int = 1,
) -> dict[str, Any]:
    body = load_decision()
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        caller = Caller(client)
        for _ in range(3):
            caller.seconds(url, body)  # a fresh adapter: warm it before the first level
    rows = [run_load(url, body, clients, seconds).as_dict() for clients in plan.clients]
    return {
        "label": run_label(max_queue, max_scoring_requests),
        "max_queue": max_queue,
        "max_scoring_requests": max_scoring_requests,
        "admission_wait_s": admission_wait_s,
        "seconds_per_level": seconds,
        "rows": rows,
    }


# --- (e) ------------------------------------------------------------------------------------
def chat_alternative(
    caller: Caller, base_url: str, plan: Plan, budget: Budget, examples: list[dict[str, Any]]
) -> dict[str, Any]:
    """Each labelled example twice: as a decision, and as a chat completion of one token at
    temperature 0 whose user message is the decision prompt's text."""
    items = examples[: plan.chat_items] if plan.chat_items else examples
    decision_s, chat_s = [], []
    decision_hits, chat_hits, valid, agree = 0, 0, 0, 0
    answers: Counter[str] = Counter()
    content, _ = chat_prompt(items[0])
    caller.post(
        base_url + "/v1/chat/completions",  # warm-up
        {"messages": [{"role": "user", "content": content}], "max_tokens": 1},
    )
    done = 0
    for item in items:
        if not budget.more(SHARES["chat"], done, minimum=min(10, len(items))):
            break
        body = {"decision": {k: item[k] for k in ("id", "state", "question", "options")}}
        seconds, answer = caller.post(base_url + "/invocations", body)
        result = answer["result"]
        decision_s.append(seconds)
        predicted = max(zip(result["probabilities"], result["option_ids"], strict=False))[1]
        decision_hits += predicted == item["expected"]

        content, labels = chat_prompt(item)
        chat_body = {
            "messages": [{"role": "user", "content": content}],
            "max_tokens": 1,
            "temperature": 0,
        }
        seconds, reply = caller.post(base_url + "/v1/chat/completions", chat_body)
        chat_s.append(seconds)
        text = reply["choices"][0]["message"]["content"]
        answers[text] += 1
        letter = parse_letter(text, labels)
        if letter is not None:
            valid += 1
            chosen = item["options"][labels.index(letter)]["id"]
            chat_hits += chosen == item["expected"]
            agree += chosen == predicted
        done += 1
    return {
        "items": done,
        "chat_request": {
            "max_tokens": 1,
            "temperature": 0,
            "message": "the decision prompt's text as one user message",
        },
        "decision": {
            "accuracy": decision_hits / done,
            "valid_answer_rate": 1.0,
            "latency": metrics.latency_summary(decision_s),
        },
        "chat": {
            "accuracy": chat_hits / done,
            "valid_answer_rate": valid / done,
            "agreement_with_decision": agree / done,
            "latency": metrics.latency_summary(chat_s),
            "answers": dict(answers.most_common(8)),
        },
    }


# --- the state cache: follow-up requests about one state ----------------------------------
FOLLOW_UPS = 8
CACHE_TARGET = 0.2


def state_cache_follow_ups(
    caller: Caller, base_url: str, state: str, repeats: int, label: str
) -> dict[str, Any]:
    """Eight separate, consecutive requests with different questions about one ~1,000-token
    state, each repetition on a new state so the first request starts cold. Per position: the
    median latency, and for positions 2-8 its ratio to the first (target <= 0.2 with the cache).
    """
    by_position: list[list[float]] = [[] for _ in range(FOLLOW_UPS)]
    outcomes: Counter[str] = Counter()
    for repetition in range(repeats):
        fresh = f"{state}(Conversation {label}-{repetition}.)"
        for position, question in enumerate(QUESTIONS[:FOLLOW_UPS]):
            seconds, answer = caller.post(
                base_url + "/invocations", {"decision": decision(fresh, question, position)}
            )
            by_position[position].append(seconds)
            outcomes[answer["result"]["timing"].get("state_cache", "off")] += 1
    first = statistics.median(by_position[0])
    ratios = [round(statistics.median(samples) / first, 3) for samples in by_position[1:]]
    stats = caller.client.get(base_url + "/stats", timeout=30).json()["state_cache"]
    return {
        "repeats": repeats,
        "median_ms_by_position": [median_ms(samples) for samples in by_position],
        "ratio_to_first": ratios,
        "worst_ratio": max(ratios),
        "state_cache_outcomes": dict(outcomes),
        "cache_bytes": stats["size_bytes"],
        "cache_budget_bytes": stats["budget_bytes"],
        "within_budget": stats["size_bytes"] <= stats["budget_bytes"],
    }


# --- readouts -------------------------------------------------------------------------------
READOUTS = ("letters", "option_text", "option_text_desc", "calibrated", "permuted_letters")
READOUT_COST_TARGET = 2.0  # the default readout costs at most 2x letters (readout_choice)
SIX_OPTIONS = [
    {"id": "account_access", "description": "Login, password and account access problems."},
    {"id": "billing", "description": "Invoices, refunds and payment problems."},
    {"id": "shipping", "description": "Delivery and tracking problems."},
    {"id": "technical_support", "description": "Crashes, errors and bugs in the product."},
    {"id": "sales", "description": "Plans, upgrades and quotes."},
    {"id": "privacy", "description": "Personal data, deletion and consent requests."},
]
CHOICE = Path(__file__).parent / "results" / "readout-choice" / "choose_readout.json"


def readout_cost(caller: Caller, url: str, repeats: int) -> dict[str, Any]:
    """The same 6-option request read by each strategy, taking turns request by request; the
    first `calibrated` request also pays its content-free pass (cold), later ones not (warm).
    The default and each strategy's accuracy come from the last `python -m evaluation
    --choose-readout` run (its winner; `calibrated`, the study's choice, without one)."""
    choice = json.loads(CHOICE.read_text()) if CHOICE.is_file() else {}
    default = choice.get("winner", "calibrated")
    asked = decision(SHORT_STATE, QUESTIONS[0], options=SIX_OPTIONS)

    def send(readout: str) -> tuple[float, dict]:
        return caller.post(url, {"decision": {**asked, "readout": readout}})

    cold = {name: send(name)[0] for name in READOUTS}
    samples: dict[str, list[float]] = {name: [] for name in READOUTS}
    tokens: dict[str, int] = {}
    for _ in range(repeats):
        for name in READOUTS:
            seconds, reply = send(name)
            samples[name].append(seconds)
            tokens[name] = _request_tokens(reply)
    letters = statistics.median(samples["letters"])
    reports = choice.get("strategies", {})
    accuracy = {name: report["accuracy"] for name, report in reports.items()}
    ratio = statistics.median(samples[default]) / letters
    return {
        "options": len(SIX_OPTIONS),
        "default": default,
        "median_ms": {name: median_ms(values) for name, values in samples.items()},
        "cold_ms": {name: ms(value) for name, value in cold.items()},
        "ratio_to_letters": {
            name: round(statistics.median(values) / letters, 3) for name, values in samples.items()
        },
        "request_tokens": tokens,
        "dev_accuracy": accuracy,
        "accuracy_source": str(CHOICE.relative_to(Path(__file__).parent.parent)),
        "target_max_ratio": READOUT_COST_TARGET,
        "meets_target": ratio <= READOUT_COST_TARGET,
        "repeats": repeats,
    }


def _request_tokens(reply: Any) -> int:
    try:
        return int(reply["result"]["timing"]["request_tokens"])
    except (KeyError, TypeError, ValueError):
        return 0
