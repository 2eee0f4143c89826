"""The System One wire format (`POST /v1/systemone`), the field's common decision API.

Every question type is a generic `Question` with options, so the engine scores all three the
same way (state prefix once, each question on its own branch):
- noul: two options, `true` and `false`, described by the criteria; the answer is P(true);
- choice: one option per criteria name; the answer is the distribution and its argmax;
- score: one option per level, named "0".."n-1"; the answer is the expected level.
Confidence follows the reference formulas. Fields the format does not define carry `x_`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator

from ..contract import (
    MAX_OPTIONS,
    MAX_REQUEST_ITEMS,
    Answer,
    ModelIdentity,
    ModelService,
    Question,
    ReadoutName,
    StateQuestion,
    Verdict,
)
from ..errors import MAX_ERROR_DETAILS, RequestError, without_union_labels
from .base import Call, WireFormat, score
from .fields import (
    OptionName,
    State,
    at_most,
    check_unique_names,
    is_blank,
    min_confidence_field,
    options_field,
)

MODEL_ALIAS = "jev-latest"  # the SDKs' default model name; served by whatever model we serve
MAX_SCORE_LEVELS = 10

# Instructions, option descriptions and score levels may be text or structured JSON.
Text = StrictStr | dict[str, Any] | list[Any]
QuestionId = Annotated[str, Field(min_length=1)]


def as_text(value: Text | None) -> str | None:
    """Text verbatim, structured values as compact JSON in the order they were sent."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _structured(value: Text | None) -> dict[str, Any] | list[Any] | None:
    """Instructions sent as JSON, kept as sent (Question.question_value); text: None."""
    return None if value is None or isinstance(value, str) else value


def _instructions(value: Text | None, default: str) -> str:
    text = as_text(value)
    return text if text and not is_blank(text) else default


class NoulCriteria(BaseModel):
    model_config = ConfigDict(extra="forbid")
    true: Text | None = Field(None, description="What `true` means here, shown to the model.")
    false: Text | None = Field(None, description="What `false` means here, shown to the model.")


class NoulQuestion(BaseModel):
    # Inside a question an unknown field is more likely a typo than a newer client's extra.
    model_config = ConfigDict(extra="forbid")
    type: Literal["noul"] = Field(description="A yes-or-no question, answered with P(true).")
    instructions: Text | None = Field(
        None, description='The question; absent or blank: "Is this true of the state?".'
    )
    criteria: NoulCriteria | None = Field(None, description="What true and false mean.")

    @property
    def option_keys(self) -> list[str]:
        return ["true", "false"]

    def as_question(self, readout: str | None = None) -> Question:
        criteria = self.criteria or NoulCriteria()
        return Question(
            question=_instructions(self.instructions, "Is this true of the state?"),
            option_ids=self.option_keys,
            descriptions=[as_text(criteria.true), as_text(criteria.false)],
            readout=readout,
            answer_words=["yes", "no"],  # how an answer to a yes/no question reads in prose
            question_value=_structured(self.instructions),
            description_values=[criteria.true, criteria.false],
        )

    def answer(self, probabilities: np.ndarray) -> dict[str, Any]:
        return {"type": "noul", "noul": float(probabilities[0])}


class ChoiceQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["choice"] = Field(description="One of the named options in `criteria`.")
    instructions: Text | None = Field(
        None,
        description='The question; absent or blank: "Which option fits the state best?".',
    )
    # Option names go into the prompt like the decision format's option ids, with its rules.
    criteria: Annotated[dict[OptionName, Text | None], at_most(MAX_OPTIONS)] = options_field()

    @field_validator("criteria")
    @classmethod
    def _unique_names(cls, criteria: dict[str, Text | None]) -> dict[str, Text | None]:
        check_unique_names(criteria, "option name")
        return criteria

    @property
    def option_keys(self) -> list[str]:
        return list(self.criteria)

    def as_question(self, readout: str | None = None) -> Question:
        return Question(
            question=_instructions(self.instructions, "Which option fits the state best?"),
            option_ids=self.option_keys,
            descriptions=[as_text(d) for d in self.criteria.values()],
            readout=readout,
            question_value=_structured(self.instructions),
            description_values=list(self.criteria.values()),
        )

    def answer(self, probabilities: np.ndarray) -> dict[str, Any]:
        names = self.option_keys
        return {
            "type": "choice",
            "choice": names[int(np.argmax(probabilities))],
            "probabilities": dict(zip(names, probabilities.tolist(), strict=False)),
            "confidence": choice_confidence(probabilities),
        }


class ScoreQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["score"] = Field(
        description="A level on the scale `criteria`, answered with the expected level."
    )
    instructions: Text | None = Field(
        None,
        description='The question; absent or blank: "Which level fits the state best?".',
    )
    # A list only: a map's key order would be an unreliable order of levels.
    criteria: list[Text] = Field(
        min_length=2,
        max_length=MAX_SCORE_LEVELS,
        description="The levels, lowest first, each described by text or JSON; level n is "
        "named `n` in the answer.",
    )

    @property
    def option_keys(self) -> list[str]:
        return [str(level) for level in range(len(self.criteria))]

    def as_question(self, readout: str | None = None) -> Question:
        return Question(
            question=_instructions(self.instructions, "Which level fits the state best?"),
            option_ids=self.option_keys,
            descriptions=[as_text(level) for level in self.criteria],
            readout=readout,
            question_value=_structured(self.instructions),
            description_values=list(self.criteria),
        )

    def answer(self, probabilities: np.ndarray) -> dict[str, Any]:
        levels = np.arange(len(probabilities))
        return {
            "type": "score",
            "score": float(levels @ probabilities),
            # Structured levels come back as they were sent (the SDK accepts str, object, array).
            "legend": dict(zip(self.option_keys, self.criteria, strict=False)),
            "probabilities": dict(zip(self.option_keys, probabilities.tolist(), strict=False)),
            "confidence": score_confidence(probabilities),
        }


SystemOneQuestion = Annotated[
    NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")
]


class SystemOneRequest(BaseModel):
    # Unknown top-level fields are ignored: clients add trace ids, seeds, assets.
    model_config = ConfigDict(extra="ignore")
    model: StrictStr = Field(
        description=f"`{MODEL_ALIAS}` or the served model's name; another is a 404 "
        "`model_not_found`."
    )
    state: State = Field(
        description="What the questions are about: text, or JSON the prompt shows as indented "
        "JSON."
    )
    questions: Annotated[dict[QuestionId, SystemOneQuestion], at_most(MAX_REQUEST_ITEMS)] = Field(
        min_length=1,
        max_length=MAX_REQUEST_ITEMS,
        description="The questions by id; each answer comes back under its question's id. At "
        "most `DECISION_MAX_DECISIONS` are scored.",
    )
    # The adapter's own: the readout strategy for every question (None: the model's own), and
    # the top probability below which every answer says it abstains (None: never).
    x_readout: ReadoutName | None = Field(
        None,
        description="The adapter's: the readout that scores every question; absent: the "
        "model's own.",
    )
    x_min_confidence: float | None = min_confidence_field(
        "The adapter's: below this top probability an answer says `x_abstained: true`, its "
        "other fields unchanged (a caller should not act on them)."
    )


# --- confidence (the reference formulas) ------------------------------------------------
def choice_confidence(probabilities: np.ndarray) -> float:
    """How far the top probability is from uniform: 0 for a uniform, 1 for a one-hot answer."""
    n = len(probabilities)
    return _unit((float(probabilities.max()) - 1 / n) / (1 - 1 / n))


def score_confidence(probabilities: np.ndarray) -> float:
    """1 minus the expected distance from the mode, relative to that of a uniform distribution."""
    n = len(probabilities)
    levels = np.arange(n)
    mode = int(np.argmax(probabilities))
    spread = float(probabilities @ np.abs(levels - mode))
    uniform_spread = float(np.abs(levels - (n - 1) / 2).sum() / n)
    return _unit(1 - spread / uniform_spread)


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))  # rounding must not step outside [0, 1]


# --- encoders ----------------------------------------------------------------------------
def encode_answer(
    question: SystemOneQuestion,
    answer: Answer,
    *,
    model: ModelIdentity,
    min_confidence: float | None = None,
) -> dict[str, Any]:
    scores = answer.scores
    temperature = model.calibration.temperature_for(scores.strategy, scores.kind)
    probabilities = scores.probabilities(temperature)
    verdict = Verdict.of(probabilities, min_confidence)
    return {
        **question.answer(probabilities),
        # The top option's lead over the second, and whether it missed x_min_confidence (the
        # answer's fields are still the model's; a caller acting on it should not).
        "x_margin": verdict.margin,
        "x_abstained": verdict.abstained,
        # What the softmax was taken over: raw label logits, or whole-label log-probabilities.
        "x_logits": dict(zip(question.option_keys, scores.option_logits.tolist(), strict=False)),
        # Each option's whole continuation's full-vocabulary log-probability: the chance the
        # model writes it, where x_logits may be a mean per token or a letter's logit.
        "x_log_probs": dict(
            zip(question.option_keys, scores.option_log_probs.tolist(), strict=False)
        ),
        "x_readout": scores.strategy,
        "x_readout_mode": scores.readout,
        # The letters readout's labels' share of the next token, and whether it is too small to
        # call the answer confident (contract.MIN_CONFIDENT_MASS).
        "x_allowed_token_mass": scores.allowed_token_mass,
        "x_low_allowed_mass": scores.low_allowed_mass,
        "x_temperature": temperature,
        "x_prompt_sha256": answer.prompt_sha256,
    }


def encode_response(
    *, model: str, answers: dict[str, dict[str, Any]], input_tokens: int, extensions: dict[str, Any]
) -> dict[str, Any]:
    return {
        "model": model,
        "answers": answers,
        # Scoring reads logits and generates nothing, so there are no output tokens.
        "usage": {"input_tokens": input_tokens, "output_tokens": 0},
        **{f"x_{name}": value for name, value in extensions.items()},
    }


def encode_models(
    *, name: str, description: str, release_date: str, extensions: dict[str, Any]
) -> dict[str, Any]:
    """The served model, and `jev-latest` as its alias (both names are accepted)."""
    extra = {f"x_{key}": value for key, value in extensions.items()}
    return {
        "models": [
            {"name": name, "description": description, "release_date": release_date, **extra},
            {
                "name": MODEL_ALIAS,
                "description": f"alias of {name}: {description}",
                "release_date": release_date,
                **extra,
            },
        ]
    }


# --- errors (FastAPI's shapes, which the official clients parse) -------------------------
def validation_error_body(error: ValidationError) -> dict[str, Any]:
    return {
        "detail": [
            {"loc": ["body", *without_union_labels(e["loc"])], "msg": e["msg"], "type": e["type"]}
            for e in error.errors(include_url=False, include_input=False)[:MAX_ERROR_DETAILS]
        ],
        "x_errors_total": error.error_count(),
    }


def error_body(
    status: int,
    error_type: str,
    message: str,
    field: str | None,
    location: tuple[Any, ...] | None = None,
    retry_after_s: int | None = None,
) -> tuple[int, dict[str, Any]]:
    """(status, body). A 422, and malformed JSON (as FastAPI answers it), get the validation
    shape `detail[]`; every other error `detail.error_type` and `detail.message`."""
    if status == 422 or error_type == "invalid_json":
        if location:
            loc = ["body", *location]
        else:
            loc = ["body"] if field in (None, "body") else ["body", field]
        return 422, {"detail": [{"loc": loc, "msg": message, "type": error_type}]}
    detail: dict[str, Any] = {"error_type": error_type, "message": message}
    if retry_after_s is not None:  # the Retry-After header, for clients that lose headers
        detail["retry_after_s"] = retry_after_s
    return status, {"detail": detail}


class SystemOneFormat(WireFormat):
    async def answer(
        self, request: SystemOneRequest, service: ModelService, call: Call
    ) -> dict[str, Any]:
        model = service.identity
        if request.model not in (model.name, MODEL_ALIAS):
            raise RequestError(
                404,
                f"model: {request.model!r} is not served here; use {model.name!r} or "
                f"{MODEL_ALIAS!r} (GET /v1/models)",
                field="model",
                error_type="model_not_found",
            )
        questions = list(request.questions.values())
        scored = await score(
            service,
            [
                StateQuestion(request.state, replace(q.as_question(request.x_readout), name=name))
                for name, q in request.questions.items()
            ],
            field="questions",
            noun="questions",
        )
        call.log.update(kind="systemone", questions=len(questions), **scored.timing)
        answers = {
            question_id: encode_answer(
                question, answer, model=model, min_confidence=request.x_min_confidence
            )
            for question_id, question, answer in zip(
                request.questions, questions, scored.every_answer(), strict=False
            )
        }
        return encode_response(
            model=model.name,
            answers=answers,
            input_tokens=scored.input_tokens,
            extensions={
                "calibration": model.calibration.as_extension(),
                "prompt_version": model.prompt_version,
                "timing": scored.timing,
                "model_info": model.info,
            },
        )

    def models(self, model: ModelIdentity) -> dict[str, Any]:
        return encode_models(
            name=model.name,
            description=model.description,
            release_date=model.release_date,
            extensions={
                "gguf_sha256": model.info["gguf_sha256"],
                "context_tokens": model.info["context_tokens"],
                "architecture": model.info.get("architecture"),
                "memory": model.info.get("memory"),
                # A trained decision model's type (openjev, lev, ...); null: a generic model.
                "decision_type": model.info.get("decision_type"),
            },
        )

    def error_body(self, status: int, message: str, **error: Any) -> tuple[int, dict[str, Any]]:
        # FastAPI's shapes have no place for the adapter's `retryable` and `detail`.
        return error_body(
            status,
            error["error_type"],
            message,
            error.get("field"),
            error.get("location"),
            error.get("retry_after_s"),
        )

    def validation_error_body(self, error: ValidationError) -> tuple[int, dict[str, Any]]:
        return 422, validation_error_body(error)


FORMAT = SystemOneFormat(
    "systemone", SystemOneRequest, shape_keys=("questions",), shape_text="`questions` (System One)"
)
