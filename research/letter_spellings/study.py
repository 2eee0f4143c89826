"""python -m research.letter_spellings: the `letters` readout summed over every spelling of a
label (decision_adapter.scoring.letter_spellings) against today's single spelling, as JSON.

Per model, on the held-out split (evaluation/data/readout_test.jsonl, System One questions read
with `x_readout: letters`, temperature 1): accuracy, NLL, Brier, ECE and the allowed token mass of
each reading, and how many answers fall under MIN_CONFIDENT_MASS. Per vocabulary: how many
tokens each label counts. Both readings decode the same plan in this process (the spellings
dropped for the single one), so they differ by the readout alone.

    python -m research.letter_spellings --model gemma3 --model smollm2 [--matrix] [--limit N]

The metrics are evaluation.metrics.summary, the ones the evaluation reports; the readings run in
this process (not over HTTP) so that both spellings read the very same decoded logits.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from decision_adapter.contract import MIN_CONFIDENT_MASS, QuestionScores
from decision_adapter.formats.systemone import SystemOneRequest
from decision_adapter.scoring.letter_spellings import letter_spellings
from decision_adapter.scoring.score import build_plan, score

from evaluation import labelled, metrics

HELD_OUT = labelled.DATA / "readout_test.jsonl"
RESULTS = Path(__file__).resolve().parent / "results"  # where its committed result lives
MASS_CUTS = (0.05, 0.1, 0.2, 0.3, 0.5)


def _engine(path: Path, threads: int):
    from decision_adapter.model.engine import Engine, EngineConfig
    from decision_adapter.scoring.prompts import PromptRenderer

    config = EngineConfig(n_ctx=4096, n_batch=512, n_threads=threads, n_gpu_layers=0, n_seq_max=64)
    engine = Engine(path, config)
    return engine, PromptRenderer(engine)


def _single_spelling(plan):
    """The same plan read as before spellings: each label's own token only."""
    return dataclasses.replace(
        plan,
        questions=[
            dataclasses.replace(
                q, readings=[dataclasses.replace(r, spellings=None) for r in q.readings]
            )
            for q in plan.questions
        ],
    )


def vocabulary(engine) -> dict[str, Any]:
    index = letter_spellings(engine)
    counts = [len(index.of(letter)) for letter in index.tokens]
    return {
        "n_vocab": engine.n_vocab,
        "tokens_per_label": {"min": min(counts), "max": max(counts), "total": sum(counts)},
        "spellings_of_A": [engine.piece(int(t)).decode("utf-8") for t in index.of("A")],
    }


def _readings(items, engine, renderer) -> dict[str, list[tuple[QuestionScores, int]]]:
    out: dict[str, list[tuple[QuestionScores, int]]] = {"single": [], "spellings": []}
    for item in items:
        request = SystemOneRequest.model_validate(item.body())
        ids = list(item.expected)
        questions = [request.questions[qid].as_question("letters") for qid in ids]
        plan = build_plan(renderer, request.state, questions)
        expected = [request.questions[qid].option_keys.index(item.expected[qid]) for qid in ids]
        for name, read in (("spellings", plan), ("single", _single_spelling(plan))):
            results, _ = score(engine, read)
            out[name] += list(zip(results, expected, strict=False))
    return out


def _summary(readings: list[tuple[QuestionScores, int]]) -> dict[str, Any]:
    probabilities = [s.probabilities().tolist() for s, _ in readings]
    expected = [e for _, e in readings]
    masses = [s.allowed_token_mass for s, _ in readings]
    low = [(s, e) for s, e in readings if s.allowed_token_mass < MIN_CONFIDENT_MASS]
    high = [(s, e) for s, e in readings if s.allowed_token_mass >= MIN_CONFIDENT_MASS]

    def accuracy(subset):
        if not subset:
            return None
        return metrics.accuracy(
            [s.probabilities().tolist() for s, _ in subset], [e for _, e in subset]
        )

    return {
        **metrics.summary(probabilities, expected),
        "allowed_token_mass": {
            "mean": statistics.fmean(masses),
            "median": statistics.median(masses),
            "min": min(masses),
            "max": max(masses),
        },
        # How accuracy follows the mass: answers at or above each cut, and how right they are.
        "at_or_above_mass": {
            str(cut): {
                "n": sum(s.allowed_token_mass >= cut for s, _ in readings),
                "accuracy": accuracy([(s, e) for s, e in readings if s.allowed_token_mass >= cut]),
            }
            for cut in MASS_CUTS
        },
        "low_allowed_mass": len(low),
        "accuracy_low_allowed_mass": accuracy(low),
        "accuracy_confident": accuracy(high),
    }


def measure(path: Path, items, threads: int) -> dict[str, Any]:
    engine, renderer = _engine(path, threads)
    try:
        started = time.perf_counter()
        readings = _readings(items, engine, renderer)
        return {
            "gguf": path.name,
            "architecture": engine.architecture,
            "template": "chat" if renderer.template else "completion",
            "vocabulary": vocabulary(engine),
            "single_spelling": _summary(readings["single"]),
            "all_spellings": _summary(readings["spellings"]),
            "seconds": round(time.perf_counter() - started, 1),
        }
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.letter_spellings", description=__doc__
    )
    parser.add_argument("--model", action="append", default=[], help="launcher.models name")
    parser.add_argument("--matrix", action="store_true", help="also the random-weight matrix")
    parser.add_argument(
        "--matrix-limit", type=int, default=10, help="held-out items per matrix model"
    )
    parser.add_argument("--limit", type=int, help="held-out items per real model (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help=f"also write the JSON here (e.g. {RESULTS}/)")
    args = parser.parse_args(argv)
    from launcher.models import local_model

    items = labelled.load(HELD_OUT)
    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "file": HELD_OUT.name,
        "min_confident_mass": MIN_CONFIDENT_MASS,
        "readout": "letters, System One questions, temperature 1",
        "models": {},
    }
    for name in args.model:
        chosen = items[: args.limit] if args.limit else items
        result["models"][name] = {
            "items": len(chosen),
            **measure(local_model(name), chosen, args.threads),
        }
        print(name, "done", file=sys.stderr)
    if args.matrix:
        from tests.support.model_matrix import SERVED, ensure_matrix

        paths = ensure_matrix()
        for family in SERVED:
            chosen = items[: args.matrix_limit]
            result["models"][f"matrix/{family.name}"] = {
                "items": len(chosen),
                "random_weights": True,
                **measure(paths[family.name], chosen, args.threads),
            }
            print(family.name, "done", file=sys.stderr)
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
