"""From validated questions to option probabilities: labels, the scoring plan and the readout.

Every path decodes the state prefix as its own batch and each question suffix on a branch of
it, so a decision scored alone, beside others, or (later) from a cached prefix gives the same
numbers (llama.cpp's logits depend on how a prompt is split into batches).
"""

from __future__ import annotations

import hashlib
import json
import math
import string
import sys
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any, TypeAlias

import numpy as np

from ..contract import BUILT_IN_READOUT, Answer, Question, QuestionKind, QuestionScores
from ..model.engine import Engine, log_partition
from ..model.prefix_tree import TreeLowerBound, prefix_tree_batches, tree_nodes, tree_tokens
from ..model.tokenizer import TokenLimitExceeded
from .budget import READ_TOKEN_COST, TokenBudget
from .decoders import FIRST_BRANCH_SEQ, Decoder, SharedContextDecoder
from .letter_spellings import letter_spellings
from .prompts import CONTENT_FREE_STATE, JSON_CHOICE_CLOSE, PromptRenderer, RenderedPrompt
from .state_cache import StateCache

# How often a readout decodes each question's suffix and branches: calibrated reads them again
# after the content-free state (unless its scores are kept; the budget counts them anyway, so
# whether a request fits never depends on what other requests left behind).
PASSES = {"calibrated": 2}
# The readouts that ask for the JSON answer; they differ only in how an option's tokens add up.
JSON_CHOICE_READOUTS = ("json_choice", "json_choice_sum")


def option_labels(count: int) -> list[str]:
    """Single letters up to 26 options; beyond that two letters for all, so no label is a
    prefix of another (a prefix would inflate the shorter label's sequence probability)."""
    letters = string.ascii_uppercase
    if count <= len(letters):
        return list(letters[:count])
    return ["".join(pair) for pair in product(letters, repeat=2)][:count]


# What a calibrated question's content-free scores are kept by: its suffix, and its set of
# continuations (sorted).
ContentFreeKey: TypeAlias = tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]


@dataclass
class Reading:
    """One question suffix decoded after the state, and each option's continuation read after
    it (request order): its label, or its own words; `tree_batches` are the batches that read
    the continuations' later tokens (prefix_tree_batches). `spellings`: the letters readout's
    single-letter labels, every token that spells each (letter_spellings), summed when read."""

    suffix_tokens: list[int]
    continuations: list[list[int]]
    tree_batches: list[list[tuple[int, ...]]]
    spellings: list[np.ndarray] | None = None

    @property
    def single_tokens(self) -> bool:
        firsts = [tokens[0] for tokens in self.continuations]
        return all(len(t) == 1 for t in self.continuations) and len(set(firsts)) == len(firsts)

    @property
    def branch_tokens(self) -> int:
        return 0 if self.single_tokens else sum(map(tree_tokens, self.tree_batches))

    @property
    def tokens(self) -> int:
        return len(self.suffix_tokens) + self.branch_tokens

    @property
    def cost(self) -> int:
        """Its tokens in prompt tokens' worth of time (budget.READ_TOKEN_COST)."""
        return len(self.suffix_tokens) + READ_TOKEN_COST * self.branch_tokens


@dataclass
class QuestionPlan:
    readout: str  # the strategy, one of READOUTS
    labels: list[str]  # what is read per option: its letter label or its words
    readings: list[Reading]  # one; permuted_letters: one per rotation, in a canonical order
    prompt_sha256: str
    kind: QuestionKind = "choice"  # the question's (Question.kind)

    @property
    def suffix_tokens(self) -> list[int]:
        return self.readings[0].suffix_tokens

    @property
    def label_tokens(self) -> list[list[int]]:
        return self.readings[0].continuations

    @property
    def single_token_labels(self) -> bool:
        return self.readings[0].single_tokens

    @property
    def branch_tokens(self) -> int:
        return sum(reading.branch_tokens for reading in self.readings)

    @property
    def tokens(self) -> int:
        return sum(reading.tokens for reading in self.readings)

    @property
    def passes(self) -> int:
        return PASSES.get(self.readout, 1)

    @property
    def cost(self) -> int:
        """What the budget counts for it: every reading, on every pass."""
        return self.passes * sum(reading.cost for reading in self.readings)

    @property
    def content_free_key(self) -> ContentFreeKey | None:
        """The calibrated readout's content-free scores depend on the question's suffix and its
        set of continuations only (not their order), so a reordered question shares them."""
        if self.readout != "calibrated":
            return None
        reading = self.readings[0]
        return (tuple(reading.suffix_tokens), tuple(sorted(map(tuple, reading.continuations))))


@dataclass
class ScoringPlan:
    prefix_tokens: list[int]
    questions: list[QuestionPlan]
    content_free_prefix: list[int] | None = None  # the calibrated readout's state "N/A"

    @property
    def content_free_tokens(self) -> int:
        """The calibrated readout's second pass at most: the content-free state, then each
        calibrated question again (less where its scores are kept)."""
        if self.content_free_prefix is None:
            return 0
        again = sum(q.tokens for q in self.questions if q.readout == "calibrated")
        return len(self.content_free_prefix) + again

    @property
    def cost(self) -> int:
        """What the request's budget counts for this state (TokenBudget)."""
        content_free = len(self.content_free_prefix or [])
        return len(self.prefix_tokens) + content_free + sum(q.cost for q in self.questions)

    @property
    def total_tokens(self) -> int:
        """The prefix counts once; each question adds its suffix and its label branches (the
        request's own tokens: content_free_tokens are the calibrated readout's)."""
        return len(self.prefix_tokens) + sum(q.tokens for q in self.questions)

    def input_tokens(self, index: int) -> int:
        return len(self.prefix_tokens) + sum(
            len(r.suffix_tokens) for r in self.questions[index].readings
        )

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
            for index, (question, question_scores) in enumerate(
                zip(self.questions, scores, strict=False)
            )
        ]


def json_string_body(text: str) -> str:
    """`text` as JSON writes it between a string's quotes (non-ASCII kept, as models write it)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _option_words(question: Question, with_descriptions: bool) -> list[str]:
    words = question.answer_words or question.option_ids
    if not with_descriptions:
        return list(words)
    return [f"{w}: {d}" if d else w for w, d in zip(words, question.descriptions, strict=False)]


def _plan_question(
    renderer: PromptRenderer,
    state: Any,
    question: Question,
    readout: str,
    budget: TokenBudget,
) -> QuestionPlan:
    """Each piece is tokenized against what is left of the budget and spent before the next:
    a request over it is refused after work bounded by its limit."""
    engine = renderer.engine
    passes = PASSES.get(readout, 1)

    def suffix_tokens(prompt: RenderedPrompt) -> list[int]:
        tokens = renderer.tokens(prompt.suffix, starts_prompt=False, limit=budget.left // passes)
        budget.spend(passes * len(tokens))
        return tokens

    at_least = TreeLowerBound(engine.n_batch)

    def continuation(words: str, opened: bool = False) -> list[int]:
        # Each option's later tokens are decoded on every pass: the tree of those read so far
        # refuses a request before the rest are tokenized.
        afford = budget.left // (passes * READ_TOKEN_COST)
        tokens = renderer.label_tokens(words, limit=afford + 1, opened=opened)
        at_least.add(tuple(tokens[:-1]))
        if at_least.tokens > afford:
            raise TokenLimitExceeded(budget.limit)
        return tokens

    def reading(
        suffix: list[int],
        continuations: list[list[int]],
        spellings: list[np.ndarray] | None = None,
    ) -> Reading:
        batches = prefix_tree_batches(
            continuations, engine.n_batch, engine.n_seq_max - FIRST_BRANCH_SEQ
        )
        read = Reading(suffix, continuations, batches, spellings)
        budget.spend(passes * READ_TOKEN_COST * read.branch_tokens)
        return read

    n = len(question.option_ids)
    if readout in ("letters", "permuted_letters"):
        labels = option_labels(n)
        label_tokens = [renderer.label_tokens(label) for label in labels]
        spellings = _spellings(engine, labels, label_tokens) if readout == "letters" else None
        options = list(zip(question.option_ids, question.descriptions, strict=False))
        # Rotation r lists option (r + p) % n at position p; the request's own order is r = 0.
        rotations = [0] if readout == "letters" else list(range(n))
        # Sorted by the listed ids: a rotated request reads the same rotations in the same
        # order, so their average adds the same numbers in the same order (bit-identical).
        rotations.sort(key=lambda r: [question.option_ids[(r + p) % n] for p in range(n)])
        readings: list[Reading] = []
        prompts: list[RenderedPrompt] = []
        # Each rotation is spent as it is tokenized: those past the budget never are.
        for r in rotations:
            listed = [(labels[p], *options[(r + p) % n]) for p in range(n)]
            prompt = renderer.decision(state, question.question, listed)
            prompts.append(prompt)
            # Option i sits at position (i - r) % n and is read through that position's label.
            continuations = [label_tokens[(i - r) % n] for i in range(n)]
            readings.append(reading(suffix_tokens(prompt), continuations, spellings))
        return QuestionPlan(readout, labels, readings, prompts[0].sha256, question.kind)
    if readout in JSON_CHOICE_READOUTS:
        words = _option_words(question, with_descriptions=False)
        # Listed and read as JSON writes each name inside its string: a raw `"` would end the
        # name early (`Billing"Shipping` read inside `Billing`'s mass), a raw `\` escape the
        # closing quote. Names without either read as before.
        spelled = {w: json_string_body(w) for w in words}
        candidates = sorted(
            ((spelled[w], about) for w, about in zip(words, question.descriptions, strict=False)),
            key=lambda pair: pair[0],
        )
        prompt = renderer.json_choice(state, question.question, candidates)
        suffix = suffix_tokens(prompt)
        continuations = [continuation(spelled[w] + JSON_CHOICE_CLOSE, opened=True) for w in words]
        return QuestionPlan(
            readout, words, [reading(suffix, continuations)], prompt.sha256, question.kind
        )
    words = _option_words(question, with_descriptions=readout == "option_text_desc")
    prompt = renderer.cloze(state, question.question)
    suffix = suffix_tokens(prompt)
    continuations = [continuation(w) for w in words]
    return QuestionPlan(
        readout, words, [reading(suffix, continuations)], prompt.sha256, question.kind
    )


def _spellings(
    engine: Engine, labels: list[str], label_tokens: list[list[int]]
) -> list[np.ndarray] | None:
    """Per label (the letters readout lists option i as label i), every token that spells it;
    None where labels are two letters (past 26 options: read as whole sequences, as before) or
    a label's own token is not among its spellings (it is one token spelling it everywhere
    measured)."""
    if any(len(label) != 1 for label in labels):
        return None
    index = letter_spellings(engine)
    spellings = [index.of(label) for label in labels]
    for tokens, spelled in zip(label_tokens, spellings, strict=False):
        if len(tokens) != 1 or tokens[0] not in spelled:
            return None
    return spellings


class QuestionsOverBudget(TokenLimitExceeded):
    """Every question fits beside the state alone, but not all of them together."""


def build_plan(
    renderer: PromptRenderer,
    state: Any,
    questions: Sequence[Question],
    budget: TokenBudget | None = None,
    *,
    default_readout: str = BUILT_IN_READOUT,
    unfit: list[int] | None = None,
) -> ScoringPlan:
    """Tokens of every question's prompt, each pass a readout makes spent from `budget` (None:
    no limit) as soon as it is known; TokenLimitExceeded at the first piece past it. Given
    `unfit`, a question that cannot fit beside the state alone is left out of the plan and its
    index appended there, instead of stopping the whole plan."""
    budget = budget or TokenBudget(sys.maxsize)
    prefix_tokens = renderer.tokens(
        renderer.cloze(state, "").prefix, starts_prompt=True, limit=budget.left
    )
    budget.spend(len(prefix_tokens))
    readouts = [q.readout or default_readout for q in questions]
    content_free = None
    if "calibrated" in readouts:
        content_free = renderer.tokens(
            renderer.cloze(CONTENT_FREE_STATE, "").prefix, starts_prompt=True
        )
        budget.spend(len(content_free))
    if unfit is None:
        plans = [
            _plan_question(renderer, state, q, readout, budget)
            for q, readout in zip(questions, readouts, strict=False)
        ]
        return ScoringPlan(prefix_tokens, plans, content_free)
    plans = []
    for index, (q, readout) in enumerate(zip(questions, readouts, strict=False)):
        # What the question would cost asked alone, beside the state (and its N/A pass).
        alone = TokenBudget(budget.limit - len(prefix_tokens) - len(content_free or ()))
        try:
            plan = _plan_question(renderer, state, q, readout, alone)
        except TokenLimitExceeded:
            unfit.append(index)
            continue
        if alone.spent > budget.left:  # each fits alone, not all of them together
            raise QuestionsOverBudget(budget.limit)
        budget.spend(alone.spent)
        plans.append(plan)
    return ScoringPlan(prefix_tokens, plans, content_free)


# The LRU's own slot, the entry's tuple and the array's header, per entry (CPython 3.11).
ENTRY_OVERHEAD_BYTES = 256


class ContentFreeScores:
    """The calibrated readout's content-free scores, per question and set of options: an LRU
    bounded in bytes (a question's are computed once, then cost nothing). Batched decisions
    score on threads of their own, so each call holds a lock.

    Stored compactly: the key (the question's suffix and continuations, thousands of token ids
    for a 255-option question) as its SHA-256, each continuation as int32 bytes, the scores as
    one float64 array; `nbytes` counts what that holds, and an entry over the whole bound is
    not kept."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, tuple[list[bytes], np.ndarray, int]] = OrderedDict()
        self.nbytes = 0
        self.hits = self.misses = 0
        self._lock = threading.Lock()

    @staticmethod
    def _digest(key: ContentFreeKey) -> bytes:
        return hashlib.sha256(repr(key).encode()).digest()

    def get(self, key: ContentFreeKey) -> dict[tuple[int, ...], float] | None:
        digest = self._digest(key)
        with self._lock:
            found = self._entries.get(digest)
            if found is None:
                return None
            self._entries.move_to_end(digest)
        continuations, scores, _ = found
        return {
            tuple(np.frombuffer(c, dtype=np.int32).tolist()): float(s)
            for c, s in zip(continuations, scores, strict=True)
        }

    def put(self, key: ContentFreeKey, scores: dict[tuple[int, ...], float]) -> None:
        digest = self._digest(key)
        continuations = [np.asarray(c, dtype=np.int32).tobytes() for c in scores]
        values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
        size = (
            sys.getsizeof(digest)
            + sys.getsizeof(continuations)
            + sum(map(sys.getsizeof, continuations))
            + values.nbytes
            + ENTRY_OVERHEAD_BYTES
        )
        with self._lock:
            if digest in self._entries:
                self.nbytes -= self._entries.pop(digest)[2]
            if size > self.max_bytes:
                return
            self._entries[digest] = (continuations, values, size)
            self.nbytes += size
            while self.nbytes > self.max_bytes:
                self.nbytes -= self._entries.popitem(last=False)[1][2]

    def as_dict(self) -> dict[str, int]:
        return {
            "entries": len(self._entries),
            "bytes": self.nbytes,
            "hits": self.hits,
            "misses": self.misses,
        }


@dataclass
class ScoringTiming:
    prefill_ms: float = 0.0
    branches_ms: float = 0.0
    state_cache: str = "off"  # "hit", "miss" or "off"


def _log_softmax(logits: np.ndarray, tokens: np.ndarray | list[int]) -> np.ndarray:
    """Full-vocabulary log-probabilities of `tokens` only (the vocabulary may be 262k wide)."""
    return logits[tokens].astype(np.float64) - log_partition(logits)


def score(
    model: Engine | Decoder,
    plan: ScoringPlan,
    *,
    cache: StateCache | None = None,
    content_free: ContentFreeScores | None = None,
    force_sequence: bool = False,
) -> tuple[list[QuestionScores], ScoringTiming]:
    """Prefill the state once (or restore it), branch every question from it, read the labels.
    Calibrated questions whose content-free scores are not kept yet get them from a second pass
    on the content-free state, decoded the same way. `model`: the engine's own context, one
    request at a time, or a decoder of its own (decoders.py)."""
    decoder = SharedContextDecoder(model) if isinstance(model, Engine) else model
    timing = ScoringTiming()
    decoder.begin()
    try:
        started = time.perf_counter()
        _prefill(decoder, plan.prefix_tokens, cache, timing)
        timing.prefill_ms = (time.perf_counter() - started) * 1000

        started = time.perf_counter()
        reads = [
            [_read(decoder, reading, force_sequence) for reading in question.readings]
            for question in plan.questions
        ]
        neutral = _content_free_scores(decoder, plan, cache, content_free or ContentFreeScores())
        results = [
            _combine(question, question_reads, neutral.get(question.content_free_key))
            for question, question_reads in zip(plan.questions, reads, strict=False)
        ]
        timing.branches_ms = (time.perf_counter() - started) * 1000
        return results, timing
    finally:
        decoder.end()


@dataclass
class _Read:
    """One reading's raw numbers, per option in request order."""

    log_probs: np.ndarray  # full-vocabulary log-probability of each whole continuation
    first_logits: np.ndarray  # raw last-position logit of each continuation's first token
    lengths: np.ndarray  # tokens per continuation
    single_tokens: bool  # every continuation one distinct token (read in one pass)
    argmax: int
    spelled: bool = False  # log_probs: each label's mass summed over its spellings


def _read(decoder: Decoder, reading: Reading, force_sequence: bool) -> _Read:
    """Decode one suffix after the prefix and read its continuations.

    Each suffix is its own batch: decoded beside other suffixes, llama.cpp's logits move
    (measured up to ~1.0), so an answer would depend on the other questions. Its KV cells are
    freed afterwards, so the next suffix lands in the same cells, right after the prefix, as if
    asked alone (left behind others' cells, logits moved 0.40 on the third of three).
    """
    last_logits = decoder.question(reading.suffix_tokens)
    firsts = np.array([tokens[0] for tokens in reading.continuations])
    if reading.spellings is not None and not force_sequence:
        log_probs = _spelled_log_probs(last_logits, reading.spellings)
        decoder.end_question()
        return _Read(
            log_probs=log_probs,
            first_logits=log_probs,
            lengths=np.ones(len(firsts)),
            single_tokens=True,
            argmax=int(np.argmax(last_logits)),
            spelled=True,
        )
    log_probs = _log_softmax(last_logits, firsts)
    single = reading.single_tokens and not force_sequence
    if not single:
        _add_branch_log_probs(decoder, reading, log_probs)
    decoder.end_question()
    return _Read(
        log_probs=log_probs,
        first_logits=last_logits[firsts].astype(np.float64),
        lengths=np.array([len(t) for t in reading.continuations], dtype=np.float64),
        single_tokens=single,
        argmax=int(np.argmax(last_logits)),
    )


def _spelled_log_probs(logits: np.ndarray, spellings: list[np.ndarray]) -> np.ndarray:
    """Each label's log-probability summed over the tokens that spell it: exactly rounded sums
    (fsum) of one log-softmax, so a label's figure depends on nothing but the logits."""
    every = _log_softmax(logits, np.concatenate(spellings))
    ends = np.cumsum([len(tokens) for tokens in spellings])
    return np.array(
        [math.log(math.fsum(np.exp(part))) for part in np.split(every, ends[:-1])],
        dtype=np.float64,
    )


def _add_branch_log_probs(decoder: Decoder, reading: Reading, log_probs: np.ndarray) -> None:
    """Each multi-token continuation's later tokens, read off the question's sequence as a
    prefix tree: options that begin alike (`team_billing`, `team_support`; `option_1` ...
    `option_255`) share their common tokens, each distinct prefix decoded and read once.

    The batches are the plan's `tree_batches`, sorted by tokens, not in the request's order:
    llama.cpp rounds by batch composition and KV-cell layout, and the same branches batched in
    reverse order moved scores by up to 0.5 (research/readout_study/results/readout_study.md), so
    any option order decodes the same batches and gives bit-identical scores.
    """
    continuations = reading.continuations
    options_of: defaultdict[tuple[int, ...], list[int]] = defaultdict(list)
    for option, tokens in enumerate(continuations):
        if len(tokens) > 1:
            options_of[tuple(tokens[:-1])].append(option)

    for paths in reading.tree_batches:
        nodes, through = tree_nodes(paths)
        # The tokens read after each node: what follows it on each path through it.
        following: list[set[int]] = [set() for _ in nodes]
        for path, path_nodes in zip(paths, through, strict=False):
            for node, token in zip(path_nodes, path[1:], strict=False):
                following[node].add(token)
            following[path_nodes[-1]].update(continuations[o][-1] for o in options_of[path])

        def next_token_log_probs(node: int, logits: np.ndarray) -> dict[int, float]:
            # A few numbers per row, read while llama.cpp holds the row: kept rows would cost
            # 1 MiB each, GiBs for a question of long options.
            tokens = sorted(following[node])  # noqa: B023 - called before the loop moves on
            return dict(zip(tokens, _log_softmax(logits, tokens), strict=False))

        read = decoder.paths(nodes, len(paths), next_token_log_probs)
        for path, path_nodes in zip(paths, through, strict=False):
            for option in options_of[path]:
                tokens = continuations[option]
                for node, token in zip(path_nodes, tokens[1:], strict=False):
                    log_probs[option] += read[node][token]


def _content_free_scores(
    decoder: Decoder, plan: ScoringPlan, cache: StateCache | None, kept: ContentFreeScores
) -> dict[ContentFreeKey | None, np.ndarray]:
    """Per calibrated question (its content_free_key; None, a question without, is never a
    key): the per-token mean log-probabilities of its continuations against the content-free
    state, in the question's option order."""
    wanted = [(key, q) for q in plan.questions if (key := q.content_free_key) is not None]
    missing: dict[ContentFreeKey, QuestionPlan] = {}
    # What this request read or computed: `kept` may hold none of it (a 0 byte bound).
    scores: dict[ContentFreeKey, dict[tuple[int, ...], float]] = {}
    for key, question in wanted:
        found = kept.get(key)
        if found is None:
            missing.setdefault(key, question)
        else:
            scores[key] = found
    if missing:
        kept.misses += len(missing)
        decoder.begin()
        _prefill(decoder, plan.content_free_prefix or [], cache, ScoringTiming())
        for key, question in missing.items():
            read = _read(decoder, question.readings[0], force_sequence=False)
            means = read.log_probs / read.lengths
            read_for = map(tuple, question.readings[0].continuations)
            scores[key] = dict(zip(read_for, means, strict=False))
            kept.put(key, scores[key])
    kept.hits += len(wanted) - len(missing)
    out: dict[ContentFreeKey | None, np.ndarray] = {}
    for key, question in wanted:
        found = kept.get(key)  # read again: the LRU order is the order of use
        by_continuation = found if found is not None else scores[key]
        continuations = question.readings[0].continuations
        out[key] = np.array([by_continuation[tuple(c)] for c in continuations])
    return out


def _restricted_log_softmax(values: np.ndarray) -> np.ndarray:
    shifted: np.ndarray = values - values.max()
    return shifted - math.log(math.fsum(np.exp(shifted)))  # exact: the same in any order


def _combine(
    question: QuestionPlan, reads: list[_Read], content_free: np.ndarray | None
) -> QuestionScores:
    """The strategy's option scores from its readings."""
    first = reads[0]
    if question.readout == "letters":
        mode = "single-token" if first.single_tokens else "label-sequence"
        return QuestionScores(
            # A spelled read's first_logits are its summed log-probabilities.
            readout="letter-spellings" if first.spelled else mode,
            option_log_probs=first.log_probs,
            option_logits=first.first_logits if first.single_tokens else first.log_probs,
            full_vocab_argmax_id=first.argmax,
            strategy="letters",
            kind=question.kind,
        )
    if question.readout == "permuted_letters":
        # Each rotation's distribution over the options (as log-probabilities), averaged in the
        # plan's canonical rotation order.
        total = np.zeros_like(first.log_probs)
        log_probs = np.zeros_like(first.log_probs)
        for read in reads:
            scores = read.first_logits if read.single_tokens else read.log_probs
            total += _restricted_log_softmax(scores)
            log_probs += read.log_probs
        return QuestionScores(
            readout="rotation-mean",
            option_log_probs=log_probs / len(reads),
            option_logits=total / len(reads),
            full_vocab_argmax_id=first.argmax,
            strategy="permuted_letters",
            kind=question.kind,
        )
    means = first.log_probs / first.lengths
    if question.readout == "json_choice_sum":
        # The chance the model writes the whole name: a long name's copied tail cannot outweigh
        # the token where the model chose it, as it can in a mean per token.
        return QuestionScores(
            readout="text-sum",
            option_log_probs=first.log_probs,
            option_logits=first.log_probs,
            full_vocab_argmax_id=first.argmax,
            strategy=question.readout,
            option_mean_log_probs=means,
            kind=question.kind,
        )
    calibrated = content_free is not None
    return QuestionScores(
        readout="text-mean-minus-content-free" if calibrated else "text-mean",
        option_log_probs=first.log_probs,
        option_logits=means - content_free if calibrated else means,
        full_vocab_argmax_id=first.argmax,
        strategy=question.readout,
        option_mean_log_probs=means,
        content_free=content_free,
        kind=question.kind,
    )


def _prefill(
    decoder: Decoder, prefix_tokens: list[int], cache: StateCache | None, timing: ScoringTiming
) -> None:
    """The state prefix, always read back from a saved state.

    Decoded fresh, a prefix fills KV cells 0..n-1; restored, it is compacted (llama.cpp saves
    only the cells a sliding-window layer can still see, Gemma 3: the last 512). llama.cpp's CPU
    attention kernels round differently by cell layout once a batch has 64+ tokens or the cache
    512+ cells (measured: 0.9 in a raw logit), so every path, cache or not, hit or miss,
    restores the saved prefix and the question always meets the same layout.
    """
    kept = cache if cache is not None and cache.enabled else None
    key = kept.key(prefix_tokens) if kept is not None else None
    saved = kept.get(key) if kept is not None and key is not None else None
    if saved is None:
        saved = decoder.prefill(prefix_tokens)
        if kept is not None and key is not None:
            kept.put(key, saved)
            timing.state_cache = "miss"
    else:
        timing.state_cache = "hit"
    decoder.use_state(saved)
