"""From validated questions to option probabilities: labels, the scoring plan and the readout.

Every path decodes the state prefix as its own batch and each question suffix on a branch of
it, so a decision scored alone, beside others, or (later) from a cached prefix gives the same
numbers (llama.cpp's logits depend on how a prompt is split into batches).
"""

from __future__ import annotations

import string
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from .contract import Answer, Question, QuestionScores
from .engine import Branch, Engine
from .prompts import PromptRenderer
from .state_cache import StateCache

PREFIX_SEQ = 0
QUESTION_SEQ = 1  # every question in turn; its label branches take the sequences after it


def option_labels(count: int) -> list[str]:
    """Single letters up to 26 options; beyond that two letters for all, so no label is a
    prefix of another (a prefix would inflate the shorter label's sequence probability)."""
    letters = string.ascii_uppercase
    if count <= len(letters):
        return list(letters[:count])
    return ["".join(pair) for pair in product(letters, repeat=2)][:count]


@dataclass
class QuestionPlan:
    labels: list[str]
    label_tokens: list[list[int]]
    suffix_tokens: list[int]
    prompt_sha256: str

    @property
    def single_token_labels(self) -> bool:
        firsts = [tokens[0] for tokens in self.label_tokens]
        return all(len(t) == 1 for t in self.label_tokens) and len(set(firsts)) == len(firsts)

    @property
    def branch_tokens(self) -> int:
        return 0 if self.single_token_labels else sum(len(t) - 1 for t in self.label_tokens)


@dataclass
class ScoringPlan:
    prefix_tokens: list[int]
    questions: list[QuestionPlan]

    @property
    def total_tokens(self) -> int:
        """The prefix counts once; each question adds its suffix and its label branches."""
        return len(self.prefix_tokens) + sum(
            len(q.suffix_tokens) + q.branch_tokens for q in self.questions
        )

    def input_tokens(self, index: int) -> int:
        return len(self.prefix_tokens) + len(self.questions[index].suffix_tokens)

    def answers(self, scores: list[QuestionScores], engine: Engine) -> list[Answer]:
        """The scores with what the model read; tokens end here, as counts and text."""
        return [
            Answer(
                scores=question_scores,
                labels=question.labels,
                prompt_sha256=question.prompt_sha256,
                input_tokens=self.input_tokens(index),
                full_vocab_argmax_token=engine.piece(question_scores.full_vocab_argmax_id).decode(
                    "utf-8", "replace"
                ),
            )
            for index, (question, question_scores) in enumerate(zip(self.questions, scores))
        ]


def build_plan(
    renderer: PromptRenderer, state: Any, questions: Sequence[Question], limit: int | None = None
) -> ScoringPlan:
    """Tokens of every question's prompt; a piece cheaply proved past `limit` stops it early."""
    plans: list[QuestionPlan] = []
    prefix_tokens: list[int] | None = None
    for question in questions:
        labels = option_labels(len(question.option_ids))
        prompt = renderer.decision(
            state, question.question, list(zip(labels, question.option_ids, question.descriptions))
        )
        if prefix_tokens is None:
            prefix_tokens = renderer.tokens(prompt.prefix, starts_prompt=True, limit=limit)
        plans.append(
            QuestionPlan(
                labels=labels,
                label_tokens=[renderer.label_tokens(label) for label in labels],
                suffix_tokens=renderer.tokens(prompt.suffix, starts_prompt=False, limit=limit),
                prompt_sha256=prompt.sha256,
            )
        )
    return ScoringPlan(prefix_tokens=prefix_tokens or [], questions=plans)


@dataclass
class ScoringTiming:
    prefill_ms: float = 0.0
    branches_ms: float = 0.0
    state_cache: str = "off"  # "hit", "miss" or "off"


def _log_softmax(logits: np.ndarray, tokens: np.ndarray | list[int]) -> np.ndarray:
    """Full-vocabulary log-probabilities of `tokens` only (the vocabulary may be 262k wide)."""
    peak = float(logits.max())
    log_total = peak + float(np.log(np.exp(logits - peak, dtype=np.float64).sum()))
    return logits[tokens].astype(np.float64) - log_total


def score(
    engine: Engine,
    plan: ScoringPlan,
    *,
    cache: StateCache | None = None,
    force_sequence: bool = False,
) -> tuple[list[QuestionScores], ScoringTiming]:
    """Prefill the state once (or restore it), branch every question from it, read the labels."""
    timing = ScoringTiming()
    engine.reset()
    try:
        started = time.perf_counter()
        _prefill(engine, plan.prefix_tokens, cache, timing)
        timing.prefill_ms = (time.perf_counter() - started) * 1000

        started = time.perf_counter()
        results = []
        for question in plan.questions:
            # Each suffix is its own batch: decoded beside other suffixes, llama.cpp's logits
            # move (measured up to ~1.0), so an answer would depend on the other questions.
            last_position = len(question.suffix_tokens) - 1
            branch = Branch(
                tokens=question.suffix_tokens, parent=PREFIX_SEQ, logit_positions=[last_position]
            )
            (logits,) = engine.decode_branches([branch], first_seq_id=QUESTION_SEQ)
            results.append(
                _read_question(
                    engine,
                    question,
                    logits[last_position],
                    QUESTION_SEQ,
                    first_free_seq=QUESTION_SEQ + 1,
                    force_sequence=force_sequence,
                )
            )
            # Free the question's KV cells before the next one: llama.cpp then places the next
            # suffix in the same cells, right after the prefix, as if it were asked alone.
            # Left behind other questions' cells, a suffix lands elsewhere in the cache and its
            # logits move (measured: 0.40 on the third of three questions).
            engine.drop_sequence(QUESTION_SEQ)
        timing.branches_ms = (time.perf_counter() - started) * 1000
        return results, timing
    finally:
        engine.reset()


def _prefill(
    engine: Engine, prefix_tokens: list[int], cache: StateCache | None, timing: ScoringTiming
) -> None:
    """The state prefix on sequence 0, always read back from a saved state.

    Decoded fresh, a prefix fills KV cells 0..n-1; restored, it is compacted (llama.cpp saves
    only the cells a sliding-window layer can still see, Gemma 3: the last 512). llama.cpp's CPU
    attention kernels round differently by cell layout once a batch has 64+ tokens or the cache
    512+ cells (measured: 0.9 in a raw logit), so every path, cache or not, hit or miss,
    restores the saved prefix and the question always meets the same layout.
    """
    key = cache.key(prefix_tokens) if cache is not None and cache.enabled else None
    saved = cache.get(key) if key is not None else None
    if saved is None:
        engine.decode_sequence(PREFIX_SEQ, prefix_tokens, start=0)
        saved = engine.save_sequence(PREFIX_SEQ)
        if key is not None:
            cache.put(key, saved)
            timing.state_cache = "miss"
    else:
        timing.state_cache = "hit"
    engine.reset()
    engine.restore_sequence(PREFIX_SEQ, saved)


def _read_question(
    engine: Engine,
    question: QuestionPlan,
    last_logits: np.ndarray,
    question_seq: int,
    *,
    first_free_seq: int,
    force_sequence: bool,
) -> QuestionScores:
    firsts = np.array([tokens[0] for tokens in question.label_tokens])
    first_log_probs = _log_softmax(last_logits, firsts)
    argmax = int(np.argmax(last_logits))
    if question.single_token_labels and not force_sequence:
        return QuestionScores(
            readout="single-token",
            option_log_probs=first_log_probs,
            option_logits=last_logits[firsts].astype(np.float64),
            full_vocab_argmax_id=argmax,
        )
    # Multi-token labels: log p(label) = sum of each label token's log-probability, the later
    # tokens read from one branch per option off the question's sequence.
    log_probs = first_log_probs.copy()
    multi = [i for i, tokens in enumerate(question.label_tokens) if len(tokens) > 1]
    capacity = engine.n_seq_max - first_free_seq
    for chunk_start in range(0, len(multi), capacity):
        chunk = multi[chunk_start : chunk_start + capacity]
        branches = [
            Branch(
                tokens=question.label_tokens[i][:-1],
                parent=question_seq,
                logit_positions=range(len(question.label_tokens[i]) - 1),
            )
            for i in chunk
        ]
        branch_logits = engine.decode_branches(branches, first_seq_id=first_free_seq)
        for option, logits in zip(chunk, branch_logits):
            tokens = question.label_tokens[option]
            for position, token in enumerate(tokens[1:]):
                log_probs[option] += _log_softmax(logits[position], [token])[0]
        for offset in range(len(chunk)):
            engine.drop_sequence(first_free_seq + offset)
    return QuestionScores(
        readout="label-sequence",
        option_log_probs=log_probs,
        option_logits=log_probs,
        full_vocab_argmax_id=argmax,
    )
