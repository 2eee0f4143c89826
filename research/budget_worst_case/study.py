"""`python -m research.budget_worst_case`: the heaviest request the budget admits, per readout.

For each readout, the request shaped to cost the most time per budget token (a long state for
`letters`; one long option, whose every token reads a vocabulary row, for the option-text
readouts; long listings for `permuted_letters`), grown word by word to the largest the default
`DECISION_MAX_REQUEST_TOKENS` admits (found on the adapter's own plan, in process), is sent to a
fresh adapter with the benchmark's settings; one word more is sent too and must be refused at
once. One more shape, 4 questions of 255 options on a long state (`many_paths`), is the one
batched decisions make heaviest: with `--scoring-requests N` above 1 the adapter batches them,
and its budget also charges what the rounds decode and restore beyond the tokens
(`sharing_work`), which the search charges too. Writes
results/<date>-<machine>-budget[-batched].json here, or --output: each shape's seconds, tokens
and status, and the refusal's seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench.__main__ import ADAPTER_ENV
from bench.timing import REQUEST_TIMEOUT_S
from bench.workloads import THREADS, machine_name
from launcher import running_adapter
from tests.support.bodies import decision

RESULTS = Path(__file__).resolve().parent / "results"  # the study's committed results

LIMIT = 8192  # DECISION_MAX_REQUEST_TOKENS's default
WORD = "ab "  # one token on Gemma 3


def _long_option(readout: str) -> Callable[[int], dict]:
    return lambda n: decision("s", "Is it?", (WORD * n + "x", "no"), readout=readout)


def _long_description(n: int) -> dict:
    body = decision("s", "Is it?", ("yes", "no"), readout="option_text_desc")
    body["decision"]["options"][0]["description"] = WORD * n
    return body


def _long_candidate_description(readout: str) -> Callable[[int], dict]:
    def shape(n: int) -> dict:
        body = decision("s", "Is it?", ("yes", "no"), readout=readout)
        body["decision"]["options"][0]["description"] = WORD * n
        return body

    return shape


def _many_paths(n: int) -> dict:
    """4 questions of 255 options on a state of n words: batched, each option path restores
    the state and its question, and is padded to 8 rows (issue 69's 32 such questions are
    over the budget batched, on any state)."""
    options = [{"id": f"o{i}"} for i in range(255)]
    state = WORD * n + "x"
    return {
        "decisions": [
            {"id": f"q{q}", "state": state, "question": f"Which one, {q}?", "options": options,
             "readout": "option_text"}
            for q in range(4)
        ]
    }  # fmt: skip


def _long_listing(n: int) -> dict:
    body = decision("s", "Which one?", [f"o{i}" for i in range(8)], readout="permuted_letters")
    for option in body["decision"]["options"]:
        option["description"] = WORD * n
    return body


SHAPES: dict[str, Callable[[int], dict]] = {
    "letters": lambda n: decision(WORD * n, "Is it?", ("yes", "no"), readout="letters"),
    "option_text": _long_option("option_text"),
    "option_text_desc": _long_description,
    "calibrated": _long_option("calibrated"),
    "permuted_letters": _long_listing,
    "json_choice": _long_candidate_description("json_choice"),
    "json_choice_sum": _long_candidate_description("json_choice_sum"),
    "many_paths": _many_paths,
}


def cost(renderer, body: dict, *, batched: bool = False) -> int:
    """The tokens the adapter's budget charges a body's decisions (all about one state), by its
    own plan; TokenLimitExceeded past LIMIT. `batched`: the restores too, as batched mode does."""
    from decision_adapter.formats.decision import DecisionRequest
    from decision_adapter.scoring.budget import TokenBudget
    from decision_adapter.scoring.score import build_plan
    from decision_adapter.service.scoring_batching import sharing_work

    items = DecisionRequest.model_validate(body).items
    assert len({item.state for item in items}) == 1, "a shape's decisions share one state"
    budget = TokenBudget(LIMIT)
    plan = build_plan(renderer, items[0].state, [item.as_question() for item in items], budget)
    if batched:
        budget.spend(sharing_work(plan).cost)
    return budget.spent


def largest_admitted(shape: Callable[[int], dict], renderer, *, batched: bool = False) -> int:
    """The largest n whose request fits the budget, by the adapter's own plan (no model work)."""
    from decision_adapter.model.tokenizer import TokenLimitExceeded

    def fits(n: int) -> bool:
        try:
            cost(renderer, shape(n), batched=batched)
        except TokenLimitExceeded:
            return False
        return True

    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def _renderer():
    """The bundled model's renderer, as the adapter's (one thread: it only tokenizes)."""
    from decision_adapter.model.engine import Engine, EngineConfig
    from decision_adapter.scoring.prompts import PromptRenderer

    from tests.conftest import bundled_gguf

    config = EngineConfig(n_ctx=LIMIT, n_batch=512, n_threads=1, n_gpu_layers=0, n_seq_max=64)
    return PromptRenderer(Engine(bundled_gguf(), config))


def _timed(client: httpx.Client, url: str, body: dict) -> dict:
    started = time.perf_counter()
    response = client.post(url, json=body)
    seconds = round(time.perf_counter() - started, 3)
    row = {"status": response.status_code, "seconds": seconds}
    if response.status_code == 200:
        answer = response.json()
        timing = (answer["result"] if "result" in answer else answer["results"][0])["timing"]
        row.update({k: timing[k] for k in ("request_tokens", "prefill_ms", "branches_ms")})
    else:
        row["error"] = response.json().get("error", "")[:200]
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m research.budget_worst_case", description=__doc__
    )
    parser.add_argument("--output", type=Path)
    parser.add_argument(
        "--scoring-requests",
        type=int,
        default=1,
        help="DECISION_MAX_SCORING_REQUESTS (above 1: decisions batched)",
    )
    args = parser.parse_args(argv)
    batched = args.scoring_requests > 1
    now = datetime.now(UTC)
    renderer = _renderer()
    sizes = {
        name: largest_admitted(shape, renderer, batched=batched) for name, shape in SHAPES.items()
    }
    env = {**ADAPTER_ENV, "DECISION_MAX_SCORING_REQUESTS": str(args.scoring_requests)}
    rows = {}
    with tempfile.TemporaryDirectory() as tmp, httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        with running_adapter(Path(tmp), **env) as adapter:
            url = adapter.url + "/invocations"
            for name, shape in SHAPES.items():
                n = sizes[name]
                rows[name] = {
                    "words": n,
                    "charged_tokens": cost(renderer, shape(n), batched=batched),
                    "admitted": _timed(client, url, shape(n)),
                    "one_word_more": _timed(client, url, shape(n + 1)),
                }
                print(name, json.dumps(rows[name]), flush=True)
    mode = f"decisions batched ({args.scoring_requests} at once)" if batched else "one at a time"
    result = {
        "date": now.isoformat(timespec="seconds"),
        "machine": machine_name(),
        # Other work on the machine slows every figure: the load over the last 15 minutes.
        "load_average_15min": round(os.getloadavg()[2], 2),
        "adapter": f"started here, {THREADS} threads, state cache off, limit {LIMIT}, {mode}",
        "worst_case": rows,
    }
    suffix = "-batched" if batched else ""
    name = f"{now:%Y-%m-%d}-{machine_name()}-budget{suffix}.json"
    output = args.output or RESULTS / name
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(output)


if __name__ == "__main__":
    main()
