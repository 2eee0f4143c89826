"""Text fields shared by the decision formats: what counts as blank, what an option name may hold.

Option names are written into the prompt, one per line: a newline in a name would add a line
the model reads as another option, so names hold no control or line-separator characters.
Blank means nothing visible: whitespace, format characters (zero-width space, joiners, BOM)
and Unicode's default-ignorable code points (Hangul fillers, variation selectors, ...) only.
Names are compared after Unicode NFC normalization, since a composed and a decomposed `é` read
the same to the model; they are rejected as duplicates, never rewritten.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, StrictStr
from pydantic_core import PydanticCustomError

from ..contract import MAX_OPTIONS

# Cf: format (zero-width space U+200B, joiners, BOM); Zs/Zl/Zp: spaces and separators.
_INVISIBLE = {"Cf", "Zs", "Zl", "Zp", "Cc"}
# Characters that break a prompt line: C0/C1 controls and the Unicode line/paragraph separators.
_LINE_BREAKING = {"Cc", "Zl", "Zp"}


# Default_Ignorable_Code_Point, from Unicode's DerivedCoreProperties.txt (unchanged since
# Unicode 14; Python's unicodedata does not expose it): code points a renderer shows as nothing,
# the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0 among them.
_DEFAULT_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
_BRAILLE_BLANK = "\u2800"  # a braille cell with no dots: a visible blank, not a letter


def is_blank(text: str) -> bool:
    return all(
        char.isspace()
        or unicodedata.category(char) in _INVISIBLE
        or char == _BRAILLE_BLANK
        or _DEFAULT_IGNORABLE.match(char)
        for char in text
    )


def _not_blank(text: str) -> str:
    """Not blank: whitespace and invisible characters alone are blank."""
    if is_blank(text):
        raise ValueError(
            "must contain a visible character (whitespace and zero-width "
            "characters alone are blank)"
        )
    return text


def _single_line_name(text: str) -> str:
    """Not blank, and one line: no control or line-separator characters."""
    text = _not_blank(text)
    bad = next((c for c in text if unicodedata.category(c) in _LINE_BREAKING), None)
    if bad is not None:
        raise ValueError(
            f"must not contain control or line-separator characters "
            f"(found {ascii(bad)}): it is written into the prompt as one line"
        )
    return text


NonBlank = Annotated[StrictStr, Field(min_length=1, pattern=r"\S"), AfterValidator(_not_blank)]
OptionName = Annotated[
    StrictStr, Field(min_length=1, pattern=r"\S"), AfterValidator(_single_line_name)
]


# The OpenAI SDK's limit for a JSON part, held for every format's JSON state: a state renders
# as indented JSON, one line per value, so its values bound the prompt's text before it exists.
MAX_STATE_VALUES = 10_000


def bounded_json(value: Any) -> Any:
    if isinstance(value, str):
        return value
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_STATE_VALUES:
            raise ValueError(
                f"holds more than {MAX_STATE_VALUES:,} JSON values (objects, arrays and the "
                "values in them), the OpenAI SDK's limit for a JSON part; send less of it"
            )
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


bounded_json.__doc__ = (
    f"At most {MAX_STATE_VALUES:,} JSON values (objects, arrays and the values in them)."
)


def at_most(count: int) -> BeforeValidator:
    """A list's or an object's cap, checked before any of its items. pydantic validates every
    item of an object (and of a list without `max_length`) before it counts them, one error per
    bad item: 500,000 bad items in a 1 MiB body were seconds of validation and of error dicts.
    Put outside a union (`Annotated[str | list[...], at_most(n)]`) it caps the list member."""

    def capped(value: Any) -> Any:
        if isinstance(value, (list, dict)) and len(value) > count:
            raise PydanticCustomError(
                "too_long",
                "at most {max_length} items, not {actual_length}",
                {"max_length": count, "actual_length": len(value)},
            )
        return value

    return BeforeValidator(capped)


# A decision's state: text, or JSON the prompt shows as indented JSON.
State = Annotated[StrictStr | dict[str, Any] | list[Any], AfterValidator(bounded_json)]


def options_field() -> Any:
    """A question's options: two at least, at most what the service scores, unique names."""
    return Field(
        min_length=2,
        max_length=MAX_OPTIONS,
        description="The options to choose from, in order; each name unique once "
        "Unicode-normalized (NFC: a composed and a decomposed `é` are one name); a repeat is "
        "refused, naming it.",
    )


def check_unique_names(names: Iterable[str], what: str) -> None:
    """Raise ValueError naming the first two names that are equal once NFC-normalized."""
    seen: dict[str, str] = {}
    for name in names:
        key = unicodedata.normalize("NFC", name)
        if key in seen:
            first = seen[key]
            if first == name:
                raise ValueError(f"duplicate {what} {name!r}")
            raise ValueError(
                f"duplicate {what}: {ascii(first)} and {ascii(name)} are the same "
                "text once Unicode-normalized (NFC)"
            )
        seen[key] = name


def min_confidence_field(description: str) -> Any:
    """A caller's minimum top probability, below which the answer abstains (None: never)."""
    return Field(
        default=None, gt=0.0, le=1.0, allow_inf_nan=False, strict=True, description=description
    )
