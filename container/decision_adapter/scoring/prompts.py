"""Rendering decisions and chats into token pieces.

User text (state, question, option ids and descriptions, chat content) is always tokenized as
plain text, so a control-token string such as `<end_of_turn>` inside it stays text. Only the
chat template's own scaffolding is parsed for special tokens. With a GGUF chat template the
user content is rendered through placeholders and substituted afterwards, which keeps that line
exact whatever the template does around the content.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import ChatTemplateError
from ..model.engine import Engine

PROMPT_VERSION = "decision-prompt-v1"
SYSTEM_TEXT = (
    "You are a decision model. Read the state, then answer the question by choosing exactly one "
    "of the labelled options."
)
# The option-text readouts: the question, then this; each option's words are the continuation.
# The options are not listed, so the prompt does not depend on them or their order (listing
# them brought the position bias back: research/readout_study/results/readout_study.md).
CLOZE_LEAD = "\nThe correct answer is"
# The json_choice readout: the answer cue published frozen-model decision servers use. The
# candidates are listed in one canonical order (sorted), so their order in the request cannot
# change the prompt; the assistant turn is prefilled with the JSON opener, and each candidate's
# name, closed by its quote, is the continuation read.
JSON_CHOICE_ASK = 'Answer with JSON: {"choice": "<exactly one candidate name>"}'
JSON_CHOICE_OPEN = '{"choice": "'
JSON_CHOICE_CLOSE = '"'
CONTENT_FREE_STATE = "N/A"  # what the calibrated readout asks about instead of the state


@dataclass
class Piece:
    text: str
    user: bool  # user text: tokenized without parsing special tokens


@dataclass
class RenderedPrompt:
    """A prompt as (state prefix, question suffix) pieces; the prefix may be shared."""

    prefix: list[Piece]
    suffix: list[Piece] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(piece.text for piece in self.prefix + self.suffix)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


class StateText(str):
    """A state already rendered by state_text: it renders as itself, at no cost."""


def state_text(state: Any) -> StateText:
    """A string state as sent; a JSON state as indented JSON in the order it was sent. Either
    in Unicode NFC and without trailing whitespace: a composed and a decomposed `é`, or a final
    newline, read the same to a person and must not be two states with two answers."""
    if isinstance(state, StateText):
        return state
    text = state if isinstance(state, str) else json.dumps(state, ensure_ascii=False, indent=2)
    return StateText(unicodedata.normalize("NFC", text).rstrip())


class PromptRenderer:
    """Turns decisions and chats into pieces and tokens for one model."""

    def __init__(self, engine: Engine, template: str | None = None) -> None:
        """`template` replaces the GGUF's own chat template (None: use the GGUF's, if any)."""
        self.engine = engine
        self.template = template or engine.chat_template
        if self.template:
            environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            environment.globals["raise_exception"] = _raise_template_error
            environment.globals["strftime_now"] = lambda f: datetime.now(UTC).strftime(f)
            try:
                self._compiled = environment.from_string(self.template)
            except TemplateError as error:
                raise ChatTemplateError(
                    f"the GGUF's chat template does not compile: {error}"
                ) from None
            try:  # every decision is rendered this way: refuse a template that cannot do it now
                self._around_user_content([{"role": "user"}])
            except ChatTemplateError as error:
                raise ChatTemplateError(
                    f"the GGUF's chat template cannot render a decision: " f"{error}"
                ) from None
        # The answer follows "Answer:" in a plain prompt and opens the assistant turn otherwise.
        self.label_prefix = "" if self.template else " "
        # Without a template the model would write the next "User:" turn itself.
        self.chat_stops = [] if self.template else ["\nUser:"]

    @property
    def mode(self) -> str:
        return "chat-template" if self.template else "completion"

    # --- decisions ---------------------------------------------------------------------
    def decision(
        self, state: Any, question: str, options: list[tuple[str, str, str | None]]
    ) -> RenderedPrompt:
        """options: (label, option id, description) in request order."""
        lines = [f"Question: {question}", "Options:"]
        for label, option_id, description in options:
            lines.append(f"{label}. {option_id}" + (f": {description}" if description else ""))
        lines.append("Answer with only the label of the best option.")
        return self._question(state, "\n".join(lines), "\nAnswer:")

    def cloze(self, state: Any, question: str) -> RenderedPrompt:
        """The option-text readouts' prompt: the same state prefix, the question, CLOZE_LEAD."""
        return self._question(state, f"{question}{CLOZE_LEAD}", "")

    def json_choice(
        self, state: Any, question: str, candidates: list[tuple[str, str | None]]
    ) -> RenderedPrompt:
        """The json_choice readout's prompt: the question, its candidates (name, description)
        as given, the JSON ask, and the assistant's answer opened with JSON_CHOICE_OPEN."""
        lines = [question, "Candidates:"]
        lines += [f"- {name}" + (f": {about}" if about else "") for name, about in candidates]
        lines.append(JSON_CHOICE_ASK)
        prompt = self._question(state, "\n".join(lines), "\nAnswer:")
        opener = JSON_CHOICE_OPEN if self.template else f" {JSON_CHOICE_OPEN}"
        prompt.suffix.append(Piece(opener, user=True))
        return prompt

    def _question(self, state: Any, question_block: str, plain_end: str) -> RenderedPrompt:
        state_block = f"{SYSTEM_TEXT}\n\nState:\n{state_text(state)}\n\n"
        if not self.template:
            return RenderedPrompt(
                prefix=[Piece(state_block, user=True)],
                suffix=[Piece(question_block + plain_end, user=True)],
            )
        head, tail = self._around_user_content([{"role": "user"}])
        return RenderedPrompt(
            prefix=[Piece(head, user=False), Piece(state_block, user=True)],
            suffix=[Piece(question_block, user=True), Piece(tail, user=False)],
        )

    # --- chat --------------------------------------------------------------------------
    def chat(self, messages: list[dict[str, str]]) -> RenderedPrompt:
        if not self.template:
            lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
            return RenderedPrompt(prefix=[Piece("\n".join(lines) + "\nAssistant:", user=True)])
        markers = [f"\ue000{uuid.uuid4().hex}\ue001" for _ in messages]
        rendered = self._render(
            [{"role": m["role"], "content": k} for m, k in zip(messages, markers, strict=False)]
        )
        pieces: list[Piece] = []
        for number, (message, marker) in enumerate(zip(messages, markers, strict=False)):
            if marker not in rendered:  # some templates drop system messages: say so, not lose it
                raise ChatTemplateError(
                    f"it leaves out messages[{number}] (role {message['role']!r}) or moves it "
                    "out of order; send its text in another message"
                )
            before, _, rendered = rendered.partition(marker)
            pieces += [Piece(before, user=False), Piece(message["content"], user=True)]
        pieces.append(Piece(rendered, user=False))
        return RenderedPrompt(prefix=pieces)

    # --- tokens ------------------------------------------------------------------------
    def tokens(
        self, pieces: list[Piece], *, starts_prompt: bool, limit: int | None = None
    ) -> list[int]:
        """TokenLimitExceeded, untokenized, when one piece is cheaply proved past `limit`."""
        tokens: list[int] = []
        for piece in pieces:
            if piece.text:
                tokens += self.engine.tokenize(piece.text, special=not piece.user, limit=limit)
        if starts_prompt and self.engine.adds_bos and tokens[:1] != [self.engine.bos_token]:
            tokens.insert(0, self.engine.bos_token)
        return tokens

    def label_tokens(
        self, label: str, limit: int | None = None, *, opened: bool = False
    ) -> list[int]:
        """A label, or an option's words, as the model would write it next (user text);
        TokenLimitExceeded, untokenized, when cheaply proved past `limit`. `opened`: written
        inside an answer already begun (json_choice's quote), so never after a space."""
        prefix = "" if opened else self.label_prefix
        return self.engine.tokenize(prefix + label, special=False, limit=limit)

    # --- template plumbing -------------------------------------------------------------
    def _render(self, messages: list[dict[str, str]]) -> str:
        try:
            return self._compiled.render(
                messages=messages,
                add_generation_prompt=True,
                enable_thinking=False,  # decisions read the very next token; no reasoning block
                bos_token=self.engine.piece(self.engine.bos_token).decode("utf-8", "replace"),
                eos_token="",
            )
        except ChatTemplateError:
            raise
        except Exception as error:  # noqa: BLE001 - a template is code we did not write
            raise ChatTemplateError(
                f"chat template error: {type(error).__name__}: {error}"
            ) from None

    def _around_user_content(self, messages: list[dict[str, str]]) -> tuple[str, str]:
        marker = f"\ue000{uuid.uuid4().hex}\ue001"
        head, found, tail = self._render([{**messages[0], "content": marker}]).partition(marker)
        if not found:
            raise ChatTemplateError("the chat template dropped the user message")
        return head, tail


def _raise_template_error(message: str) -> None:
    raise ChatTemplateError(f"chat template error: {message}")
