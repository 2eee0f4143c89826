"""OpenAI's Decisions API (`POST /v1/decisions`, the SDK's `client.decisions.create`).

The contract is the official SDK's own types (`openai/types/decision_create_params.py` and
`decision.py`). Each question is scored as the System One question it corresponds to
(predicate as noul, choice as choice, score as score), on the same state: `input` becomes a
System One state (a string, or messages and tool calls as structured JSON) and is rendered by
System One's renderer, prefilled once and shared by every question. A question the model cannot
read (an image; its own tokens do not fit beside the input) is answered with a refusal, the
others still answered. Errors are OpenAI's `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictStr,
    Tag,
    ValidationError,
)

from ..contract import (
    MAX_OPTIONS,
    MAX_REQUEST_ITEMS,
    Answer,
    ModelIdentity,
    ModelService,
    StateQuestion,
    Verdict,
)
from ..errors import LimitExceeded, RequestError, TooManyQuestions, field_path
from .base import Call, WireFormat
from .fields import NonBlank, OptionName, at_most, bounded_json, min_confidence_field
from .systemone import (
    MAX_SCORE_LEVELS,
    ChoiceQuestion,
    NoulQuestion,
    ScoreQuestion,
    choice_confidence,
    score_confidence,
)

log = logging.getLogger("decision_adapter")

MAX_QUESTIONS = 400  # the SDK's own bound; DECISION_MAX_DECISIONS is the served one


# Content and output parts, capped before their items are validated (fields.at_most).
T = TypeVar("T")
Capped = Annotated[T, at_most(MAX_REQUEST_ITEMS)]


class _Closed(BaseModel):
    # As the chat route: a field this server does not know is refused, never ignored.
    model_config = ConfigDict(extra="forbid")


# --- content parts -------------------------------------------------------------------------
class CacheBreakpoint(_Closed):
    mode: Literal["explicit"] = Field(description="Accepted; no effect.")


class InputText(_Closed):
    type: Literal["input_text"] = Field(description="A text part.")
    text: StrictStr = Field(description="The text.")
    prompt_cache_breakpoint: CacheBreakpoint | None = Field(
        None, description="Accepted; no effect."
    )


class InputImage(_Closed):
    type: Literal["input_image"] = Field(
        description="An image part: the model reads text only, so its question is refused."
    )
    image_url: StrictStr = Field(description="Not fetched.")
    detail: Literal["low", "high", "auto", "original"] | None = Field(
        None, description="Accepted; no effect."
    )
    prompt_cache_breakpoint: CacheBreakpoint | None = Field(
        None, description="Accepted; no effect."
    )


class InputJson(_Closed):
    type: Literal["input_json"] = Field(description="A JSON part, shown as indented JSON.")
    data: Annotated[
        dict[StrictStr, Any] | list[dict[StrictStr, Any]], AfterValidator(bounded_json)
    ] = Field(description="An object, or a list of objects.")


class OutputText(_Closed):
    type: Literal["output_text"] = Field(description="The assistant's text.")
    text: StrictStr = Field(description="The text.")


class RefusalPart(_Closed):
    type: Literal["refusal"] = Field(
        description='The assistant\'s refusal, read as `{"refusal": ...}`.'
    )
    refusal: StrictStr = Field(description="The refusal's text.")


UserPart = Annotated[InputText | InputImage | InputJson, Field(discriminator="type")]
ToolOutputPart = Annotated[InputText | InputImage, Field(discriminator="type")]
AssistantPart = Annotated[OutputText | RefusalPart, Field(discriminator="type")]
Status = Literal["in_progress", "completed", "incomplete"]


# --- input items -----------------------------------------------------------------------------
# What the model reads of an item is its role and content, or its type, call id, name and
# arguments or output; the rest is bookkeeping (`_item_value`).
UNREAD = "Bookkeeping; not shown to the model."
CONTENT = "Text, or parts (one per line)."


class _Message(_Closed):
    type: Literal["message"] | None = Field(None, description="`message`, or absent.")


class UserMessage(_Message):
    role: Literal["user"] = Field(description="The user speaks.")
    content: Capped[StrictStr | list[UserPart]] = Field(description=CONTENT)


class DeveloperMessage(_Message):
    role: Literal["developer"] = Field(description="The developer speaks.")
    content: Capped[StrictStr | list[InputText]] = Field(description=CONTENT)


class SystemMessage(_Message):
    role: Literal["system"] = Field(description="The system prompt.")
    content: Capped[StrictStr | list[InputText]] = Field(description=CONTENT)


class AssistantMessage(_Message):
    role: Literal["assistant"] = Field(description="The assistant speaks.")
    content: Capped[StrictStr | list[AssistantPart]] = Field(description=CONTENT)
    phase: Literal["commentary", "final_answer"] | None = Field(None, description=UNREAD)


class _ToolItem(_Closed):
    call_id: StrictStr = Field(
        description="Pairs a call with its output: an output names an earlier call's."
    )
    id: StrictStr | None = Field(None, description=UNREAD)
    status: Status | None = Field(None, description=UNREAD)


class FunctionCall(_ToolItem):
    type: Literal["function_call"] = Field(description="A function call the assistant made.")
    name: StrictStr = Field(description="The function's name.")
    arguments: StrictStr = Field(description="Its arguments, as the assistant wrote them.")
    namespace: StrictStr | None = Field(None, description="The function's namespace.")


class FunctionCallOutput(_ToolItem):
    type: Literal["function_call_output"] = Field(description="A function call's output.")
    output: Capped[StrictStr | list[ToolOutputPart]] = Field(description=CONTENT)


class CustomToolCall(_ToolItem):
    type: Literal["custom_tool_call"] = Field(description="A custom tool call.")
    name: StrictStr = Field(description="The tool's name.")
    input: StrictStr = Field(description="Its input, as the assistant wrote it.")
    namespace: StrictStr | None = Field(None, description="The tool's namespace.")


class CustomToolCallOutput(_ToolItem):
    type: Literal["custom_tool_call_output"] = Field(description="A custom tool call's output.")
    output: Capped[StrictStr | list[ToolOutputPart]] = Field(description=CONTENT)


Part = InputText | InputImage | InputJson | OutputText | RefusalPart
Message = UserMessage | DeveloperMessage | SystemMessage | AssistantMessage
ToolItem = FunctionCall | FunctionCallOutput | CustomToolCall | CustomToolCallOutput


def _item_kind(item: Any) -> str | None:
    """A message is told by its role, a tool item by its type (None: neither is a string)."""
    if isinstance(item, dict):
        kind = item.get("role") if "role" in item else item.get("type")
    else:
        kind = getattr(item, "role", None) or getattr(item, "type", None)
    return kind if isinstance(kind, str) else None


ITEM_KINDS = {
    "user": UserMessage,
    "developer": DeveloperMessage,
    "system": SystemMessage,
    "assistant": AssistantMessage,
    "function_call": FunctionCall,
    "function_call_output": FunctionCallOutput,
    "custom_tool_call": CustomToolCall,
    "custom_tool_call_output": CustomToolCallOutput,
}
InputItem = Annotated[
    Annotated[UserMessage, Tag("user")]
    | Annotated[DeveloperMessage, Tag("developer")]
    | Annotated[SystemMessage, Tag("system")]
    | Annotated[AssistantMessage, Tag("assistant")]
    | Annotated[FunctionCall, Tag("function_call")]
    | Annotated[FunctionCallOutput, Tag("function_call_output")]
    | Annotated[CustomToolCall, Tag("custom_tool_call")]
    | Annotated[CustomToolCallOutput, Tag("custom_tool_call_output")],
    Discriminator(
        _item_kind,
        custom_error_type="invalid_input_item",
        custom_error_message="expected a message (role user, developer, system or assistant) or "
        "a function_call, function_call_output, custom_tool_call or custom_tool_call_output",
    ),
]
TOOL_OUTPUTS = {
    "function_call_output": "function_call",
    "custom_tool_call_output": "custom_tool_call",
}


# --- questions -------------------------------------------------------------------------------
# Never blank, never an empty list: System One would otherwise ask its default question in
# their place, a question the caller did not ask.
Instructions = Annotated[
    NonBlank | Annotated[list[UserPart], Field(min_length=1)], at_most(MAX_REQUEST_ITEMS)
]


class _Question(_Closed):
    instructions: Instructions = Field(
        description="The question: text, or parts (one per line); an image part refuses it."
    )
    # The SDK's type is a string: absent is None, an explicit null is refused.
    name: StrictStr = Field(  # type: ignore[assignment]
        None,
        description="Unique among the request's questions (NFC); not null: leave it out.",
    )


class Predicate(_Question):
    type: Literal["predicate"] = Field(
        description="A yes-or-no question, scored as a System One noul."
    )


class Choice(_Closed):
    # Typed: the string "true" and the boolean true are two choices.
    value: OptionName | StrictBool = Field(
        description="A string or a boolean: what the answer's `choice` says."
    )
    description: StrictStr | None = Field(
        None, description="What the choice means, shown to the model."
    )


class ChoiceQuestionParam(_Question):
    type: Literal["choice"] = Field(description="One of `choices`, scored as a System One choice.")
    choices: list[Choice] = Field(
        min_length=2,
        max_length=MAX_OPTIONS,
        description='Each `value` unique: compared by type (the string "true" and the '
        "boolean true are two choices) and, for text, once Unicode-normalized (NFC); a repeat "
        "is a 400 naming it.",
    )


class Level(_Closed):
    label: NonBlank = Field(description="The level's name.")
    description: StrictStr | None = Field(
        None, description="What the level means, shown to the model."
    )


class ScoreQuestionParam(_Question):
    type: Literal["score"] = Field(
        description="A level among `levels`, scored as a System One score."
    )
    levels: list[Level] = Field(
        min_length=2,
        max_length=MAX_SCORE_LEVELS,
        description="Lowest first; each `label` unique once Unicode-normalized (NFC); a repeat "
        "is a 400 naming it.",
    )


AnyQuestion = Predicate | ChoiceQuestionParam | ScoreQuestionParam
QuestionParam = Annotated[AnyQuestion, Field(discriminator="type")]


class CacheOptions(_Closed):
    mode: Literal["implicit", "explicit"] | None = Field(None, description="Accepted; no effect.")
    ttl: Literal["30m"] | None = Field(None, description="Accepted; no effect.")


SAFETY_IDENTIFIER_MAX = 64


class DecisionsRequest(_Closed):
    model: StrictStr = Field(
        description="Any name (the SDK's default too); the answer names the served model."
    )
    input: StrictStr | Annotated[list[InputItem], Field(max_length=MAX_REQUEST_ITEMS)] = Field(
        min_length=1,
        description="A string, or messages and tool calls with their outputs: the state every "
        "question reads.",
    )
    questions: list[QuestionParam] = Field(
        min_length=1,
        max_length=MAX_QUESTIONS,
        description="Answered in order. At most `DECISION_MAX_DECISIONS` are scored (a 400 "
        "above it); those refused for an image do not count.",
    )
    # Accepted for the SDK's sake: the state cache is keyed by the input's exact tokens alone.
    prompt_cache_key: StrictStr | None = Field(
        None,
        description="Accepted; no effect: the state cache is keyed by the input's exact "
        "tokens alone.",
    )
    prompt_cache_options: CacheOptions | None = Field(None, description="Accepted; no effect.")
    # Logged with the request; the API's limit, 64 characters, keeps the log line small.
    safety_identifier: Annotated[StrictStr, Field(max_length=SAFETY_IDENTIFIER_MAX)] = Field(
        None,  # type: ignore[assignment]
        description="Written to the request's log line; the length limit is the API's.",
    )
    # Not the SDK's (send it with `extra_body`): below this top probability a question is
    # answered with a refusal that still carries the answer the model would have given.
    x_min_confidence: float | None = min_confidence_field(
        "Not the SDK's (send it in `extra_body`): below this top probability a question is "
        "answered with a refusal carrying `x_abstained` and `x_answer`."
    )


# --- input as a state ------------------------------------------------------------------------
def _joined(values: list[Any]) -> Any:
    """Parts as one text, one line per part (as chat joins them), unless some are JSON."""
    if all(isinstance(value, str) for value in values):
        return "\n".join(values)
    return values


def _part_value(part: Part) -> Any:
    if isinstance(part, (InputText, OutputText)):
        return part.text
    if isinstance(part, InputJson):
        return part.data
    if isinstance(part, RefusalPart):
        return {"refusal": part.refusal}
    raise AssertionError(f"an image part is refused before rendering: {part!r}")


def _content(content: str | Sequence[Part]) -> Any:
    return content if isinstance(content, str) else _joined([_part_value(p) for p in content])


def _item_value(item: Message | ToolItem) -> dict[str, Any]:
    """What the model reads of an item: bookkeeping fields (ids, status, phase) left out."""
    if isinstance(item, _Message):
        return {"role": item.role, "content": _content(item.content)}
    value: dict[str, Any] = {"type": item.type, "call_id": item.call_id}
    if isinstance(item, (FunctionCall, CustomToolCall)):
        if item.namespace is not None:
            value["namespace"] = item.namespace
        value["name"] = item.name
        if isinstance(item, FunctionCall):
            value["arguments"] = item.arguments
        else:
            value["input"] = item.input
    else:
        value["output"] = _content(item.output)
    return value


def input_state(given: str | Sequence[Message | ToolItem]) -> str | list[dict[str, Any]]:
    """`input` as a System One state: a string as it is, messages and tool items as structured
    JSON. One user message of text is the same state as that text sent as a string."""
    if isinstance(given, str):
        return given
    items = [_item_value(item) for item in given]
    if len(items) == 1 and items[0].get("role") == "user" and isinstance(items[0]["content"], str):
        return items[0]["content"]
    return items


def _has_image(parts: Any) -> bool:
    return isinstance(parts, list) and any(isinstance(part, InputImage) for part in parts)


def input_has_image(given: str | Sequence[Message | ToolItem]) -> bool:
    if isinstance(given, str):
        return False
    return any(
        _has_image(getattr(item, "content", getattr(item, "output", None))) for item in given
    )


# --- questions as System One's ---------------------------------------------------------------
def _instructions_text(instructions: str | Sequence[Part]) -> str:
    if isinstance(instructions, str):
        return instructions
    values = [_part_value(part) for part in instructions]
    return "\n".join(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in values)


def choice_names(choices: Sequence[Choice]) -> list[str]:
    """How each choice is written into the prompt: strings as they are, booleans as `true` /
    `false`; where a string would read like a boolean of the same question, every value is
    written as JSON (`"true"` and `true`), so the model can tell them apart."""
    plain = [c.value if isinstance(c.value, str) else json.dumps(c.value) for c in choices]
    keys = [unicodedata.normalize("NFC", name) for name in plain]
    if len(set(keys)) == len(keys):
        return plain
    return [json.dumps(c.value, ensure_ascii=False) for c in choices]


def _level_text(level: Level) -> str:
    return f"{level.label}: {level.description}" if level.description else level.label


def system_one_question(question: AnyQuestion) -> NoulQuestion | ChoiceQuestion | ScoreQuestion:
    text = _instructions_text(question.instructions)
    if isinstance(question, Predicate):
        return NoulQuestion(type="noul", instructions=text)
    if isinstance(question, ChoiceQuestionParam):
        names = choice_names(question.choices)
        criteria = {name: c.description for name, c in zip(names, question.choices, strict=False)}
        return ChoiceQuestion(type="choice", instructions=text, criteria=criteria)
    return ScoreQuestion(
        type="score", instructions=text, criteria=[_level_text(lv) for lv in question.levels]
    )


# --- answers ---------------------------------------------------------------------------------
def encode_answer(
    question: AnyQuestion,
    answer: Answer | None,
    model: ModelIdentity,
    min_confidence: float | None = None,
) -> dict[str, Any]:
    """The SDK's answer, plus `x_margin` (the top option's lead over the second). A question
    whose top probability misses `min_confidence` abstains: the SDK's refusal, `x_abstained`
    true, with the answer it would have been under `x_answer` (the SDK keeps extra fields)."""
    if answer is None:
        return {"type": "refusal", "name": question.name}
    scores = answer.scores
    probabilities = scores.probabilities(
        model.calibration.temperature_for(scores.strategy, scores.kind)
    )
    verdict = Verdict.of(probabilities, min_confidence)
    answered = {**_typed_answer(question, probabilities), "x_margin": verdict.margin}
    if verdict.abstained:
        return {"type": "refusal", "name": question.name, "x_abstained": True, "x_answer": answered}
    return answered


def _typed_answer(question: AnyQuestion, probabilities: np.ndarray) -> dict[str, Any]:
    if isinstance(question, Predicate):
        return {"type": "predicate", "name": question.name, "probability": float(probabilities[0])}
    if isinstance(question, ChoiceQuestionParam):
        values = [choice.value for choice in question.choices]
        return {
            "type": "choice",
            "name": question.name,
            "choice": values[int(np.argmax(probabilities))],
            "probabilities": [
                {"value": value, "probability": p}
                for value, p in zip(values, probabilities.tolist(), strict=False)
            ],
            "confidence": choice_confidence(probabilities),
        }
    return {
        "type": "score",
        "name": question.name,
        "score": float(np.arange(len(probabilities)) @ probabilities),
        "probabilities": [
            {"label": level.label, "value": value, "probability": p}
            for value, (level, p) in enumerate(
                zip(question.levels, probabilities.tolist(), strict=False)
            )
        ],
        "confidence": score_confidence(probabilities),
    }


def encode_usage(input_tokens: int, timing: dict[str, Any]) -> dict[str, Any]:
    """`cached_tokens`: the input's prefix when the state cache served it; a miss wrote it."""
    prefix = timing.get("prefix_tokens", 0)
    cache = timing.get("state_cache", "off")
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": prefix if cache == "hit" else 0,
            "cache_write_tokens": prefix if cache == "miss" else 0,
        },
        "output_tokens": 0,  # scoring reads logits and generates nothing
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens,
    }


# --- errors ----------------------------------------------------------------------------------
# What pydantic puts in a location besides fields and indexes: union members' tags and labels.
_TAGS = set(ITEM_KINDS) | {
    "predicate",
    "choice",
    "score",
    "input_text",
    "input_image",
    "input_json",
    "output_text",
    "refusal",
}


def param_path(location: Sequence[Any]) -> str:
    """pydantic's ('questions', 3, 'choice', 'choices', 1, 'value', 'str') ->
    'questions[3].choices[1].value': the tag after an index and union labels dropped."""
    kept: list[Any] = []
    for position, part in enumerate(location):
        after_index = position > 0 and isinstance(location[position - 1], int)
        if isinstance(part, str) and (
            (after_index and part in _TAGS) or part in {"str", "bool"} or "[" in part
        ):
            continue
        kept.append(part)
    return field_path(tuple(kept))


def openai_error(
    status: int, message: str, *, code: str, param: str | None, retry_after_s: int | None = None
) -> tuple[int, dict[str, Any]]:
    error: dict[str, Any] = {
        "message": message,
        "type": "server_error" if status >= 500 else "invalid_request_error",
        "param": param,
        "code": code,
    }
    if retry_after_s is not None:  # the Retry-After header, for clients that lose headers
        error["retry_after_s"] = retry_after_s
    return status, {"error": error}


class DecisionsFormat(WireFormat):
    def matches(self, body: dict[str, Any]) -> bool:
        return "input" in body and isinstance(body.get("questions"), list)

    def parse(self, body: Any) -> DecisionsRequest:
        request = super().parse(body)
        assert isinstance(request, DecisionsRequest)  # this format's schema
        _check_tool_outputs(request.input)
        # Answers are found by name: two questions of one name could not be told apart.
        names = [_nfc(q.name) if q.name is not None else object() for q in request.questions]
        _check_unique(names, "questions", "question", "name")
        for number, question in enumerate(request.questions):
            where = f"questions[{number}]"
            if isinstance(question, ChoiceQuestionParam):
                # Typed: the string "true" and the boolean true are two choices.
                keys = [(type(c.value), _nfc(c.value)) for c in question.choices]
                _check_unique(keys, f"{where}.choices", "choice", "value")
            if isinstance(question, ScoreQuestionParam):
                labels = [_nfc(level.label) for level in question.levels]
                _check_unique(labels, f"{where}.levels", "level", "label")
        return request

    async def answer(
        self, request: DecisionsRequest, service: ModelService, call: Call
    ) -> dict[str, Any]:
        if request.safety_identifier is not None:
            call.log["safety_identifier"] = request.safety_identifier
        state = None if input_has_image(request.input) else input_state(request.input)
        # An image cannot be read by a text model: its question, or every one, is refused.
        readable = [
            index
            for index, question in enumerate(request.questions)
            if state is not None and not _has_image(question.instructions)
        ]
        asked = [
            StateQuestion(state, system_one_question(request.questions[i]).as_question())
            for i in readable
        ]
        scored_answers: list[Answer | None] = []
        input_tokens, timing = 0, {}
        if asked:
            try:
                scored = await service.score(asked, refuse_unfit=True)
            except TooManyQuestions as error:
                raise error.at("questions", "questions") from None
            except LimitExceeded as error:
                raise error.at("input" if error.subject == "state" else "questions") from None
            scored_answers, input_tokens, timing = (
                scored.answers,
                scored.input_tokens,
                scored.timing,
            )
        answers: list[Answer | None] = [None] * len(request.questions)
        for index, answer in zip(readable, scored_answers, strict=False):
            answers[index] = answer
        call.log.update(
            kind="decisions-openai",
            questions=len(answers),
            refusals=answers.count(None),
            **timing,
        )
        model = service.identity
        return {
            "model": model.name,
            "answers": [
                encode_answer(q, a, model, request.x_min_confidence)
                for q, a in zip(request.questions, answers, strict=False)
            ],
            "usage": encode_usage(input_tokens, timing),
        }

    def error_body(
        self,
        status: int,
        message: str,
        *,
        error_type: str,
        field: str | None = None,
        location: tuple[Any, ...] | None = None,
        retry_after_s: int | None = None,
        **_: Any,
    ) -> tuple[int, dict[str, Any]]:
        # OpenAI answers a malformed request, a context overflow included, with a 400.
        if status == 422 or error_type == "token_limit_exceeded":
            status = 400
        code = "context_length_exceeded" if error_type == "token_limit_exceeded" else error_type
        param = field_path(location) if location else field
        return openai_error(status, message, code=code, param=param, retry_after_s=retry_after_s)

    def validation_error_body(self, error: ValidationError) -> tuple[int, dict[str, Any]]:
        # A union reports every member's error: the deepest names what was meant, and where
        # members fail at the same depth (a number for a string or a list) each is said.
        errors = error.errors(include_url=False, include_input=False)
        depth = max(len(e["loc"]) for e in errors)
        deepest = [e for e in errors if len(e["loc"]) == depth]
        param = param_path(deepest[0]["loc"]) or "body"
        said = [e["msg"] for e in deepest if param_path(e["loc"]) == param]
        message = "; or ".join(dict.fromkeys(said))
        return openai_error(400, f"{param}: {message}", code="validation_error", param=param)


def _first_repeat(keys: Sequence[Any]) -> int | None:
    seen: set[Any] = set()
    for index, key in enumerate(keys):
        if key in seen:
            return index
        seen.add(key)
    return None


def _nfc(value: str | bool) -> str | bool:
    return unicodedata.normalize("NFC", value) if isinstance(value, str) else value


def _check_unique(keys: Sequence[Any], where: str, what: str, field: str) -> None:
    """Refuse the first item whose key repeats an earlier one's, naming its field."""
    index = _first_repeat(keys)
    if index is not None:
        at = f"{where}[{index}].{field}"
        raise RequestError(
            400,
            f"{at}: repeats an earlier {what} (text is compared once Unicode-normalized, NFC); "
            f"each {what} must be unique",
            field=at,
        )


def _check_tool_outputs(given: str | Sequence[Message | ToolItem]) -> None:
    """Each tool output answers an earlier call of its kind, found by its call_id."""
    if isinstance(given, str):
        return
    calls: set[tuple[str, str]] = set()
    for index, item in enumerate(given):
        if isinstance(item, (FunctionCall, CustomToolCall)):
            calls.add((item.type, item.call_id))
            continue
        if not isinstance(item, (FunctionCallOutput, CustomToolCallOutput)):
            continue
        call = TOOL_OUTPUTS[item.type]
        if (call, item.call_id) not in calls:
            field = f"input[{index}].call_id"
            raise RequestError(
                400,
                f"{field}: {item.call_id!r} matches no earlier {call} in input",
                field=field,
            )


FORMAT = DecisionsFormat(
    "decisions-openai",
    DecisionsRequest,
    shape_keys=("input",),
    shape_text="`input` and a `questions` list (OpenAI decisions)",
)
