"""A trained decision model, the adapter beside llama-server's native /v1/systemone: the same
random-weight GGUF of a realistic shape, the same bodies, one machine, the two taking turns.

The model is Kev-shaped (the pointer head over Qwen3.5's hybrid body: Gated DeltaNet layers
with one attention layer in four), at a width and depth two cores bear: SHAPE. Its weights are
seeded noise; what a forward pass costs does not depend on them.

- one question: one /v1/systemone body with one choice question on a ~1,000-token state;
- eight questions on that state in one body;
- 1 to 16 closed-loop clients sending the one-question body.
Each is run against the adapter as it ships (state cache on) and with its state cache off, and
against llama-server with one slot (`--parallel 1`, as the adapter takes decision models one
request at a time) and four.
The latencies alternate request by request; the client levels alternate level by level.
Targets: the adapter's latency at most TARGET_LATENCY times llama-server's (one slot), its
throughput at least llama-server's (one slot) at every level.

`python -m bench.decision_models_versus` writes
bench/results/<date>-<machine>-decision-models.json; docs/benchmarks.md's table is rendered
from the newest (`python -m docgen`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import tempfile
from pathlib import Path

import httpx

from bench.concurrency import run_load
from bench.llama_server import ServerSettings, running_llama_server
from bench.llama_server_build import ensure_llama_server
from bench.report import DECISION_MODELS_SUFFIX
from bench.workloads import FILLER, THREADS, machine_name
from launcher import running_adapter

# Qwen3.5-0.8B's layout (one attention layer in four, grouped-query attention, a DeltaNet of
# 4 key and 8 value heads) at half its width and a third of its depth; kev's published head
# width (n_embd_out = 2 * 256).
SHAPE: dict[str, object] = {
    "embedding_length": 512,
    "block_count": 8,
    "full_attention_interval": 4,
    "feed_forward_length": 1536,
    "attention.head_count": 4,
    "attention.head_count_kv": 2,
    "rope.dimension_sections": [16, 16, 16, 16],
    "ssm.state_size": 128,
    "ssm.group_count": 4,
    "ssm.time_step_rank": 8,
    "ssm.inner_size": 1024,
    "embedding_length_out": 512,
}
KIND = "kev"
STATE = FILLER * 17  # about 1,000 tokens of a support ticket
QUESTIONS = {
    "queue": {
        "type": "choice",
        "instructions": "Which team should handle this ticket?",
        "criteria": {"billing": "charges, refunds", "shipping": "parcels", "account": None},
    },
    "urgent": {"type": "noul", "instructions": "Is the ticket urgent?"},
    "upset": {
        "type": "score",
        "instructions": "How upset is the customer?",
        "criteria": ["calm", "annoyed", "furious"],
    },
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "callback": {"type": "noul", "instructions": "Does the customer ask for a call back?"},
    "channel": {
        "type": "choice",
        "instructions": "Which channel should answer?",
        "criteria": {"email": None, "phone": None, "chat": None},
    },
    "language": {
        "type": "choice",
        "instructions": "Which language is the ticket in?",
        "criteria": {"english": None, "german": None, "french": None, "other": None},
    },
    "priority": {
        "type": "score",
        "instructions": "What priority should the ticket get?",
        "criteria": ["low", "normal", "high", "critical"],
    },
}
ONE = {"model": "jev-latest", "state": STATE, "questions": {"queue": QUESTIONS["queue"]}}
EIGHT = {"model": "jev-latest", "state": STATE, "questions": QUESTIONS}
LEVELS = (1, 2, 4, 8, 16)
SLOTS = (1, 4)
TARGET_LATENCY = 1.0
RESULTS = Path(__file__).parent / "results"
ADAPTER_ENV = {
    "DECISION_N_THREADS": str(THREADS),
    "DECISION_N_CTX": "8192",
    "DECISION_N_BATCH": "2048",
    "DECISION_MAX_QUEUE": "16",
    "DECISION_ADMISSION_WAIT_S": "60",
}
# As it ships, and with the state cache off: every request decodes its state, as llama-server
# does on a hybrid model (it cannot continue a recurrent state from a shorter prefix).
ADAPTERS = {"adapter": {}, "adapter_cache_off": {"DECISION_STATE_CACHE_BYTES": "0"}}


def _timed(client: httpx.Client, url: str, body: dict) -> float:
    reply = client.post(url, json=body)
    reply.raise_for_status()
    return reply.elapsed.total_seconds() * 1000


def paired_latency(urls: dict[str, str], body: dict, rounds: int) -> dict[str, float]:
    """Each side's median milliseconds, the sides taking turns request by request."""
    samples: dict[str, list[float]] = {name: [] for name in urls}
    with httpx.Client(timeout=300) as client:
        for url in urls.values():  # warm: the model's pages in memory
            _timed(client, url, body)
        for _ in range(rounds):
            for name, url in urls.items():
                samples[name].append(_timed(client, url, body))
    return {name: round(statistics.median(values), 3) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=8, help="paired requests per body")
    parser.add_argument("--seconds", type=float, default=8.0, help="per client level and side")
    args = parser.parse_args()
    build = ensure_llama_server()
    if build.binary is None:
        raise SystemExit(f"llama-server is not available: {build.reason}")
    from tests.support.decision_models import build as build_model

    result: dict = {"load_average_before": os.getloadavg(), "shape": SHAPE, "kind": KIND}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        gguf = build_model(KIND, Path(tmp), shape=SHAPE)
        result["model_bytes"] = gguf.stat().st_size
        urls = {}
        for side, env in ADAPTERS.items():
            adapter = stack.enter_context(
                running_adapter(Path(tmp), DECISION_MODEL_PATH=str(gguf), **ADAPTER_ENV, **env)
            )
            urls[side] = adapter.url + "/v1/systemone"
        for slots in SLOTS:
            # Each slot gets the adapter's context; the batch as the adapter's.
            settings = ServerSettings(THREADS, n_ctx=8192 * slots, n_batch=2048, parallel=slots)
            server = stack.enter_context(
                running_llama_server(build.binary, gguf, settings, Path(tmp))
            )
            urls[f"llama_server_np{slots}"] = server.url + "/v1/systemone"
        result["build"] = build.as_dict()
        result["prompt_tokens"] = httpx.post(urls["adapter"], json=ONE, timeout=300).json()[
            "usage"
        ]["input_tokens"]
        result["one_question_ms"] = paired_latency(urls, ONE, args.rounds)
        print("one question", result["one_question_ms"], flush=True)
        result["eight_questions_ms"] = paired_latency(urls, EIGHT, max(2, args.rounds // 2))
        print("eight questions", result["eight_questions_ms"], flush=True)
        levels: dict[str, list[dict]] = {name: [] for name in urls}
        for clients in LEVELS:
            for name, url in urls.items():
                levels[name].append(run_load(url, ONE, clients, args.seconds).as_dict())
                print(name, clients, levels[name][-1]["throughput_rps"], flush=True)
        result["clients"] = levels
    result["load_average_after"] = os.getloadavg()
    result["targets"] = targets(result)
    today = datetime.date.today().isoformat()
    output = RESULTS / f"{today}-{machine_name()}{DECISION_MODELS_SUFFIX}"
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    print(f"wrote {output}")


def _ratio(ours: float, theirs: float) -> float:
    return round(ours / theirs, 3) if theirs else float("inf")


def targets(result: dict) -> dict[str, object]:
    """Latency ratios (adapter / llama-server one slot: at most TARGET_LATENCY) and throughput
    ratios per level (at least 1)."""
    native = "llama_server_np1"
    throughput = {
        f"{side}/{ours['clients']}": _ratio(ours["throughput_rps"], theirs["throughput_rps"])
        for side in ADAPTERS
        for ours, theirs in zip(result["clients"][side], result["clients"][native], strict=True)
    }
    latency = {
        f"{side}/{body}": _ratio(result[body][side], result[body][native])
        for side in ADAPTERS
        for body in ("one_question_ms", "eight_questions_ms")
    }
    return {
        "latency_ratio": latency,
        "latency_met": all(r <= TARGET_LATENCY for r in latency.values()),
        "throughput_ratio": throughput,
        "throughput_met": all(r >= 1.0 for r in throughput.values()),
    }


def markdown(result: dict) -> str:
    """docs/benchmarks.md's table of one run."""
    sides = list(result["clients"])
    names = {
        "adapter": "adapter",
        "adapter_cache_off": "adapter, state cache off",
        "llama_server_np1": "llama-server -np 1",
        "llama_server_np4": "llama-server -np 4",
    }
    header = "| | " + " | ".join(names.get(side, side) for side in sides) + " |"
    rows = [header, "|---" * (len(sides) + 1) + "|"]
    for body, label in (
        ("one_question_ms", "one question, ms"),
        ("eight_questions_ms", "8 questions on one state, ms"),
    ):
        rows.append(
            f"| {label} | " + " | ".join(f"{result[body][side]:,.0f}" for side in sides) + " |"
        )
    for index, clients in enumerate(LEVELS):
        values = [result["clients"][side][index]["throughput_rps"] for side in sides]
        rows.append(
            f"| {clients} clients, decisions/s | " + " | ".join(f"{v:.2f}" for v in values) + " |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
