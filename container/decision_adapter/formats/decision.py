"""The `decision` / `decisions` wire format (the reference adapter's schema)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator, model_validator

from ..contract import (
    MAX_REQUEST_ITEMS,
    MIN_CONFIDENT_MASS,
    Answer,
    ModelIdentity,
    ModelService,
    Question,
    ReadoutName,
    StateQuestion,
    Verdict,
)
from .base import Call, WireFormat, response_body, score
from .fields import (
    NonBlank,
    OptionName,
    State,
    check_unique_names,
    min_confidence_field,
    options_field,
)

READOUT_TEXT = {
    "decision-head": (
        "a trained decision model's own head (its type: the model block's decision_type), "
        "each question's prompt from the model's systemone template, decoded alone; softmax "
        "over the options at the model's temperature; no tokens generated"
    ),
    "single-token": (
        "last-position logits of the prompt, restricted to the options' single-token labels, "
        "softmax over them; no tokens generated"
    ),
    "label-sequence": (
        "log-probability of each option's whole multi-token label after the prompt (its tokens "
        "decoded as branches of the prompt), softmax over them; no tokens generated"
    ),
    "letter-spellings": (
        "last-position log-probabilities of the prompt, each option's summed over every token "
        "that spells its letter label (A, ' A', '(A', '**A', 'A)', ...), softmax over the "
        "sums; no tokens generated"
    ),
    "rotation-mean": (
        "letter labels read once per cyclic rotation of the options, each rotation's "
        "distribution over the options averaged (as log-probabilities); no tokens generated"
    ),
    "text-mean": (
        "mean log-probability per token of each option's own words as the continuation of "
        "the answer ('The correct answer is', or the JSON answer's opened value), softmax over "
        "them; no tokens generated"
    ),
    "text-sum": (
        "log-probability of each option's whole name (and closing quote) as the JSON answer's "
        "opened value, softmax over them; no tokens generated"
    ),
    "text-mean-minus-content-free": (
        "mean log-probability per token of each option's own words as the continuation of "
        "'The correct answer is', minus the same against the content-free state 'N/A', "
        "softmax over them; no tokens generated"
    ),
}


class Option(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: OptionName = Field(
        description="The option's name: written into the prompt, and the result's `answer` "
        "when it wins."
    )
    description: StrictStr | None = Field(
        None, description="What the option means, written into the prompt after its id."
    )


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: NonBlank = Field(description="Names the decision's result; unique among `decisions`.")
    state: State = Field(
        description="What is decided about: text, or JSON the prompt shows as indented JSON."
    )
    question: NonBlank = Field(description="The question the options answer.")
    options: list[Option] = options_field()
    readout: ReadoutName | None = Field(
        None,
        description="The readout that scores this decision; absent: the model's own (its "
        "calibration file's, else the built-in one).",
    )
    min_confidence: float | None = min_confidence_field(
        "Below this top probability the decision abstains: `answer` null, `abstained` true, "
        "every other field as without it."
    )

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
            readout=self.readout,
        )


class DecisionRequest(BaseModel):
    """Exactly one of `decision` or `decisions`; decisions about one state share its prefill."""

    model_config = ConfigDict(extra="forbid")
    decision: Decision | None = Field(
        None, description='One decision, answered as `{"result": ...}`.'
    )
    decisions: list[Decision] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_REQUEST_ITEMS,
        description='Several, answered in order as `{"results": [...], "timing": {...}}`; '
        "at most `DECISION_MAX_DECISIONS` are scored.",
    )

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


class DecisionResult(BaseModel):
    """One decision's answer: `result`, or each of `results`. Every per-option list is in
    `option_ids`' order."""

    id: str = Field(description="The decision's `id`.")
    option_ids: list[str] = Field(description="The options' ids, in request order.")
    probabilities: list[float] = Field(
        description="Each option's probability: the softmax of `option_logits` divided by "
        "`temperature`."
    )
    answer: str | None = Field(
        description="The most probable option's id; null when the decision abstained."
    )
    top_probability: float = Field(description="The highest of `probabilities`.")
    margin: float = Field(description="The top probability's lead over the second.")
    abstained: bool = Field(
        description="`top_probability` is below `min_confidence`: `answer` is null, every "
        "other field as without it."
    )
    min_confidence: float | None = Field(description="The decision's `min_confidence`, or null.")
    option_logits: list[float] = Field(
        description="What the softmax is taken over: each option's score under the readout."
    )
    option_log_probs: list[float] = Field(
        description="Each option's label's full-vocabulary log-probability: the chance the "
        "model writes it."
    )
    option_mean_log_probs: list[float] | None = Field(
        None,
        description="Option-text readouts only: each option's mean log-probability per token.",
    )
    content_free_scores: list[float] | None = Field(
        None,
        description="`calibrated` only: each option's score against the content-free state, "
        "subtracted from its own.",
    )
    labels: list[str] = Field(description="What the model read as each option.")
    input_tokens: int = Field(description="Tokens the model read: the state and the question.")
    allowed_token_mass: float = Field(
        description="The share of the full-vocabulary probability on the options' labels: "
        "a low value means the model wanted to say something else."
    )
    low_allowed_mass: bool = Field(
        description=f"`letters` only: `allowed_token_mass` under {MIN_CONFIDENT_MASS}, so the "
        "answer is not called confident."
    )
    full_vocab_argmax_id: int = Field(description="The model's unrestricted likeliest token.")
    full_vocab_argmax_token: str = Field(description="That token, decoded.")
    prompt_sha256: str = Field(description="SHA-256 of the rendered prompt.")
    prompt_version: str = Field(description="The prompt templates' version.")
    readout: ReadoutName = Field(description="The readout strategy that scored the decision.")
    readout_mode: str = Field(description="How it read the options.")
    readout_text: str = Field(description="`readout_mode` in words.")
    temperature: float = Field(
        description="What the logits were divided by: the calibration's temperature (1: raw)."
    )
    model: dict[str, Any] = Field(
        description="The served model: GGUF file, bytes, SHA-256, quantization, context, "
        "threads, GPU layers, llama-cpp-python version, the packaging manifest's identity, and "
        "`decision_batching`: `alone` (one request at a time) or `shared` "
        "(`DECISION_MAX_SCORING_REQUESTS` above 1: batches shared with other requests, the "
        "same bits as alone), and `decisions_at_once`, how many it admits together."
    )
    timing: dict[str, Any] = Field(
        description="The decision's state group's milliseconds per stage (`prepare_ms`, "
        "`admission_wait_ms`, `prefill_ms`, `branches_ms`, `total_ms`), its `state_cache` "
        "(`hit`, `miss` or `off`), `prefix_tokens` and `request_tokens`."
    )


def encode_result(
    decision: Decision, answer: Answer, timing: dict[str, Any], model: ModelIdentity
) -> dict[str, Any]:
    scores = answer.scores
    temperature = model.calibration.temperature_for(scores.strategy, scores.kind)
    extra = {}
    if scores.option_mean_log_probs is not None:
        extra["option_mean_log_probs"] = scores.option_mean_log_probs.tolist()
    if scores.content_free is not None:
        extra["content_free_scores"] = scores.content_free.tolist()
    probabilities = scores.probabilities(temperature)
    verdict = Verdict.of(probabilities, decision.min_confidence)
    return response_body(
        DecisionResult,
        id=decision.id,
        option_ids=[o.id for o in decision.options],
        probabilities=probabilities.tolist(),
        answer=None if verdict.top is None else decision.options[verdict.top].id,
        top_probability=verdict.top_probability,
        margin=verdict.margin,
        abstained=verdict.abstained,
        min_confidence=decision.min_confidence,
        option_logits=scores.option_logits.tolist(),
        option_log_probs=scores.option_log_probs.tolist(),
        **extra,
        labels=answer.labels,
        input_tokens=answer.input_tokens,
        allowed_token_mass=scores.allowed_token_mass,
        # True: a letters answer whose labels hold too little of the next token to be called
        # confident; its probabilities are still the readout's.
        low_allowed_mass=scores.low_allowed_mass,
        full_vocab_argmax_id=scores.full_vocab_argmax_id,
        full_vocab_argmax_token=answer.full_vocab_argmax_token,
        prompt_sha256=answer.prompt_sha256,
        prompt_version=model.prompt_version,
        readout=scores.strategy,
        readout_mode=scores.readout,
        readout_text=READOUT_TEXT[scores.readout],
        temperature=temperature,
        model=model.info,
        timing=timing,
    )


class DecisionFormat(WireFormat):
    async def answer(
        self, request: DecisionRequest, service: ModelService, call: Call
    ) -> dict[str, Any]:
        decisions = request.items
        field = "decision" if request.decision is not None else "decisions"
        questions = [StateQuestion(d.state, d.as_question()) for d in decisions]
        scored = await score(service, questions, field=field, noun="decisions")
        call.log.update(kind=field, decisions=len(decisions), **scored.timing)
        results = [
            encode_result(decision, answer, timing, service.identity)
            for decision, answer, timing in zip(
                decisions, scored.every_answer(), scored.timings, strict=False
            )
        ]
        if request.decision is not None:
            return {"result": results[0]}
        return {"results": results, "timing": scored.timing}


FORMAT = DecisionFormat(
    "decision",
    DecisionRequest,
    shape_keys=("decision", "decisions"),
    shape_text="`decision`, `decisions` (decision scoring)",
)
