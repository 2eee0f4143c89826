"""Decisions answered by a trained decision model's own head (model/decision_head.py), computed
as llama-server's /v1/systemone computes them (tools/server/server-decision.cpp; the spec:
research/decision_models/README.md).

Each question is one prompt per variant (lev shows a choice's options in both orders), rendered
by the GGUF's `systemone` template from the raw state, the question and its options, tokenized
with special tokens parsed. kev's inputs are first flattened to text (objects as `key: value`
lines, lists as `- item` lines, special-token spellings defused); laya's have the mask token's
text replaced by a space, and its tokens are then cut as it was trained: each option, then the
question, to fit `max_head_tokens`.

A prompt's first tokens that only the state decides (`state_prefix`: what two probe questions
on the state share) are decoded once per state, saved, and kept in the state cache; every
prompt restores them into an empty context and decodes the rest, so a question's answer is the
same alone, beside other questions, in any order, from the cache and in any request. laya has no
memory: each of its prompts is decoded whole.

What is read, per variant:
- the label types: their labels' logits at the last prompt token, in the engine's fixed chunks;
- kev: per option, the dot product of the last token's query (the first half of its embeddings
  row) with the key at the option's `<|box_end|>` (the second half of that row), over
  sqrt(h), summed in float in order as llama-server does;
- laya: per option, the column of the question's kind (choice, score, noul) of the row at the
  option's mask token.
The rows read must come from one batch, as in llama-server: the tokens before the first row
read go in n_batch chunks, the rest in one (laya, which has no memory: the whole prompt). A
shared prefix adds one cut to llama-server's batches, so where there is one the numbers agree
with its within rounding (llama.cpp's kernels round a row by its batch's size), not bit for bit.
Then a softmax over the options at the model's temperature for the kind and the number of
options; the variants averaged; lev's yes/no the expected rating of its 0-8 scale over 8.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..contract import Answer, Question, QuestionScores, StateQuestion
from ..errors import LimitExceeded, over_token_budget
from ..model.decision_head import DecisionHead
from ..model.engine import Engine
from .state_cache import StateCache


def _tojson(value: Any) -> str:
    """llama.cpp's jinja `tojson` (common/jinja/value.cpp): no HTML escaping, `, ` and `: `."""
    return json.dumps(value, ensure_ascii=False)


# llama.cpp renders chat templates with trim_blocks and lstrip_blocks (common/jinja/lexer.cpp).
_ENVIRONMENT = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
_ENVIRONMENT.filters["tojson"] = _tojson


@dataclass(frozen=True)
class HeadQuestion:
    """One question as the head reads it: its prompts (one per variant) and its options in the
    order the model outputs them."""

    question: Question
    keys: list[str]  # option keys in model output order
    prompts: list[list[int]]  # tokens, per variant
    prompt_sha256: str
    markers: list[list[int]] = field(default_factory=list)  # kev, laya: rows read, per variant
    # Per variant, how many leading tokens are the state's prefix (`shared_length`).
    shared: list[int] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        """The prompts' tokens, as llama-server counts them: a shared prefix in each."""
        return sum(len(prompt) for prompt in self.prompts)

    def prefix(self, variant: int) -> list[int]:
        return self.prompts[variant][: self.shared[variant]]


def model_order(head: DecisionHead, question: Question) -> list[str]:
    """The options in the order the model sees and outputs them: a yes/no question's `false`
    first, `true` first for openjev (server-decision.cpp, parse_questions)."""
    if question.kind == "noul":
        return ["true", "false"] if head.noul_true_first else ["false", "true"]
    return list(question.option_ids)


# laya's column of each question kind (tools/server/server-decision.h).
LAYA_COLUMNS = {"choice": 0, "score": 1, "noul": 2}
# laya cuts each option (its marker and text) to this many tokens first.
LAYA_MAX_OPTION_TOKENS = 48

_KEV_SPECIAL = re.compile(r"<\|([A-Za-z0-9_]+)\|>")


def kev_render(value: Any, indent: int = 0) -> str:
    """kev's text of a JSON value (server-decision.cpp, decision_kev_render): null is empty,
    booleans True/False, objects `key: value` lines with nested values indented below, lists
    `- item` lines, numbers as JSON writes them."""
    pad = "  " * indent
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list):
        return "\n".join(
            pad + "- " + kev_render(item, indent + 1).lstrip(" \t\n\r") for item in value
        )
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            nested = isinstance(item, dict | list)
            lines.append(
                pad
                + key
                + (":\n" if nested else ": ")
                + kev_render(item, indent + 1 if nested else 0)
            )
        return "\n".join(lines)
    return _tojson(value)


def kev_text(value: Any) -> str:
    """kev's text input: a special token's spelling, `<|name|>`, written `<¦name¦>`, so the
    text cannot add the markers the head is read at."""
    return _KEV_SPECIAL.sub("<\u00a6\\1\u00a6>", kev_render(value))


def _replace_text(value: Any, search: str, replacement: str) -> Any:
    """`search` replaced in every string of a JSON value (object keys kept)."""
    if isinstance(value, str):
        return value.replace(search, replacement)
    if isinstance(value, list):
        return [_replace_text(item, search, replacement) for item in value]
    if isinstance(value, dict):
        return {key: _replace_text(item, search, replacement) for key, item in value.items()}
    return value


# The templates are given JSON instructions and descriptions as sent, not as the text the formats
# make of them: llama-server's are, and the two differ in what the templates and the types do
# with them: `{% if description %}` is false for an empty object but not for "{}", lev sorts
# the keys of every object, kev writes JSON its own way, laya blanks its mask text in strings
# but never in keys.
def _instructions(question: Question) -> Any:
    return question.question if question.question_value is None else question.question_value


def _descriptions(question: Question) -> list[Any]:
    values = question.description_values
    return list(question.descriptions) if values is None else values


def _options(head: DecisionHead, question: Question, keys: list[str], variant: int) -> list[Any]:
    described = dict(zip(question.option_ids, _descriptions(question), strict=True))
    shown = keys if variant == 0 else keys[::-1]
    options: list[dict[str, Any]] = []
    for position, key in enumerate(shown):
        option: dict[str, Any] = {"key": key, "description": described[key]}
        if head.type == "kev":
            option["key"] = kev_text(key)
            if option["description"] is not None:
                option["description"] = kev_text(option["description"])
        if head.label_texts:
            option["label"] = head.label_texts[position]
        options.append(option)
    return options


def _sorted_keys(value: Any) -> Any:
    """lev was trained with every object's keys sorted."""
    if isinstance(value, dict):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


def render(
    head: DecisionHead,
    state: Any,
    asked: Sequence[tuple[str, Question]],
    index: int,
    variant: int,
) -> str:
    """The prompt of question `index` of `asked` (id, question), in one variant."""
    question_id, question = asked[index]
    values: dict[str, Any] = {
        "id": question_id,
        "type": question.kind,
        "instructions": _instructions(question),
        "state": state,
        "options": _options(head, question, model_order(head, question), variant),
    }
    if head.type == "nimble":  # its prompt lists every question of the request
        values["questions"] = [
            {
                "id": other_id,
                "type": other.kind,
                "instructions": _instructions(other),
                "options": _options(head, other, model_order(head, other), 0),
            }
            for other_id, other in asked
        ]
    if head.type == "lev":
        values = _sorted_keys(values)
    if head.type == "kev":  # its template takes text only
        values["state"] = kev_text(state)
        values["instructions"] = kev_text(values["instructions"])
    if head.mask_text:  # only the template writes laya's option marker
        values = _replace_text(values, head.mask_text, " ")
    values["images"] = []
    return _ENVIRONMENT.from_string(head.template).render(**values)


# Two questions that differ from their first character on, in every field: what their prompts
# share is what the state alone decides.
_PROBES = (
    Question("A", ["A1", "A2"], [None, None], name="A"),
    Question("B", ["false", "true"], [None, None], name="B"),
)


def state_prefix(engine: Engine, head: DecisionHead, state: Any) -> list[int]:
    """The tokens every prompt on `state` starts with, unless its question changes what the
    template writes before the state (nimble: more than 26 options): what two probe questions'
    prompts share. laya has no memory to keep a prefix in: none."""
    if not head.keeps_memory:
        return []
    first, second = (
        engine.tokenize(render(head, state, [("A", probe)], 0, 0), special=True)
        for probe in _PROBES
    )
    return first[: _common_length(first, second)]


def _common_length(first: Sequence[int], second: Sequence[int]) -> int:
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    return length


def shared_length(prompt: list[int], prefix: list[int], markers: list[int]) -> int:
    """How much of `prompt` is decoded as the state's prefix: what it shares with it, short of
    the last token (the label types' logits) and of kev's first marker (its rows come from the
    question's batch)."""
    return min(_common_length(prompt, prefix), len(prompt) - 1, *markers[:1])


def plan(
    engine: Engine,
    head: DecisionHead,
    questions: Sequence[StateQuestion],
    ids: Sequence[str],
    limit: int,
) -> list[HeadQuestion]:
    """Every question's prompts, tokenized (kev and laya: with the positions of the rows read),
    and how much of each is its state's prefix; LimitExceeded before any model work when a
    question has more options than the model answers, its prompt is not laid out as the head
    reads it, the rows it reads do not fit one batch, or the model would decode more than
    `limit` tokens (each distinct prefix once, then every prompt's rest)."""
    by_state: dict[int, list[int]] = {}
    for index, item in enumerate(questions):
        by_state.setdefault(id(item.state), []).append(index)
    planned: list[HeadQuestion | None] = [None] * len(questions)
    prefixes: set[tuple[int, ...]] = set()
    spent = 0
    for members in by_state.values():
        asked = [(ids[m], questions[m].question) for m in members]
        state = questions[members[0]].state
        prefix = state_prefix(engine, head, state)
        for position, member in enumerate(members):
            question = questions[member].question
            n_options = len(question.option_ids)
            if head.max_options and n_options > head.max_options:
                raise LimitExceeded(
                    422,
                    "questions",
                    f"{n_options} options, this model answers at most {head.max_options}",
                    error_type="invalid_request",
                )
            texts = [
                render(head, state, asked, position, variant)
                for variant in range(head.variants(question.kind, n_options))
            ]
            prompts = [engine.tokenize(text, special=True) for text in texts]
            markers: list[list[int]] = []
            if head.type == "laya":
                layouts = [laya_layout(head, prompt, n_options) for prompt in prompts]
                prompts = [prompt for prompt, _ in layouts]
                markers = [positions for _, positions in layouts]
            elif head.type == "kev":
                markers = [kev_markers(head, prompt, n_options) for prompt in prompts]
            for prompt, read in zip(prompts, markers, strict=False):  # none: label types
                _check_one_batch(head, prompt, read, engine.n_batch)
            shared = [
                shared_length(prompt, prefix, markers[variant] if markers else [])
                for variant, prompt in enumerate(prompts)
            ]
            for prompt, length in zip(prompts, shared, strict=True):
                if tuple(prompt[:length]) not in prefixes:
                    prefixes.add(tuple(prompt[:length]))
                    spent += length
                spent += len(prompt) - length
            if spent > limit:
                raise over_token_budget("questions", spent, limit)
            digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
            keys = model_order(head, question)
            planned[member] = HeadQuestion(question, keys, prompts, digest, markers, shared)
    return [item for item in planned if item is not None]


def _unexpected_layout() -> LimitExceeded:
    return LimitExceeded(
        422,
        "questions",
        "unexpected layout of the decision prompt: the markers its head reads (and laya's "
        "separators) must come from the model's template alone, not from the request's text "
        "(a JSON key, say)",
        error_type="invalid_request",
    )


def kev_markers(head: DecisionHead, prompt: list[int], n_options: int) -> list[int]:
    """The positions of kev's `<|box_end|>`s, one per option, where the options' keys are read
    (the question's query is read at the last token)."""
    markers = [position for position, token in enumerate(prompt) if token == head.marker]
    if len(markers) != n_options:
        raise _unexpected_layout()
    return markers


def laya_layout(
    head: DecisionHead, tokens: list[int], n_options: int
) -> tuple[list[int], list[int]]:
    """laya's prompt `[cls] question [sep] ([mask] option)* [sep] state [sep]` cut as the model
    was trained (server-decision.cpp, fill_task_laya): each option to 49 tokens, all of them
    evenly when they leave under 16 of max_head_tokens, then the question to what is left (at
    least 8); the tokens and the positions of the options' masks."""
    sep = head.separator
    markers = [position for position, token in enumerate(tokens) if token == head.marker]
    if (
        len(markers) != n_options
        or markers[0] < 2
        or tokens[markers[0] - 1] != sep
        or tokens[-1] != sep
    ):
        raise _unexpected_layout()
    head_end = markers[0] - 1
    opts_end = next((i for i in range(markers[-1], len(tokens)) if tokens[i] == sep), len(tokens))
    if opts_end + 1 >= len(tokens):
        raise _unexpected_layout()
    ends = [*markers[1:], opts_end]
    options = [tokens[start:end] for start, end in zip(markers, ends, strict=True)]
    options = [option[: LAYA_MAX_OPTION_TOKENS + 1] for option in options]
    budget = head.max_head_tokens
    if sum(map(len, options)) + 16 > budget:  # too many or too long: shrink them evenly
        most = max(4, (budget - min(budget, 16)) // n_options)
        options = [option[:most] for option in options]
    n_options_tokens = sum(map(len, options))
    n_question_max = max(8, budget - min(budget, n_options_tokens))
    out = [tokens[0], *tokens[1 : min(head_end, 1 + n_question_max)], sep]
    positions = []
    for option in options:
        positions.append(len(out))
        out.extend(option)
    out.extend(tokens[opts_end:])
    return out, positions


def _check_one_batch(
    head: DecisionHead, prompt: list[int], markers: list[int], n_batch: int
) -> None:
    """The rows read must come from one batch (laya: the whole prompt, it has no memory)."""
    first = 0 if head.type == "laya" else markers[0]
    if len(prompt) - first > n_batch:
        raise LimitExceeded(
            413,
            "questions",
            f"the question and its options ({len(prompt) - first} tokens) are too large to "
            f"read in one batch of {n_batch} tokens (DECISION_N_BATCH)",
            error_type="token_limit_exceeded",
        )


@dataclass
class PrefixTiming:
    prefill_ms: float = 0.0
    state_cache: str = "off"  # "hit", "miss" or "off"


class StatePrefixes:
    """One request's state prefixes, each decoded once (or restored from the state cache) and
    saved, and restored into an empty context before each prompt that starts with it.

    Always restored, even just decoded: a restored sequence may lie in other cells than a
    decoded one, and llama.cpp's attention rounds by the cells' layout (score._prefill), so
    every prompt meets its prefix the same way, cached or not."""

    def __init__(self, engine: Engine, head: DecisionHead, cache: StateCache | None) -> None:
        self.engine = engine
        self.head = head
        self.cache = cache if cache is not None and cache.enabled else None
        self.saved: dict[tuple[int, ...], bytes] = {}
        self.timings: dict[tuple[int, ...], PrefixTiming] = {}

    def enter(self, prefix: list[int]) -> None:
        """An empty context holding `prefix` on sequence 0."""
        self.engine.reset()
        if not prefix:
            return
        key = tuple(prefix)
        saved = self.saved.get(key)
        if saved is None:
            saved = self.saved[key] = self._saved(prefix)
            self.engine.reset()
        self.engine.restore_sequence(0, saved)

    def _saved(self, prefix: list[int]) -> bytes:
        timing = self.timings[tuple(prefix)] = PrefixTiming()
        cache_key = self.cache.key(prefix) if self.cache is not None else None
        if self.cache is not None and cache_key is not None:
            kept = self.cache.get(cache_key)
            if kept is not None:
                timing.state_cache = "hit"
                return kept
        started = time.perf_counter()
        if self.head.reads_embeddings:  # every token is an output in this mode: n_batch chunks
            for start in range(0, len(prefix), self.engine.n_batch):
                self.engine.decode_embeddings(prefix[start : start + self.engine.n_batch], start)
        else:
            self.engine.decode_sequence(0, prefix, 0)
        saved = self.engine.save_sequence(0)
        timing.prefill_ms = (time.perf_counter() - started) * 1000
        if self.cache is not None and cache_key is not None:
            self.cache.put(cache_key, saved)
            timing.state_cache = "miss"
        return saved


def rest_batches(n_tokens: int, first: int, n_batch: int, shared: int) -> list[tuple[int, int]]:
    """llama-server's batches of a prompt (`batches`) less its first `shared` tokens, decoded
    already: the batch that holds the shared prefix's end starts after it."""
    return [
        (max(start, shared), end)
        for start, end in batches(n_tokens, first, n_batch)
        if end > shared
    ]


def batches(n_tokens: int, first: int, n_batch: int) -> list[tuple[int, int]]:
    """llama-server's batches of one prompt whose rows from `first` on are read: n_batch
    chunks, but the one that would split the rows read ends at `first`."""
    spans = []
    start = 0
    while start < n_tokens:
        end = min(start + n_batch, n_tokens)
        if start < first < end and n_tokens - start > n_batch:
            end = first
        spans.append((start, end))
        start = end
    return spans


def variant_probabilities(scores: np.ndarray, temperature: float) -> np.ndarray:
    """One variant's softmax as llama-server computes it: the float32 difference to the
    maximum, divided in double by the float32 temperature, summed in order."""
    top = scores.max()
    divisor = float(np.float32(temperature))
    # math.exp is the C library's exp, as std::exp; numpy's vectorized exp may round otherwise.
    weights = [math.exp(float(np.float32(s - top)) / divisor) for s in scores]
    total = 0.0
    for weight in weights:
        total += weight
    return np.array([weight / total for weight in weights])


def answer(
    engine: Engine, head: DecisionHead, asked: HeadQuestion, prefixes: StatePrefixes
) -> Answer:
    """Decode each prompt after its state's prefix and read the head; the answer in the
    question's option order."""
    question = asked.question
    n_options = len(question.option_ids)
    outputs = head.outputs(question.kind, n_options)
    labels = np.array(head.labels[:outputs])
    temperature = head.temperature(question.kind, n_options)
    probabilities = np.zeros(outputs)
    argmax = 0
    for variant, prompt in enumerate(asked.prompts):
        shared = asked.shared[variant]
        prefixes.enter(prompt[:shared])
        if head.reads_embeddings:
            raw = head_scores(engine, head, question.kind, prompt, asked.markers[variant], shared)
            argmax = -1  # no vocabulary is read
        else:
            *before, (start, end) = rest_batches(len(prompt), len(prompt), engine.n_batch, shared)
            for start_before, end_before in before:
                engine.decode_sequence(0, prompt[start_before:end_before], start_before)
            last = end - 1 - start
            (logits,) = engine.decode_sequence(0, prompt[start:end], start, [last]).values()
            assert isinstance(logits, np.ndarray)
            if variant == 0:
                argmax = int(np.argmax(logits))
            raw = logits[labels]
        p = variant_probabilities(raw, temperature)
        for i in range(outputs):  # the second variant shows the options reversed
            probabilities[i if variant == 0 else outputs - 1 - i] += p[i] / len(asked.prompts)
    engine.reset()
    by_key = _by_key(head, question, asked.keys, probabilities)
    in_request_order = np.array([by_key[key] for key in question.option_ids])
    with np.errstate(divide="ignore"):
        log_probabilities = np.log(in_request_order)
    scores = QuestionScores(
        readout="decision-head",  # the type: the model block's decision_type
        option_log_probs=log_probabilities,
        option_logits=log_probabilities,
        full_vocab_argmax_id=argmax,
        strategy="decision_head",
        kind=question.kind,
        head_probabilities=in_request_order,
    )
    read = labels if head.marker is None else np.full(outputs, head.marker)
    return Answer(
        scores=scores,
        labels=[engine.piece(int(token)).decode("utf-8", "replace") for token in read],
        prompt_sha256=asked.prompt_sha256,
        input_tokens=asked.tokens,
        full_vocab_argmax_token=""
        if argmax < 0
        else engine.piece(argmax).decode("utf-8", "replace"),
    )


def head_scores(
    engine: Engine,
    head: DecisionHead,
    kind: str,
    prompt: list[int],
    markers: list[int],
    shared: int = 0,
) -> np.ndarray:
    """kev's or laya's raw score of each option, as float32, from one prompt's rows; its first
    `shared` tokens are in the context already."""
    last = len(prompt) - 1
    first = 0 if head.type == "laya" else markers[0]
    spans = rest_batches(len(prompt), first, engine.n_batch, shared)
    for start, end in spans[:-1]:
        engine.decode_embeddings(prompt[start:end], start)
    start, end = spans[-1]
    read = [m - start for m in markers] + ([last - start] if head.type == "kev" else [])
    rows = engine.decode_embeddings(prompt[start:end], start, read)
    if head.type == "laya":
        result: np.ndarray = rows[:, LAYA_COLUMNS[kind]].copy()
        return result
    h = head.width // 2
    query = rows[-1, :h]
    divisor = np.sqrt(np.float32(h))
    scores = np.empty(len(markers), dtype=np.float32)
    for i, row in enumerate(rows[:-1]):
        # llama-server: `dot += q[i] * k[i]` in float, in order. Its x86-64 build (no -march)
        # rounds each product; a compiler that fuses them (GCC's default on aarch64) may
        # differ in the last bit.
        dot = np.add.accumulate(query * row[h : 2 * h], dtype=np.float32)[-1]
        scores[i] = np.float32(dot) / divisor
    return scores


def _by_key(
    head: DecisionHead, question: Question, keys: list[str], probabilities: np.ndarray
) -> dict[str, float]:
    """Each option's probability by key; lev's yes/no from its rating scale."""
    if head.type == "lev" and question.kind == "noul":
        ratings = len(probabilities) - 1
        expected = 0.0
        for rating, p in enumerate(probabilities):
            expected += p * rating / ratings
        return {"true": expected, "false": 1.0 - expected}
    return {key: float(p) for key, p in zip(keys, probabilities, strict=True)}
