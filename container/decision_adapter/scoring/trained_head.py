"""Decisions answered by a trained decision model's own head (model/decision_head.py), computed
as llama-server's /v1/systemone computes them (tools/server/server-decision.cpp; the spec:
research/decision_models/README.md).

Each question is one prompt per variant (lev shows a choice's options in both orders), rendered
by the GGUF's `systemone` template from the raw state, the question and its options, tokenized
with special tokens parsed. Each prompt is decoded on its own, from an empty context, in the
engine's fixed chunks: so a question's answer is the same alone, beside other questions, in any
order and in any request, and it is the answer llama-server gives the question alone with the
same batch size. The label types read their labels' logits at the last prompt token; per
variant, a softmax over the options at the model's temperature for the kind and the number of
options; the variants averaged; lev's yes/no the expected rating of its 0-8 scale over 8.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..contract import Answer, Question, QuestionScores, StateQuestion
from ..errors import LimitExceeded, over_token_budget
from ..model.decision_head import DecisionHead
from ..model.engine import Engine


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

    @property
    def tokens(self) -> int:
        return sum(len(prompt) for prompt in self.prompts)


def model_order(head: DecisionHead, question: Question) -> list[str]:
    """The options in the order the model sees and outputs them: a yes/no question's `false`
    first, `true` first for openjev (server-decision.cpp, parse_questions)."""
    if question.kind == "noul":
        return ["true", "false"] if head.noul_true_first else ["false", "true"]
    return list(question.option_ids)


def _options(head: DecisionHead, question: Question, keys: list[str], variant: int) -> list[Any]:
    described = dict(zip(question.option_ids, question.descriptions, strict=True))
    shown = keys if variant == 0 else keys[::-1]
    options: list[dict[str, Any]] = []
    for position, key in enumerate(shown):
        option: dict[str, Any] = {"key": key, "description": described[key]}
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
        "instructions": question.question,
        "state": state,
        "options": _options(head, question, model_order(head, question), variant),
    }
    if head.type == "nimble":  # its prompt lists every question of the request
        values["questions"] = [
            {
                "id": other_id,
                "type": other.kind,
                "instructions": other.question,
                "options": _options(head, other, model_order(head, other), 0),
            }
            for other_id, other in asked
        ]
    if head.type == "lev":
        values = _sorted_keys(values)
    values["images"] = []
    return _ENVIRONMENT.from_string(head.template).render(**values)


def plan(
    engine: Engine,
    head: DecisionHead,
    questions: Sequence[StateQuestion],
    ids: Sequence[str],
    limit: int,
) -> list[HeadQuestion]:
    """Every question's prompts, tokenized; LimitExceeded before any model work when a question
    has more options than the model has labels or the prompts need more than `limit` tokens."""
    by_state: dict[int, list[int]] = {}
    for index, item in enumerate(questions):
        by_state.setdefault(id(item.state), []).append(index)
    planned: list[HeadQuestion | None] = [None] * len(questions)
    spent = 0
    for members in by_state.values():
        asked = [(ids[m], questions[m].question) for m in members]
        state = questions[members[0]].state
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
            spent += sum(len(prompt) for prompt in prompts)
            if spent > limit:
                raise over_token_budget("questions", spent, limit)
            digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
            keys = model_order(head, question)
            planned[member] = HeadQuestion(question, keys, prompts, digest)
    return [item for item in planned if item is not None]


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


def answer(engine: Engine, head: DecisionHead, asked: HeadQuestion) -> Answer:
    """Decode each prompt alone and read the head; the answer in the question's option order."""
    question = asked.question
    n_options = len(question.option_ids)
    outputs = head.outputs(question.kind, n_options)
    labels = np.array(head.labels[:outputs])
    temperature = head.temperature(question.kind, n_options)
    probabilities = np.zeros(outputs)
    argmax = 0
    for variant, prompt in enumerate(asked.prompts):
        engine.reset()
        last = len(prompt) - 1
        (logits,) = engine.decode_sequence(0, prompt, 0, [last]).values()
        assert isinstance(logits, np.ndarray)
        if variant == 0:
            argmax = int(np.argmax(logits))
        p = variant_probabilities(logits[labels], temperature)
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
    return Answer(
        scores=scores,
        labels=[engine.piece(int(token)).decode("utf-8", "replace") for token in labels],
        prompt_sha256=asked.prompt_sha256,
        input_tokens=asked.tokens,
        full_vocab_argmax_token=engine.piece(argmax).decode("utf-8", "replace"),
    )


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
