"""The adapter side by side with llama-server (the stock DLC's server): same model, same
machine, same prompt tokens, one run, the two taking turns request by request.

(a) one decision vs llama-server's one-token completion with `n_probs` (the closest it gets to
    option probabilities); prompt cache off on both sides, so both prefill the whole prompt;
(b) 8 questions on one ~1,000-token state: our one `decisions` request (state cache off) and 8
    separate requests with our state cache on, vs 8 sequential llama-server requests with its
    prompt cache on (it reuses the slot's cached prefix: the fair comparison, not cold ones);
chat: generation tokens/s and time to first token, streamed and not;
options: the share of llama-server's top-N probability mass that falls on the declared options'
    label tokens, and how often its top token is no option at all (labelled examples).

Ratios are adapter / llama-server of the quantity measured (times: below 1 is faster for us;
tokens/s: above 1 is faster for us).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.llama_server import completion_body
from bench.timing import Caller, median_ms, samples_ms
from bench.workloads import (
    LONG_CHAT_MESSAGE,
    OPTIONS,
    QUESTIONS,
    SHORT_STATE,
    STORY_CHAT_MESSAGE,
    chat_tokens,
    decision,
    decision_prompt,
)

N_PROBS = 20
SINGLE_TARGET = 1.03  # (a): adapter decision / llama-server one-token completion, at most
CACHED_TARGET = 1.0  # (b): adapter cached follow-up / llama-server cached prefix, at most
GENERATION_TARGET = 0.9  # chat: adapter tokens/s / llama-server tokens/s, at least
QUESTIONS_ON_STATE = 8
CHAT_STOPS = ["\nUser:"]  # the adapter's own stop for a GGUF without a chat template
# What most OpenAI clients send: top_p and nothing else; each side's defaults do the rest. The
# seed is one whose story runs the whole max_tokens on the bundled model (most end sooner).
SAMPLED_CHAT = {"top_p": 0.9, "seed": 6}


@dataclass(frozen=True)
class Asked:
    """One decision as both sides get it: the adapter's decision object, the tokens the adapter
    decodes for it (sent to llama-server as they are), and each option label's token."""

    decision: dict[str, Any]
    tokens: list[int]
    label_tokens: list[int]
    expected: str | None = None


@dataclass(frozen=True)
class Workload:
    single: Asked
    shared_rounds: list[list[Asked]]  # (b) with our state cache off, a new state per round
    cached_rounds: list[list[Asked]]  # (b) with our state cache on, a new state per round
    chat_messages: list[dict[str, str]]
    chat_tokens: list[int]
    story_messages: list[dict[str, str]]  # the sampled chat's
    story_tokens: list[int]
    labelled: list[Asked]


def asked(renderer, item: dict[str, Any], index: int = 0) -> Asked:
    tokens, labels = decision_prompt(renderer, item["state"], item["question"], item["options"])
    if any(len(label) != 1 for label in labels):
        raise ValueError(f"{item.get('id')}: a label of several tokens has no n_probs reading")
    body = {k: item[k] for k in ("state", "question", "options")}
    return Asked(
        {"id": item.get("id", f"d{index}"), **body},
        tokens,
        [label[0] for label in labels],
        item.get("expected"),
    )


def prepare(renderer, state: str, rounds: int, examples: list[dict[str, Any]]) -> Workload:
    """Tokens rendered by the adapter's own renderer. A round's state starts with its own mark:
    llama-server reuses any common token prefix, so a mark at the end would let round 2 reuse
    round 1's state and no first request would start cold."""

    def round_of(label: str, number: int) -> list[Asked]:
        fresh = f"({label} round {number}.) {state}"
        return [
            asked(renderer, decision(fresh, question, i), i)
            for i, question in enumerate(QUESTIONS[:QUESTIONS_ON_STATE])
        ]

    messages = [{"role": "user", "content": LONG_CHAT_MESSAGE}]
    story = [{"role": "user", "content": STORY_CHAT_MESSAGE}]
    return Workload(
        single=asked(renderer, decision(SHORT_STATE, QUESTIONS[0], options=OPTIONS)),
        shared_rounds=[round_of("Shared", r) for r in range(rounds)],
        cached_rounds=[round_of("Cached", r) for r in range(rounds)],
        chat_messages=messages,
        chat_tokens=chat_tokens(renderer, messages),
        story_messages=story,
        story_tokens=chat_tokens(renderer, story),
        labelled=[asked(renderer, item, i) for i, item in enumerate(examples)],
    )


# --- pure readings of llama-server's answers --------------------------------------------------
def top_probabilities(completion: dict[str, Any]) -> list[tuple[int, float]]:
    """(token id, probability) of the top n_probs tokens of a one-token /completion, best first:
    `top_logprobs` (full-vocabulary softmax before sampling, llama-server's default) or
    `top_probs` (post_sampling_probs)."""
    (first,) = completion["completion_probabilities"][:1]
    if "top_probs" in first:
        pairs = [(entry["id"], float(entry["prob"])) for entry in first["top_probs"]]
    else:
        pairs = [(entry["id"], math.exp(entry["logprob"])) for entry in first["top_logprobs"]]
    return sorted(pairs, key=lambda pair: pair[1], reverse=True)


def top_token_text(completion: dict[str, Any]) -> str:
    first = completion["completion_probabilities"][0]
    top = first.get("top_probs") or first.get("top_logprobs") or [{"token": ""}]
    return top[0]["token"]


def option_mass(top: Sequence[tuple[int, float]], label_tokens: Sequence[int]) -> dict[str, Any]:
    """How much of the top-N mass falls on the options' label tokens. An option outside the top
    N counts 0, so `option_mass` is a lower bound of the full-vocabulary mass on the options."""
    probability = dict(top)
    on_options = [probability.get(token, 0.0) for token in label_tokens]
    top_mass = sum(probability.values())
    mass = sum(on_options)
    return {
        "top_n": len(probability),
        "top_n_mass": top_mass,
        "option_mass": mass,
        "option_share": mass / top_mass if top_mass > 0 else 0.0,
        "top_token_is_option": bool(top) and top[0][0] in label_tokens,
        "chosen_option": on_options.index(max(on_options)) if mass > 0 else None,
    }


def ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 3) if theirs > 0 else None


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


# --- the adapter's and llama-server's own timings ---------------------------------------------
def _adapter_phases(e2e_s: float, timing: dict[str, Any]) -> dict[str, float]:
    model = timing["prefill_ms"] + timing["branches_ms"]
    return {
        "model_ms": model,
        "prepare_ms": timing["prepare_ms"],
        "admission_wait_ms": timing["admission_wait_ms"],
        "handler_other_ms": timing["total_ms"] - model - timing["prepare_ms"],
        "outside_handler_ms": e2e_s * 1000 - timing["total_ms"],
    }


def _server_phases(e2e_s: float, answer: dict[str, Any]) -> dict[str, float]:
    timings = answer["timings"]
    return {
        "prompt_ms": timings["prompt_ms"],
        "predicted_ms": timings["predicted_ms"],
        "outside_model_ms": e2e_s * 1000 - timings["prompt_ms"] - timings["predicted_ms"],
    }


def _median_phases(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(_median([row[key] for row in rows]), 2) for key in rows[0]} if rows else {}


class Sides:
    """The two servers and one sequential client; every call is timed end to end."""

    def __init__(self, caller: Caller, adapter_url: str, server_url: str) -> None:
        self.caller, self.adapter_url, self.server_url = caller, adapter_url, server_url

    def decide(self, decisions: list[dict[str, Any]]) -> tuple[float, dict[str, Any]]:
        body = {"decision": decisions[0]} if len(decisions) == 1 else {"decisions": decisions}
        return self.caller.post(self.adapter_url + "/invocations", body)

    def complete(self, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        return self.caller.post(self.server_url + "/completion", body)

    def one_token(self, item: Asked, *, cache_prompt: bool) -> tuple[float, dict[str, Any]]:
        return self.complete(
            completion_body(item.tokens, n_probs=N_PROBS, cache_prompt=cache_prompt)
        )


# --- (a) ------------------------------------------------------------------------------------
def single_decision(sides: Sides, item: Asked, repeats: int) -> dict[str, Any]:
    for _ in range(3):  # warm-up
        sides.decide([item.decision])
        sides.one_token(item, cache_prompt=False)
    ours, theirs, our_phases, their_phases = [], [], [], []
    counts = {"bench": len(item.tokens), "adapter": set(), "llama_server": set(), "cached": set()}
    for _ in range(repeats):
        seconds, answer = sides.one_token(item, cache_prompt=False)
        theirs.append(seconds)
        their_phases.append(_server_phases(seconds, answer))
        counts["llama_server"].add(answer["timings"]["prompt_n"])
        counts["cached"].add(answer["timings"]["cache_n"])
        seconds, answer = sides.decide([item.decision])
        ours.append(seconds)
        our_phases.append(_adapter_phases(seconds, answer["result"]["timing"]))
        counts["adapter"].add(answer["result"]["input_tokens"])
    measured = ratio(_median(ours), _median(theirs))
    return {
        "prompt_tokens": len(item.tokens),
        "n_probs": N_PROBS,
        "tokens": _token_check(counts),
        "adapter_median_ms": median_ms(ours),
        "llama_server_median_ms": median_ms(theirs),
        "ratio": measured,
        "paired_ratio_median": round(
            _median([o / t for o, t in zip(ours, theirs, strict=False)]), 3
        ),
        "target_max": SINGLE_TARGET,
        "meets_target": measured is not None and measured <= SINGLE_TARGET,
        "phases_median_ms": {
            "adapter": _median_phases(our_phases),
            "llama_server": _median_phases(their_phases),
        },
        "repeats": repeats,
        "samples_ms": {"adapter": samples_ms(ours), "llama_server": samples_ms(theirs)},
    }


def _token_check(counts: dict[str, Any]) -> dict[str, Any]:
    """Both sides decoded exactly the bench's tokens, and llama-server reused none."""
    seen = {
        key: sorted(value) if isinstance(value, set) else value for key, value in counts.items()
    }
    same = seen["adapter"] == seen["llama_server"] == [counts["bench"]] and seen["cached"] == [0]
    return {**seen, "same": same}


# --- (b) ------------------------------------------------------------------------------------
def _server_read_all(reply: dict[str, Any], item: Asked) -> bool:
    """llama-server's prompt was our tokens: those it reused plus those it decoded."""
    timings = reply["timings"]
    return timings["cache_n"] + timings["prompt_n"] == len(item.tokens)


def eight_shared(sides: Sides, rounds: list[list[Asked]]) -> dict[str, Any]:
    """Per round: our one `decisions` request, then llama-server's 8 sequential requests."""
    sides.decide([rounds[0][0].decision])  # warm-up
    ours, theirs = [], []
    reused: list[int] = []
    matched = True
    for questions in rounds:
        seconds, answer = sides.decide([item.decision for item in questions])
        ours.append(seconds)
        matched &= [r["input_tokens"] for r in answer["results"]] == [
            len(item.tokens) for item in questions
        ]
        total = 0.0
        for position, item in enumerate(questions):
            seconds, reply = sides.one_token(item, cache_prompt=True)
            total += seconds
            matched &= _server_read_all(reply, item)
            if position:
                reused.append(reply["timings"]["cache_n"])
        theirs.append(total)
    return {
        "questions": len(rounds[0]),
        "state_prompt_tokens": len(rounds[0][0].tokens),
        "adapter_one_request_median_ms": median_ms(ours),
        "llama_server_eight_requests_median_ms": median_ms(theirs),
        "ratio": ratio(_median(ours), _median(theirs)),
        "llama_server_reused_tokens_median": _median(reused),
        "same_tokens": matched,
        "rounds": len(rounds),
        "samples_ms": {"adapter": samples_ms(ours), "llama_server": samples_ms(theirs)},
    }


def eight_cached(sides: Sides, rounds: list[list[Asked]]) -> dict[str, Any]:
    """Per round, question by question: our separate request (state cache on), then
    llama-server's with its prompt cache on; both start the round cold."""
    width = len(rounds[0])
    ours: list[list[float]] = [[] for _ in range(width)]
    theirs: list[list[float]] = [[] for _ in range(width)]
    our_phases, their_phases = [], []
    outcomes: dict[str, int] = {}
    reused: list[int] = []
    matched = True
    for questions in rounds:
        for position, item in enumerate(questions):
            seconds, answer = sides.decide([item.decision])
            ours[position].append(seconds)
            timing = answer["result"]["timing"]
            outcomes[timing["state_cache"]] = outcomes.get(timing["state_cache"], 0) + 1
            seconds_theirs, reply = sides.one_token(item, cache_prompt=True)
            theirs[position].append(seconds_theirs)
            matched &= answer["result"]["input_tokens"] == len(item.tokens)
            matched &= _server_read_all(reply, item)
            if position:
                our_phases.append(_adapter_phases(seconds, timing))
                their_phases.append(_server_phases(seconds_theirs, reply))
                reused.append(reply["timings"]["cache_n"])
    follow_ours = [s for samples in ours[1:] for s in samples]
    follow_theirs = [s for samples in theirs[1:] for s in samples]
    totals_ours = [sum(samples[r] for samples in ours) for r in range(len(rounds))]
    totals_theirs = [sum(samples[r] for samples in theirs) for r in range(len(rounds))]
    measured = ratio(_median(follow_ours), _median(follow_theirs))
    return {
        "questions": width,
        "state_prompt_tokens": len(rounds[0][0].tokens),
        "adapter_state_cache": outcomes,
        "llama_server_reused_tokens_median": _median(reused),
        "same_tokens": matched,
        "first_median_ms": {"adapter": median_ms(ours[0]), "llama_server": median_ms(theirs[0])},
        "follow_up_median_ms": {
            "adapter": median_ms(follow_ours),
            "llama_server": median_ms(follow_theirs),
        },
        "follow_up_ratio": measured,
        "eight_total_median_ms": {
            "adapter": median_ms(totals_ours),
            "llama_server": median_ms(totals_theirs),
        },
        "eight_total_ratio": ratio(_median(totals_ours), _median(totals_theirs)),
        "target_max": CACHED_TARGET,
        "meets_target": measured is not None and measured <= CACHED_TARGET,
        "follow_up_phases_median_ms": {
            "adapter": _median_phases(our_phases),
            "llama_server": _median_phases(their_phases),
        },
        "rounds": len(rounds),
        "median_ms_by_position": {
            "adapter": [median_ms(samples) for samples in ours],
            "llama_server": [median_ms(samples) for samples in theirs],
        },
    }


# --- chat -----------------------------------------------------------------------------------
def _adapter_text(event: dict[str, Any]) -> bool:
    choices = event.get("choices") or [{}]
    return bool((choices[0].get("delta") or {}).get("content"))


def _server_text(event: dict[str, Any]) -> bool:
    return bool(event.get("content"))


def chat(
    sides: Sides,
    messages: list[dict[str, str]],
    tokens: list[int],
    max_tokens: int,
    repeats: int,
    sampling: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The same prompt tokens generated on both sides: our /v1/chat/completions, and
    llama-server's /completion over the tokens our chat renders (its chat endpoint would
    template differently: this base model's GGUF has no chat template). Greedily, or with the
    same `sampling` fields on both, each side's defaults for the fields left out."""
    theirs_body = completion_body(tokens, n_predict=max_tokens, cache_prompt=False, stop=CHAT_STOPS)
    ours_body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0}
    if sampling is not None:
        del ours_body["temperature"], theirs_body["temperature"]
        ours_body |= sampling
        theirs_body |= sampling
    chat_url = sides.adapter_url + "/v1/chat/completions"
    server_url = sides.server_url + "/completion"
    sides.caller.post(chat_url, {**ours_body, "max_tokens": 4})  # warm-up
    sides.complete({**theirs_body, "n_predict": 4})
    whole: dict[str, list[tuple[float, int]]] = {"adapter": [], "llama_server": []}
    streamed: dict[str, list[tuple[float, float, int]]] = {"adapter": [], "llama_server": []}
    server_rate: list[float] = []
    prompt_tokens: set[int] = set()
    for _ in range(repeats):
        seconds, reply = sides.caller.post(chat_url, ours_body)
        whole["adapter"].append((seconds, reply["usage"]["completion_tokens"]))
        prompt_tokens.add(reply["usage"]["prompt_tokens"])
        seconds, answer = sides.complete(theirs_body)
        whole["llama_server"].append((seconds, answer["timings"]["predicted_n"]))
        server_rate.append(answer["timings"]["predicted_per_second"])
        prompt_tokens.add(answer["timings"]["prompt_n"])

        run = sides.caller.stream(chat_url, {**ours_body, "stream": True}, _adapter_text)
        produced = run.events[-1]["usage"]["completion_tokens"]
        streamed["adapter"].append((run.first_s, run.generation_rate(produced), produced))
        run = sides.caller.stream(server_url, {**theirs_body, "stream": True}, _server_text)
        produced = run.events[-1]["timings"]["predicted_n"]
        streamed["llama_server"].append((run.first_s, run.generation_rate(produced), produced))

    def side(name: str) -> dict[str, Any]:
        totals = [s for s, _ in whole[name]]
        return {
            "completion_tokens": sorted(
                {n for _, n in whole[name]} | {n for *_, n in streamed[name]}
            ),
            "whole_median_ms": median_ms(totals),
            "whole_tokens_per_s": round(_median([n / s for s, n in whole[name]]), 1),
            "streamed_first_token_median_ms": median_ms([f for f, _, _ in streamed[name]]),
            "streamed_generation_tokens_per_s": round(
                _median([r for _, r, _ in streamed[name]]), 1
            ),
        }

    ours, theirs = side("adapter"), side("llama_server")
    generation = ratio(
        ours["streamed_generation_tokens_per_s"], theirs["streamed_generation_tokens_per_s"]
    )
    return {
        "prompt_tokens": sorted(prompt_tokens),
        "same_prompt_tokens": prompt_tokens == {len(tokens)},
        "sampling": sampling or {"temperature": 0},
        "max_tokens": max_tokens,
        "repeats": repeats,
        "adapter": ours,
        "llama_server": theirs | {"own_generation_tokens_per_s": round(_median(server_rate), 1)},
        "ratios": {
            "streamed_generation_tokens_per_s": generation,
            "streamed_first_token": ratio(
                ours["streamed_first_token_median_ms"], theirs["streamed_first_token_median_ms"]
            ),
            "whole_latency": ratio(ours["whole_median_ms"], theirs["whole_median_ms"]),
        },
        "target_min_generation": GENERATION_TARGET,
        "meets_target": generation is not None and generation >= GENERATION_TARGET,
    }


# --- the options in llama-server's answers -----------------------------------------------------
def option_answers(sides: Sides, items: list[Asked]) -> dict[str, Any]:
    """Each labelled decision on both sides: our probabilities over the options, and
    llama-server's top-N tokens read for the options' label tokens."""
    rows = []
    ours, theirs = [], []
    for item in items:
        seconds, answer = sides.decide([item.decision])
        ours.append(seconds)
        result = answer["result"]
        ours_chosen = result["option_ids"][
            result["probabilities"].index(max(result["probabilities"]))
        ]
        seconds, reply = sides.one_token(item, cache_prompt=False)
        theirs.append(seconds)
        mass = option_mass(top_probabilities(reply), item.label_tokens)
        option_ids = [option["id"] for option in item.decision["options"]]
        chosen = mass["chosen_option"]
        rows.append(
            {
                "id": item.decision["id"],
                "tokens": {
                    "bench": len(item.tokens),
                    "adapter": result["input_tokens"],
                    "llama_server": reply["timings"]["prompt_n"],
                },
                "adapter_allowed_token_mass": round(result["allowed_token_mass"], 4),
                "llama_server_option_mass": round(mass["option_mass"], 4),
                "llama_server_top_n_mass": round(mass["top_n_mass"], 4),
                "llama_server_option_share": round(mass["option_share"], 4),
                "llama_server_top_token": top_token_text(reply),
                "llama_server_top_token_is_option": mass["top_token_is_option"],
                "adapter_choice": ours_chosen,
                "llama_server_choice": option_ids[chosen] if chosen is not None else None,
                "expected": item.expected,
            }
        )
    return summarize_options(rows) | {
        "n_probs": N_PROBS,
        "latency_median_ms": {"adapter": median_ms(ours), "llama_server": median_ms(theirs)},
        "rows": rows,
    }


def summarize_options(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The share of the top-N mass on the options and how often the top token is none."""
    count = len(rows)
    shares = [row["llama_server_option_share"] for row in rows]
    off = sum(not row["llama_server_top_token_is_option"] for row in rows)
    gaps = [
        abs(row["adapter_allowed_token_mass"] - row["llama_server_option_mass"]) for row in rows
    ]
    labelled = [row for row in rows if row["expected"] is not None]

    def accuracy(key: str) -> float | None:
        if not labelled:
            return None
        return round(sum(row[key] == row["expected"] for row in labelled) / len(labelled), 3)

    return {
        "items": count,
        "same_tokens": all(len(set(row["tokens"].values())) == 1 for row in rows),
        "option_share_median": round(_median(shares), 4),
        "option_share_mean": round(sum(shares) / count, 4) if count else 0.0,
        "option_share_min": round(min(shares), 4) if shares else 0.0,
        "top_token_not_an_option": off,
        "top_token_not_an_option_rate": round(off / count, 3) if count else 0.0,
        "mass_gap_to_adapter_median": round(_median(gaps), 4),
        "accuracy": {
            "adapter": accuracy("adapter_choice"),
            "llama_server": accuracy("llama_server_choice"),
        },
        "agreement": round(
            sum(row["adapter_choice"] == row["llama_server_choice"] for row in rows) / count, 3
        )
        if count
        else 0.0,
    }


def compare(
    sides: Sides,
    workload: Workload,
    *,
    single_repeats: int,
    chat_repeats: int,
    chat_max_tokens: int,
) -> dict[str, Any]:
    """Everything that runs against the adapter with its state cache off."""
    return {
        "single_decision": single_decision(sides, workload.single, single_repeats),
        "eight_questions_shared": eight_shared(sides, workload.shared_rounds),
        "chat": chat(
            sides, workload.chat_messages, workload.chat_tokens, chat_max_tokens, chat_repeats
        ),
        "chat_top_p": chat(
            sides,
            workload.story_messages,
            workload.story_tokens,
            chat_max_tokens,
            chat_repeats,
            SAMPLED_CHAT,
        ),
        "options": option_answers(sides, workload.labelled),
    }
