"""What scoring asks of the model, and the engine's one-request-at-a-time way of doing it.

A decision decodes a state once, then per question a suffix after the state, then the options'
later tokens as paths after the question (a prefix tree). `Decoder` is those steps;
`SharedContextDecoder` runs them in the engine's unified context, one request at a time, with
its state, question and paths as sequences of that context; service/scoring_batching.py's
`LaneDecoder` runs them as steps of the decision rounds, in KV streams lent to each call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from ..model.engine import Branch, Engine
from ..model.prefix_tree import Node

PREFIX_SEQ = 0
QUESTION_SEQ = 1  # every question suffix in turn; its branches take the sequences after it
FIRST_BRANCH_SEQ = QUESTION_SEQ + 1

Read = TypeVar("Read")


class Decoder(Protocol):
    """One request's model steps, in this order: `begin`, then `prefill` (unless its saved
    state is kept) and `use_state`, then per question `question`, any `paths`, `end_question`;
    `end` last, whatever happened."""

    def begin(self) -> None: ...

    def prefill(self, tokens: Sequence[int]) -> bytes:
        """Decode a state on a fresh sequence; the sequence as llama.cpp saves it."""
        ...

    def use_state(self, saved: bytes) -> None:
        """The saved state (from `prefill`, now or kept) is what the next questions follow."""
        ...

    def question(self, suffix: Sequence[int]) -> np.ndarray:
        """Decode a question's suffix after the state; a copy of its last position's logits."""
        ...

    def paths(
        self, nodes: Sequence[Node], n_paths: int, read: Callable[[int, np.ndarray], Read]
    ) -> list[Read]:
        """Decode `n_paths` paths after the question as the prefix tree `nodes`
        (prefix_tree.tree_nodes); what `read` returns for the logits after each node."""
        ...

    def end_question(self) -> None: ...

    def end(self) -> None: ...


class SharedContextDecoder:
    """The steps as sequences of the engine's unified context: the state on PREFIX_SEQ, the
    question on QUESTION_SEQ (a copy of the state's cells, no data moved), the paths on the
    sequences after it, a token shared by several paths decoded once for all of them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def begin(self) -> None:
        self.engine.reset()

    def prefill(self, tokens: Sequence[int]) -> bytes:
        self.engine.decode_sequence(PREFIX_SEQ, tokens, start=0)
        return self.engine.save_sequence(PREFIX_SEQ)

    def use_state(self, saved: bytes) -> None:
        self.engine.reset()
        self.engine.restore_sequence(PREFIX_SEQ, saved)

    def question(self, suffix: Sequence[int]) -> np.ndarray:
        last = len(suffix) - 1
        branch = Branch(tokens=suffix, parent=PREFIX_SEQ, logit_positions=[last])
        (logits,) = self.engine.decode_branches([branch], first_seq_id=QUESTION_SEQ)
        return logits[last]  # decode_branches' default reader copies the row

    def paths(
        self, nodes: Sequence[Node], n_paths: int, read: Callable[[int, np.ndarray], Read]
    ) -> list[Read]:
        results = self.engine.decode_prefix_tree(
            nodes, n_paths, QUESTION_SEQ, FIRST_BRANCH_SEQ, read
        )
        for offset in range(n_paths):
            self.engine.drop_sequence(FIRST_BRANCH_SEQ + offset)
        return results

    def end_question(self) -> None:
        self.engine.drop_sequence(QUESTION_SEQ)

    def end(self) -> None:
        self.engine.reset()
