"""python -m research.instruct_readouts: what an instruct model reads and wants to say first.

For a yes/no question and a scored level rendered as the adapter renders decisions (the GGUF's
chat template, letters as labels), prints each prompt's end and the model's most likely next
tokens after it, unrestricted, with the probability the `letters` readout then spreads over the
labels: where the model does not want a label at all, the readout reads a choice the model did
not make. Writes research/instruct_readouts/results/prompts-<model>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
CASES = {
    "noul": (
        "Hi, I was charged twice for my March invoice. Could you check? Thanks, Anna",
        "Is the customer angry?",
        [("A", "true", None), ("B", "false", None)],
    ),
    "score": (
        "The export button on the reports page is a few pixels off on Firefox.",
        "What is the priority of this ticket? (0 = lowest, 4 = highest)",
        [(chr(65 + n), str(n), None) for n in range(5)],
    ),
}


def inspect(gguf: Path, top: int = 8) -> dict:
    from decision_adapter.model.engine import Engine, EngineConfig
    from decision_adapter.scoring.prompts import PromptRenderer

    engine = Engine(
        gguf, EngineConfig(n_ctx=2048, n_batch=512, n_threads=2, n_gpu_layers=0, n_seq_max=4)
    )
    try:
        renderer = PromptRenderer(engine)
        found = {}
        for kind, (state, question, options) in CASES.items():
            prompt = renderer.decision(state, question, options)
            tokens = renderer.tokens(prompt.prefix + prompt.suffix, starts_prompt=True)
            last = len(tokens) - 1
            row = engine.decode_sequence(0, tokens, 0, logit_positions=[last])[last]
            engine.reset()
            logits = np.asarray(row, dtype=np.float64)
            log_probs = logits - np.logaddexp.reduce(logits)
            best = np.argsort(log_probs)[::-1][:top]
            labels = [renderer.label_tokens(label)[0] for label, _, _ in options]
            found[kind] = {
                "prompt_end": prompt.text[-300:],
                "top_next_tokens": [
                    [
                        engine.piece(int(t)).decode("utf-8", "replace"),
                        round(float(np.exp(log_probs[t])), 4),
                    ]
                    for t in best
                ],
                "label_probabilities": {
                    option_id: round(float(np.exp(log_probs[t])), 4)
                    for (_, option_id, _), t in zip(options, labels, strict=True)
                },
            }
    finally:
        engine.close()
    return found


def main(argv: list[str] | None = None) -> int:
    from launcher.models import local_model

    parser = argparse.ArgumentParser(prog="python -m research.instruct_readouts")
    parser.add_argument("--model", action="append", default=[], help="launcher.models names")
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    for name in args.model or ["qwen2.5-coder-0.5b"]:
        found = inspect(local_model(name))
        (RESULTS / f"prompts-{name}.json").write_text(json.dumps(found, indent=2) + "\n")
        json.dump({name: found}, sys.stdout, indent=2)
        print()
    return 0
