"""What the model service takes and returns: questions about a state, chats, their results and
the model's identity. No llama.cpp here: the wire formats import this module, never the engine.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from . import sampling
from .calibration import BUILT_IN_READOUT, READOUTS, Calibration, QuestionKind, ReadoutName
from .deadline import Deadline

# The formats name readouts and kinds from here.
__all__ = ["BUILT_IN_READOUT", "READOUTS", "QuestionKind", "ReadoutName"]

MAX_OPTIONS = 255
# Below this allowed_token_mass a letters answer is not called confident (low_allowed_mass):
# the model then more likely writes something other than a label than any label, so the
# probabilities are a distribution given an event the model itself thinks unlikely. Half is
# where that flips; letter readouts of instruction-tuned models measured far above it when
# they follow the prompt (research/letter_spellings).
MIN_CONFIDENT_MASS = 0.5
# The most items any list of a request may hold, checked while it is validated (before its
# items are, past the cap), so a body of a million empty objects costs a thousand checks:
# DECISION_MAX_DECISIONS' own ceiling, and a conversation's longest. The served bound on
# questions is the setting, checked after.
MAX_REQUEST_ITEMS = 1024

# The deadline past which no model work a caller awaits may start, where the caller bounds
# several calls at once (a JSON Lines body's time bound): scoring stops there too, between
# batches, not only the coroutine awaiting it. None: each call's own deadline alone.
WORK_DEADLINE: ContextVar[Deadline | None] = ContextVar("work_deadline", default=None)
# Whether the client of the request being answered has gone (the HTTP layer's check), for model
# work that can stop early: a batched decision's remaining rounds. None: never asked.
CLIENT_GONE: ContextVar[Callable[[], Awaitable[bool]] | None] = ContextVar(
    "client_gone", default=None
)


@dataclass(frozen=True)
class Question:
    """One question about a state, in the wire-format-neutral shape."""

    question: str
    option_ids: list[str]
    descriptions: list[str | None]
    readout: str | None = None  # one of READOUTS; None: the model's own
    # How prose names each option, where it is not its id (a yes/no question's true/false are
    # "yes"/"no"); the option-text readouts read these words.
    answer_words: list[str] | None = None
    # The question's name in its request (System One's question id), where the format has one:
    # a trained decision model's prompt may show it.
    name: str | None = None
    # The instructions and each description as the request sent them, where the format takes
    # JSON as well as text (System One): `question` and `descriptions` hold JSON as its text,
    # and a trained decision model's template is given the JSON itself, as llama-server gives
    # it (scoring/trained_head.py). None: what `question` and `descriptions` hold was sent.
    question_value: Any = None
    description_values: list[Any] | None = None

    @property
    def kind(self) -> QuestionKind:
        return question_kind(self.option_ids)


def question_kind(option_ids: Sequence[str]) -> QuestionKind:
    """What a question asks, read from its options whatever the wire format: yes or no
    (`true` and `false`: System One's noul, an OpenAI predicate), a level (`0` ... `n-1` in
    order: a score), or one of several names (a choice)."""
    if sorted(option_ids) == ["false", "true"]:
        return "noul"
    if list(option_ids) == [str(level) for level in range(len(option_ids))]:
        return "score"
    return "choice"


@dataclass(frozen=True)
class StateQuestion:
    """A question and the state it is asked about (a string, or JSON to render)."""

    state: Any
    question: Question


@dataclass
class QuestionScores:
    readout: str  # how it was read: "single-token", "label-sequence", "text-mean", ...
    option_log_probs: np.ndarray  # full-vocabulary log-probability of each whole label
    option_logits: np.ndarray  # what the softmax is taken over (raw logits or log-probs)
    full_vocab_argmax_id: int
    strategy: str = BUILT_IN_READOUT  # the readout strategy, one of READOUTS
    # option_text family: log-probability per token of each continuation, and (calibrated) the
    # same against the content-free state, which option_logits has subtracted.
    option_mean_log_probs: np.ndarray | None = None
    content_free: np.ndarray | None = None
    kind: QuestionKind = "choice"  # the question's (Question.kind): its temperature may be its own
    # A trained decision head's answer, its own temperature applied (scoring/trained_head.py):
    # the probabilities as the model computes them, which no calibration changes.
    head_probabilities: np.ndarray | None = None

    def probabilities(self, temperature: float = 1.0) -> np.ndarray:
        if self.head_probabilities is not None:
            return self.head_probabilities
        # Sums exactly rounded (fsum): a sum in request order rounds by that order, so reordered
        # options would get answers an ulp apart.
        scaled = self.option_logits / temperature
        scaled = scaled - scaled.max()
        weights = np.exp(scaled)
        probabilities: np.ndarray = weights / math.fsum(weights)  # numpy's stubs: Any
        return probabilities

    @property
    def allowed_token_mass(self) -> float:
        return math.fsum(np.exp(self.option_log_probs))

    @property
    def low_allowed_mass(self) -> bool:
        """A letters answer whose labels hold under MIN_CONFIDENT_MASS of the next token's
        probability. Other readouts read words, whose mass is small by nature: never flagged."""
        return self.strategy == "letters" and self.allowed_token_mass < MIN_CONFIDENT_MASS


@dataclass(frozen=True)
class Verdict:
    """What the probabilities decide: the top option (None when the caller's minimum
    confidence is not reached: an abstention, the probabilities still answered), its
    probability and its margin over the second."""

    top: int | None
    top_probability: float
    margin: float
    abstained: bool

    @classmethod
    def of(cls, probabilities: np.ndarray, min_confidence: float | None = None) -> Verdict:
        ranked = np.sort(probabilities)[::-1]
        top = float(ranked[0])
        margin = top - float(ranked[1]) if len(ranked) > 1 else top
        abstained = min_confidence is not None and top < min_confidence
        best = None if abstained else int(np.argmax(probabilities))
        return cls(best, top, margin, abstained)


@dataclass(frozen=True)
class Answer:
    """One question's result: the option scores and what the model read, as text and counts."""

    scores: QuestionScores
    labels: list[str]
    prompt_sha256: str
    input_tokens: int  # the state prefix and this question's suffix
    full_vocab_argmax_token: str  # the model's unrestricted next token, decoded


@dataclass(frozen=True)
class Scored:
    """A batch's answers in request order; each question's state group gives its timing."""

    answers: list[Answer | None]  # None: refused, with `score(..., refuse_unfit=True)` only
    timings: list[dict[str, Any]]  # per question: the timing of its state's group
    input_tokens: int
    timing: dict[str, Any]  # the whole request's

    def every_answer(self) -> list[Answer]:
        """`answers` of a batch scored without `refuse_unfit`, where no question is refused."""
        answers = [answer for answer in self.answers if answer is not None]
        if len(answers) < len(self.answers):
            raise ValueError("a question was refused: only refuse_unfit=True refuses one")
        return answers


@dataclass(frozen=True)
class Chat:
    """A conversation to continue, and how to sample the answer (llama-server's defaults)."""

    messages: list[tuple[str, str]]  # (role, text)
    max_tokens: int | None  # None: the configured cap
    temperature: float = sampling.TEMPERATURE
    top_p: float = sampling.TOP_P
    top_k: int = sampling.TOP_K
    min_p: float = sampling.MIN_P
    seed: int | None = None
    stop: list[str] | None = None
    top_logprobs: int | None = None  # None: no log-probabilities; N: each token's and N others


@dataclass(frozen=True)
class TokenChoice:
    """A token as text and bytes (a token may hold part of a UTF-8 character) and its
    full-vocabulary log-probability."""

    text: str
    utf8: bytes
    logprob: float


@dataclass(frozen=True)
class SampledToken:
    """One generated token's log-probability and the likeliest tokens at its step."""

    token: TokenChoice
    top: tuple[TokenChoice, ...]


@dataclass(frozen=True)
class TextDelta:
    text: str
    # The tokens sampled since the previous delta (when the chat asked for log-probabilities).
    tokens: tuple[SampledToken, ...] = ()


@dataclass(frozen=True)
class Generated:
    """A finished generation; the last event of every generation stream."""

    text: str
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int
    completion_tokens: int
    # Every sampled token, `completion_tokens` of them, when log-probabilities were asked;
    # `unsent` are those no TextDelta carried (the ones that ended in a stop string).
    tokens: tuple[SampledToken, ...] | None = None
    unsent: tuple[SampledToken, ...] = ()


@dataclass(frozen=True)
class ModelIdentity:
    """Who answers: reported by /ping, /v1/models and inside every result."""

    name: str
    description: str
    release_date: str
    prompt_version: str
    calibration: Calibration = field(default_factory=Calibration)
    info: dict[str, Any] = field(default_factory=dict)  # GGUF, quantization, versions


class ModelService(Protocol):
    """The model's two operations, plus what serving needs around them."""

    identity: ModelIdentity

    async def score(
        self, questions: Sequence[StateQuestion], *, refuse_unfit: bool = False
    ) -> Scored: ...

    def reserved(self) -> AbstractAsyncContextManager[None]:
        """Admit once; `score` calls inside the block (same task) run without admission."""
        ...

    def generate(self, chat: Chat) -> AsyncGenerator[TextDelta | Generated, None]: ...

    def stats(self) -> dict[str, Any]: ...

    def stop_work(self) -> None: ...

    def close(self) -> None: ...
