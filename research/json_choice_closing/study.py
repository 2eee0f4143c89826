"""python -m research.json_choice_closing: the JSON answer cue (`json_choice`, `json_choice_sum`)
read with every closing a model may write after a name, against the one it reads today.

The readouts open the answer with `{"choice": "` and read each name followed by the `"` token
that closes its string (scoring/score.py, prompts.JSON_CHOICE_CLOSE). Gemma 3's and SmolLM2's
vocabularies also hold `"}`, one token that closes the string and the object, which is how both
tokenizers spell `{"choice": "yes"}`. Three closings, read from the same logits:

- `quote`: the `"` token alone (the product);
- `quote_brace`: `"` or `"}`: the name's probability times P(`"`) + P(`"}`);
- `any_quote`: every token whose text starts with `"`: the chance the string ends right after
  the name's tokens, whatever token ends it.

Each item is planned as the adapter plans it (build_plan: its renderer, prompt and tokens) and
each question's reading decoded once with every closing token read after each name's tokens;
the names' tokens are the plan's own paths, so the branches decode as the product's do and
`quote` is the product's number. Per model and split (System One questions, as the evaluation
sends them): each readout with each closing at T = 1, at its built-in temperature and at the
temperature fitted on dev (evaluation.readout_choice.strategy_report; test is never tuned on);
each closing against `quote` question by question at the built-in temperature
(top option changed, McNemar's exact test on the questions one answers right and the other
wrong, a paired bootstrap of the NLL difference); and how much of the closing mass `"}` holds.

    python -m research.json_choice_closing --model gemma3 --model smollm2 [--limit N]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from decision_adapter.calibration import BUILT_IN_TEMPERATURES
from decision_adapter.contract import question_kind
from decision_adapter.formats.systemone import SystemOneRequest
from decision_adapter.model.engine import Engine
from decision_adapter.scoring.prompts import JSON_CHOICE_CLOSE, PromptRenderer
from decision_adapter.scoring.score import Reading, ScoringPlan, build_plan, score

from evaluation import labelled, metrics, readout_choice
from evaluation.labelled import Case, Item, SystemOneItem

SPLITS = {"dev": labelled.DATA / "readout_dev.jsonl", "test": labelled.DATA / "readout_test.jsonl"}
RESULTS = Path(__file__).resolve().parent / "results"
CLOSINGS = ("quote", "quote_brace", "any_quote")
BASELINE = "quote"
READOUTS = ("json_choice", "json_choice_sum")  # mean log-probability per token; whole
BOOTSTRAP_SAMPLES = 2000
TOP_CLOSINGS = 8
FIGURES = ("accuracy", "nll", "ece", "brier")


@dataclass
class Closings:
    """One vocabulary's closing tokens, as read: the `"` token first, then `"}` (where the
    vocabulary holds it as one token), then every other token whose text starts with `"`."""

    tokens: list[int]
    brace: bool  # tokens[1] is `"}`
    pieces: list[str]  # each token's text

    def columns(self, closing: str) -> list[int]:
        """Which of `tokens` a closing sums."""
        if closing == "quote":
            return [0]
        if closing == "quote_brace":
            return [0, 1] if self.brace else [0]
        return list(range(len(self.tokens)))


def closings(engine: Engine) -> Closings:
    (quote,) = engine.tokenize(JSON_CHOICE_CLOSE, special=False)
    brace = engine.tokenize(JSON_CHOICE_CLOSE + "}", special=False)
    first = [quote] + (brace if len(brace) == 1 else [])
    others = [
        t
        for t in range(engine.n_vocab)
        if t not in first
        and not engine.is_control(t)
        and engine.piece(t, special=False).startswith(JSON_CHOICE_CLOSE.encode())
    ]
    tokens = first + others
    pieces = [engine.piece(t, special=False).decode("utf-8", "replace") for t in tokens]
    return Closings(tokens, brace=len(first) == 2, pieces=pieces)


def with_closings(plan: ScoringPlan, closing: Closings) -> tuple[ScoringPlan, list[list[bool]]]:
    """The plan's JSON questions read as whole log-probabilities (`json_choice_sum`, from which
    both readouts' numbers follow) with each option's name read before every closing token,
    option after option. The names are each continuation's tokens but its last `"`: the same
    paths, so the same branch batches (the plan's own). Per question, per option: whether its
    continuation ends in the `"` token; one that does not (a tokenizer that merged the quote
    into the name) is read as the product reads it, for every closing."""
    questions, closable = [], []
    quote = closing.tokens[0]
    for question in plan.questions:
        if question.readout not in ("json_choice", "json_choice_sum"):
            raise ValueError(f"not a JSON answer cue: {question.readout}")
        (reading,) = question.readings
        continuations, ends = [], []
        for read in reading.continuations:
            ends.append(read[-1] == quote)
            continuations += [read[:-1] + [t] if ends[-1] else read for t in closing.tokens]
        extended = Reading(reading.suffix_tokens, continuations, reading.tree_batches)
        questions.append(replace(question, readout="json_choice_sum", readings=[extended]))
        closable.append(ends)
    return replace(plan, questions=questions), closable


@dataclass
class Read:
    """One question read with every closing: its options' names as the product reads them."""

    item_id: str
    category: str
    option_ids: list[str]
    expected: str
    lengths: list[int]  # tokens per continuation as the product reads it (the closing one)
    closed: np.ndarray  # log P(name, closing token) per option, per Closings.tokens
    closable: list[bool]

    def log_probs(self, columns: list[int]) -> np.ndarray:
        """Each option's whole log-probability with a closing's tokens (Closings.columns)
        summed (fsum: exact)."""
        out = []
        for row, ends in zip(self.closed, self.closable, strict=True):
            picked = row[columns] if ends else row[:1]
            top = picked.max()
            out.append(top + math.log(math.fsum(np.exp(picked - top))))
        return np.array(out)

    def logits(self, readout: str, columns: list[int]) -> np.ndarray:
        whole = self.log_probs(columns)
        return whole / np.array(self.lengths) if readout == "json_choice" else whole

    def record(self, closing: Closings) -> dict[str, Any]:
        """What is kept: each option's whole log-probability with each closing."""
        return {
            "item_id": self.item_id,
            "category": self.category,
            "option_ids": self.option_ids,
            "expected": self.expected,
            "lengths": self.lengths,
            "closable": self.closable,
            **{
                f"log_prob_{name}": self.log_probs(closing.columns(name)).tolist()
                for name in CLOSINGS
            },
        }


def read_items(
    items: Sequence[Item], engine: Engine, renderer: PromptRenderer, closing: Closings
) -> list[Read]:
    reads: list[Read] = []
    width = len(closing.tokens)
    for item in items:
        if not isinstance(item, SystemOneItem):
            raise TypeError(f"{item.item_id}: not a System One line")
        request = SystemOneRequest.model_validate(item.body())
        ids = list(item.expected)
        questions = [request.questions[qid].as_question("json_choice_sum") for qid in ids]
        plan = build_plan(renderer, request.state, questions)
        extended, closable = with_closings(plan, closing)
        results, _ = score(engine, extended)
        for qid, question, scores, ends in zip(ids, plan.questions, results, closable, strict=True):
            reads.append(
                Read(
                    item_id=f"{item.item_id}/{qid}",
                    category=item.categories.get(qid, item.category),
                    option_ids=request.questions[qid].option_keys,
                    expected=item.expected[qid],
                    lengths=[len(c) for c in question.label_tokens],
                    closed=scores.option_log_probs.reshape(len(ends), width),
                    closable=ends,
                )
            )
    return reads


def cases(reads: list[Read], readout: str, columns: list[int], t: float) -> list[Case]:
    out: list[Case] = []
    for read in reads:
        logits = read.logits(readout, columns)
        out.append(
            Case(
                item_id=read.item_id,
                category=read.category,
                option_ids=read.option_ids,
                probabilities=metrics.softmax(logits.tolist(), t).tolist(),
                logits=logits.tolist(),
                expected=read.expected,
                latency_s=0.0,
            )
        )
    return out


def figures(group: list[Case]) -> dict[str, Any]:
    report = readout_choice.strategy_report(group, None)
    return {
        **{name: report[name] for name in ("n", *FIGURES)},
        "below_majority": report["below_majority"],
        "by_kind": {
            kind: {"n": row["n"], "accuracy": row["accuracy"]}
            for kind, row in report["by_kind"].items()
        },
        "by_question_type": {
            kind: {"n": row["n"], "accuracy": row["accuracy"]}
            for kind, row in readout_choice.grouped(
                group, lambda c: question_kind(c.option_ids)
            ).items()
        },
    }


def mcnemar_p(only_baseline: int, only_variant: int) -> float:
    """Exact two-sided McNemar: the discordant questions as a fair coin's tosses."""
    n = only_baseline + only_variant
    if n == 0:
        return 1.0
    k = min(only_baseline, only_variant)
    tail = math.fsum(math.comb(n, i) for i in range(k + 1)) / float(1 << n)
    return min(1.0, 2 * tail)


def paired(baseline: list[Case], variant: list[Case], seed: int = 0) -> dict[str, Any]:
    """The variant against the baseline, question by question."""
    right_b = np.array([c.predicted == c.expected for c in baseline])
    right_v = np.array([c.predicted == c.expected for c in variant])
    changed = sum(b.predicted != v.predicted for b, v in zip(baseline, variant, strict=True))
    only_b, only_v = int((right_b & ~right_v).sum()), int((right_v & ~right_b).sum())
    nll_b = np.array([-math.log(max(c.by_id[c.expected], 1e-300)) for c in baseline])
    nll_v = np.array([-math.log(max(c.by_id[c.expected], 1e-300)) for c in variant])
    differences = nll_v - nll_b
    draws = np.random.default_rng(seed).integers(
        0, len(differences), (BOOTSTRAP_SAMPLES, len(differences))
    )
    means = differences[draws].mean(axis=1)
    return {
        "top_option_changed": changed,
        "right_only_with_quote": only_b,
        "right_only_with_variant": only_v,
        "accuracy_difference": float(right_v.mean() - right_b.mean()),
        "mcnemar_exact_p": mcnemar_p(only_b, only_v),
        "nll_difference": float(differences.mean()),
        "nll_difference_95ci": [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))],
    }


def closing_mass(reads: list[Read], closing: Closings) -> dict[str, Any]:
    """How the closing mass after a name splits: P(`"` | name) and P(`"}` | name) as shares of
    P(any closing | name), and `"}`'s share of `"` + `"}`, over every closable option and over
    the expected ones (ratios of one row's numbers: the name's own probability cancels)."""

    def rows(expected_only: bool) -> dict[str, Any]:
        quote, brace, shares = [], [], []
        for read in reads:
            every = read.log_probs(closing.columns("any_quote"))
            for index, option in enumerate(read.option_ids):
                if not read.closable[index] or (expected_only and option != read.expected):
                    continue
                row = read.closed[index]
                shares.append(np.exp(row - every[index]))
                quote.append(math.exp(row[0] - every[index]))
                brace.append(math.exp(row[1] - every[index]) if closing.brace else 0.0)
        mean = np.mean(shares, axis=0)
        share = [b / (q + b) for q, b in zip(quote, brace, strict=True)]
        return {
            "options": len(quote),
            "quote_of_any_closing_mean": statistics.fmean(quote),
            "brace_of_any_closing_mean": statistics.fmean(brace),
            "brace_of_quote_plus_brace_mean": statistics.fmean(share),
            "brace_of_quote_plus_brace_median": statistics.median(share),
            "brace_above_quote": sum(b > q for q, b in zip(quote, brace, strict=True)),
            # The closings that hold most of it, each as its mean share of any closing.
            "top_closings": {
                closing.pieces[t]: float(mean[t]) for t in np.argsort(-mean)[:TOP_CLOSINGS]
            },
        }

    return {"all_options": rows(False), "expected_options": rows(True)}


def compare(dev: list[Read], test: list[Read], closing: Closings) -> dict[str, Any]:
    """Every readout with every closing on both splits: at T = 1, at the readout's built-in
    temperature and at the temperature fitted on dev (test is never tuned on); each closing
    against `quote` question by question at the built-in temperature."""
    out: dict[str, Any] = {}
    for readout in READOUTS:
        built_in = BUILT_IN_TEMPERATURES.get(readout, 1.0)
        rows: dict[str, Any] = {"built_in_temperature": built_in}
        served: dict[str, dict[str, list[Case]]] = {}
        for name in CLOSINGS:
            columns = closing.columns(name)
            logits = [c.logits for c in cases(dev, readout, columns, 1.0)]
            fit = metrics.fit_temperature(logits, [r.option_ids.index(r.expected) for r in dev])
            at = {
                t_name: {
                    split: cases(reads, readout, columns, t)
                    for split, reads in (("dev", dev), ("test", test))
                }
                for t_name, t in (
                    ("1", 1.0),
                    ("built_in", built_in),
                    ("dev_fitted", fit.temperature),
                )
            }
            served[name] = at["built_in"]
            rows[name] = {
                "dev_fitted_temperature": fit.temperature,
                **{
                    f"{split}_at_{t_name}": figures(group)
                    for t_name, by_split in at.items()
                    for split, group in by_split.items()
                },
            }
        for name in CLOSINGS:
            if name != BASELINE:
                rows[name]["against_quote"] = {
                    split: paired(served[BASELINE][split], served[name][split])
                    for split in ("dev", "test")
                }
        out[readout] = rows
    return out


def measure(path: Path, splits: dict[str, list[Item]], threads: int) -> dict[str, Any]:
    from decision_adapter.model.engine import EngineConfig

    config = EngineConfig(n_ctx=4096, n_batch=512, n_threads=threads, n_gpu_layers=0, n_seq_max=64)
    engine = Engine(path, config)
    try:
        renderer = PromptRenderer(engine)
        closing = closings(engine)
        started = time.perf_counter()
        reads = {
            name: read_items(items, engine, renderer, closing) for name, items in splits.items()
        }
        seconds = time.perf_counter() - started
        return {
            "gguf": path.name,
            "template": renderer.mode,
            "vocabulary": {
                "n_vocab": engine.n_vocab,
                "quote_token": closing.tokens[0],
                "brace_token": closing.tokens[1] if closing.brace else None,
                "tokens_starting_with_quote": len(closing.tokens),
                "some": closing.pieces[:12],
            },
            "options_not_closable": sum(
                not e for r in (*reads["dev"], *reads["test"]) for e in r.closable
            ),
            "closing_mass": {name: closing_mass(group, closing) for name, group in reads.items()},
            "readouts": compare(reads["dev"], reads["test"], closing),
            "seconds": round(seconds, 1),
            "questions": {
                name: [r.record(closing) for r in group] for name, group in reads.items()
            },
        }
    finally:
        engine.close()


def results_text(result: dict[str, Any]) -> str:
    """Indented JSON, each kept question on one line of its own."""
    lines: dict[str, str] = {}
    shown = json.loads(json.dumps(result))
    for model in shown["models"].values():
        for group in model["questions"].values():
            for index, record in enumerate(group):
                key = f"@question{len(lines)}@"
                lines[key] = json.dumps(record)
                group[index] = key
    text = json.dumps(shown, indent=2)
    for key, line in lines.items():
        text = text.replace(f'"{key}"', line, 1)
    return text + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.json_choice_closing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", action="append", default=[], help="launcher.models name")
    parser.add_argument("--limit", type=int, help="items per split (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help=f"also write the JSON here (e.g. {RESULTS}/)")
    args = parser.parse_args(argv)
    from launcher.models import local_model

    splits = {name: labelled.load(path)[: args.limit] for name, path in SPLITS.items()}
    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": {name: path.name for name, path in SPLITS.items()},
        "items": {name: len(items) for name, items in splits.items()},
        "closings": {
            "quote": 'the `"` token (the product)',
            "quote_brace": '`"` or `"}`',
            "any_quote": 'every token whose text starts with `"`',
        },
        "readouts": {
            "json_choice": "mean log-probability per token",
            "json_choice_sum": "whole log-probability",
        },
        "models": {},
    }
    for name in args.model:
        result["models"][name] = measure(local_model(name), splits, args.threads)
        print(name, "done", file=sys.stderr)
    text = results_text(result)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
