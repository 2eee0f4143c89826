"""An adapter whose json_choice prompt is laid out as typed-gguf lays out its own, for the study.

typed-gguf reads the 1.5B better than our built-in readout (README.md, "The peer"). Its cue
differs from ours in where things sit, not in the ask: a system turn of its own, the state as
one user turn and each question as a second user turn, where ours puts the system line, the
state and the question into one user turn (so a template such as Qwen2.5's adds its default
system prompt). This serves the adapter with the json_choice prompt in one of those layouts, so
`variants.py` can measure each against the built-in one on the same splits:

- `system_turn`: our system line as the system turn; state and question in one user turn;
- `question_turn`: the system turn, the state as one user turn, the question as the next;
- `json_system`: as `question_turn`, the system turn also asking for a single JSON object.

A layout that earns its place moves into `scoring/prompts.py`; until then it lives here, as a
replacement of `PromptRenderer._question` in this process alone.

    python -m research.instruct_readouts.question_turn question_turn   # then variants.py
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from decision_adapter.__main__ import main as serve
from decision_adapter.scoring import prompts
from decision_adapter.scoring.prompts import Piece, PromptRenderer, RenderedPrompt, state_text

JSON_SYSTEM_TEXT = (
    prompts.SYSTEM_TEXT + " Reply with a single JSON object and nothing else: no explanation, "
    "no code fence, no extra keys."
)
LAYOUTS = ("system_turn", "question_turn", "json_system")


def laid_out(layout: str):
    system = JSON_SYSTEM_TEXT if layout == "json_system" else prompts.SYSTEM_TEXT
    built_in = PromptRenderer._question

    def question(
        self: PromptRenderer, state: Any, question_block: str, plain_end: str
    ) -> RenderedPrompt:
        if not self.template:
            return built_in(self, state, question_block, plain_end)
        state_block = f"State:\n{state_text(state)}"
        state_mark, question_mark = (f"\ue000{uuid.uuid4().hex}\ue001" for _ in range(2))
        if layout == "system_turn":
            turns = [{"role": "user", "content": f"{state_mark}\n\n{question_mark}"}]
        else:
            turns = [
                {"role": "user", "content": state_mark},
                {"role": "user", "content": question_mark},
            ]
        rendered = self._render([{"role": "system", "content": system}, *turns])
        head, _, rest = rendered.partition(state_mark)
        between, _, tail = rest.partition(question_mark)
        return RenderedPrompt(
            prefix=[
                Piece(head, user=False),
                Piece(state_block, user=True),
                Piece(between, user=False),  # the same whatever the question: shared too
            ],
            suffix=[Piece(question_block, user=True), Piece(tail, user=False)],
        )

    return question


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in LAYOUTS:
        print(f"usage: python -m {__spec__.name} {{{','.join(LAYOUTS)}}}", file=sys.stderr)
        return 2
    PromptRenderer._question = laid_out(args[0])  # type: ignore[method-assign]
    return serve(["serve"])


if __name__ == "__main__":
    raise SystemExit(main())
