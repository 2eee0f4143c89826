"""The `decision` / `decisions` wire format (the reference adapter's schema)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator, model_validator

from ..scoring import MAX_OPTIONS, Question, QuestionScores, ScoringPlan
from .fields import NonBlank, OptionName, check_unique_names

State = StrictStr | dict[str, Any] | list[Any]

READOUT_TEXT = {
    "single-token": (
        "last-position logits of the prompt, restricted to the options' single-token labels, "
        "softmax over them; no tokens generated"
    ),
    "label-sequence": (
        "log-probability of each option's whole multi-token label after the prompt (its tokens "
        "decoded as branches of the prompt), softmax over them; no tokens generated"
    ),
}


class Option(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: OptionName
    description: StrictStr | None = None


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: NonBlank
    state: State
    question: NonBlank
    options: list[Option] = Field(min_length=2, max_length=MAX_OPTIONS)

    @field_validator("options")
    @classmethod
    def _unique_option_ids(cls, options: list[Option]) -> list[Option]:
        check_unique_names((option.id for option in options), "option id")
        return options

    def as_question(self) -> Question:
        return Question(
            question=self.question,
            option_ids=[o.id for o in self.options],
            descriptions=[o.description for o in self.options],
        )


class DecisionRequest(BaseModel):
    """Exactly one of `decision` or `decisions`; decisions about one state share its prefill."""

    model_config = ConfigDict(extra="forbid")
    decision: Decision | None = None
    decisions: list[Decision] | None = Field(default=None, min_length=1)

    @field_validator("decisions")
    @classmethod
    def _unique_ids(cls, decisions: list[Decision] | None) -> list[Decision] | None:
        if not decisions:
            return decisions
        ids = [d.id for d in decisions]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate decision ids: {', '.join(duplicates)}")
        return decisions

    @model_validator(mode="after")
    def _exactly_one(self) -> DecisionRequest:
        if (self.decision is None) == (self.decisions is None):
            raise ValueError("send exactly one of `decision` or `decisions`")
        return self

    @property
    def items(self) -> list[Decision]:
        return [self.decision] if self.decision is not None else list(self.decisions or [])


def encode_result(
    decision: Decision,
    scores: QuestionScores,
    plan: ScoringPlan,
    index: int,
    *,
    engine_piece,
    model: dict[str, Any],
    timing: dict[str, Any],
    prompt_version: str,
    temperature: float = 1.0,
) -> dict[str, Any]:
    question = plan.questions[index]
    return {
        "id": decision.id,
        "option_ids": [o.id for o in decision.options],
        "probabilities": scores.probabilities(temperature).tolist(),
        "option_logits": scores.option_logits.tolist(),
        "option_log_probs": scores.option_log_probs.tolist(),
        "labels": question.labels,
        "input_tokens": plan.input_tokens(index),
        "allowed_token_mass": scores.allowed_token_mass,
        "full_vocab_argmax_id": scores.full_vocab_argmax_id,
        "full_vocab_argmax_token": engine_piece(scores.full_vocab_argmax_id).decode(
            "utf-8", "replace"
        ),
        "prompt_sha256": question.prompt_sha256,
        "prompt_version": prompt_version,
        "readout": READOUT_TEXT[scores.readout],
        "readout_mode": scores.readout,
        "temperature": temperature,
        "model": model,
        "timing": timing,
    }
