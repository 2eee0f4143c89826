"""docs/api.md's field tables: each route's request fields, rendered from the pydantic model
that validates its body (and every model inside it, a table each), the decision result's fields
from the model its encoder fills, and each route's example body from the OpenAPI document's."""

from __future__ import annotations

import json
import typing
from collections.abc import Callable, Iterator
from typing import Any

from decision_adapter.formats.decision import DecisionRequest, DecisionResult
from decision_adapter.formats.openai_chat import ChatRequest
from decision_adapter.formats.openai_decisions import DecisionsRequest
from decision_adapter.formats.systemone import SystemOneRequest
from decision_adapter.http import openapi
from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo

from .blocks import Block
from .tables import constraints, default, table, type_name

FORMATS = "container/decision_adapter/formats"


def _code_name(model: type[BaseModel]) -> str:
    return f"`{model.__name__}`"


def _models_in(annotation: object) -> Iterator[type[BaseModel]]:
    """The models a field's type holds, at any depth (optional, in a list, a union member)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _refused(field: FieldInfo) -> bool:
    """A field declared so that the schema names it and only null passes: refused if sent."""
    return field.annotation in (None, type(None))


def _name(name: str, field: FieldInfo) -> str:
    return field.alias or name


def _sections(root: type[BaseModel]) -> list[tuple[type[BaseModel], list[str]]]:
    """`root` and every model inside it, depth first, each with the fields that hold it."""
    places: dict[type[BaseModel], list[str]] = {root: []}

    def visit(model: type[BaseModel]) -> None:
        for name, field in model.model_fields.items():
            for nested in _models_in(field.annotation):
                place = f"`{model.__name__}.{_name(name, field)}`"
                if nested in places:
                    if place not in places[nested]:
                        places[nested].append(place)
                    continue
                places[nested] = [place]
                visit(nested)

    visit(root)
    return list(places.items())


def _meaning(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    assert field.description, f"{model.__name__}.{name} has no description="
    return " ".join(field.description.split())


def _unit(annotation: object) -> str:
    """What a length counts: a list's or an object's items, else characters."""
    kinds = [annotation, *typing.get_args(annotation)]
    return "items" if any(typing.get_origin(kind) in (list, dict) for kind in kinds) else "long"


def _words(metadata: list[Any], unit: str) -> list[str]:
    """Constraints in words. A validator's docstring states its rule whole: the length and
    pattern that approximate it for the OpenAPI document are left out beside it."""
    rules = [
        item.func.__doc__.split(". ")[0].rstrip(".")
        for item in metadata
        if isinstance(item, AfterValidator) and item.func.__doc__
    ]
    if rules:
        metadata = [
            m
            for m in metadata
            if not hasattr(m, "min_length") and getattr(m, "pattern", None) is None
        ]
    return constraints(metadata, unit) + [rule[0].lower() + rule[1:] for rule in rules]


def _nested(annotation: object, where: str = "") -> list[str]:
    """Constraints an Annotated type inside the field's type holds (an optional's, a list's
    items', an object's keys'), said of what they bound."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        metadata = []
        for item in args[1:]:
            metadata += item.metadata if isinstance(item, FieldInfo) else [item]
        own = [f"{where}{word}" for word in _words(metadata, _unit(args[0]))]
        return own + _nested(args[0], where)
    if origin is list:
        return _nested(args[0], "each item: ")
    if origin is dict:
        return _nested(args[0], "each key: ") + _nested(args[1], "each value: ")
    return [word for arg in args for word in _nested(arg, where)]


def _request_row(model: type[BaseModel], name: str, field: FieldInfo) -> tuple[str, ...]:
    allowed = _words(field.metadata, _unit(field.annotation)) + _nested(field.annotation)
    shown = default(field)
    return (
        f"`{_name(name, field)}`",
        type_name(field.annotation, _code_name),
        "optional" if shown == "unset" else shown,
        "; ".join(dict.fromkeys(allowed)),
        _meaning(model, name, field),
    )


def _response_row(model: type[BaseModel], name: str, field: FieldInfo) -> tuple[str, ...]:
    """A field with a default is left out when it does not apply; one without is always sent,
    null where its type allows."""
    kind = type_name(field.annotation, _code_name)
    if field.is_required() and type(None) in typing.get_args(field.annotation):
        kind += " or null"
    return (f"`{_name(name, field)}`", kind, _meaning(model, name, field))


def _intro(model: type[BaseModel], places: list[str]) -> str:
    words = [f"**{_code_name(model)}**"]
    if places:
        words.append(f"(in {', '.join(places)})")
    doc = " ".join((model.__doc__ or "").split())
    text = " ".join(words)
    return f"{text}: {doc}" if doc else text


def _tables(
    root: type[BaseModel],
    header: tuple[str, ...],
    row: Callable[[type[BaseModel], str, FieldInfo], tuple[str, ...]],
) -> str:
    parts = []
    for model, places in _sections(root):
        fields = model.model_fields.items()
        parts.append(_intro(model, places))
        parts.append(table(header, (row(model, n, f) for n, f in fields if not _refused(f))))
        refused = [f"`{_name(n, f)}`" for n, f in fields if _refused(f)]
        if refused:
            parts.append(f"Refused unless absent or `null`: {', '.join(refused)}.")
    return "\n\n".join(parts)


def request_fields(root: type[BaseModel]) -> Callable[[], str]:
    header = ("Field", "Type", "Default", "Constraint", "Meaning")
    return lambda: _tables(root, header, _request_row)


def response_fields(root: type[BaseModel]) -> Callable[[], str]:
    return lambda: _tables(root, ("Field", "Type", "Meaning"), _response_row)


def example(path: str, body: dict[str, Any]) -> Callable[[], str]:
    """A curl command sending `body`, one of the OpenAPI document's examples."""

    def render() -> str:
        text = json.dumps(body, indent=2, ensure_ascii=False)
        assert "'" not in text, "the example must fit in a shell's single quotes"
        command = f"curl -s localhost:8080{path} -H 'Content-Type: application/json' -d '{text}'"
        return f"```sh\n{command}\n```"

    return render


OPENAPI = "container/decision_adapter/http/openapi.py"
BLOCKS = [
    Block("decision-request", f"{FORMATS}/decision.py", request_fields(DecisionRequest)),
    Block("decision-result", f"{FORMATS}/decision.py", response_fields(DecisionResult)),
    Block("decision-example", OPENAPI, example("/invocations", openapi.DECISION_EXAMPLE)),
    Block("chat-request", f"{FORMATS}/openai_chat.py", request_fields(ChatRequest)),
    Block("chat-example", OPENAPI, example("/v1/chat/completions", openapi.CHAT_EXAMPLE)),
    Block("systemone-request", f"{FORMATS}/systemone.py", request_fields(SystemOneRequest)),
    Block("systemone-example", OPENAPI, example("/v1/systemone", openapi.SYSTEM_ONE_EXAMPLE)),
    Block("decisions-request", f"{FORMATS}/openai_decisions.py", request_fields(DecisionsRequest)),
    Block("decisions-example", OPENAPI, example("/v1/decisions", openapi.OPENAI_DECISIONS_EXAMPLE)),
]
