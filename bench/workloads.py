"""What the benchmark sends: decisions, states of a chosen token length, and the chat prompt
that asks the same question as a decision. The load decision is `ops measure`'s
(ops/workloads.py), so local and deployed concurrency figures measure the same request."""

from __future__ import annotations

import os
import platform
from typing import Any

# The load decision and its parts are ops' (what `ops measure` sends), named here again (the
# `as` re-exports them) so the benchmark's modules read every workload from this one module.
from ops.workloads import LOAD_QUESTION
from ops.workloads import OPTIONS as OPTIONS
from ops.workloads import SHORT_STATE as SHORT_STATE
from ops.workloads import decision as decision
from ops.workloads import load_decision as load_decision

THREADS = 2
# The load decision's question first: the other fifteen vary a decision's suffix over one state.
QUESTIONS = [
    LOAD_QUESTION,
    "Which team owns the next action?",
    "Where should this be escalated first?",
    "Which specialist should reply?",
    "Which queue fits the customer's main problem?",
    "Which group resolves this fastest?",
    "Which backlog should this ticket join?",
    "Who should the agent hand this to?",
    "Which department should read this first?",
    "Which desk is responsible for this case?",
    "Which support line should call the customer back?",
    "Which queue has the right expertise?",
    "Which team should the supervisor assign this to?",
    "Where does this ticket belong?",
    "Which unit should own the follow-up?",
    "Which queue should the bot forward this to?",
]
# A chat prompt this base model answers at length (it counts on) rather than ending its turn.
LONG_CHAT_MESSAGE = "Count from 1 to 1000: 1, 2, 3,"
# A sampled chat's prompt: a story's next token has a flat distribution, where top_p alone would
# sort the whole vocabulary (counting on is too sure of itself to show it).
STORY_CHAT_MESSAGE = "Tell me a long story about a fox who learns to sail."
# The prompt-length sweep uses the smallest decision (two bare options) so 64 tokens fits.
LENGTH_QUESTION = "Is this urgent?"
LENGTH_OPTIONS = [{"id": "yes"}, {"id": "no"}]
FILLER = (
    "The customer wrote again about the failed password reset and the locked account. Their "
    "order from last week arrived late, the invoice showed a duplicate charge, and the support "
    "chat disconnected twice before anyone could answer. They ask for a call back tomorrow "
    "morning and mention that their manager is waiting for a resolution. "
)


def machine_name() -> str:
    return f"{platform.machine()}-{os.cpu_count()}cpu"


def long_state(tokens_wanted: int, renderer) -> str:
    """A state of at least `tokens_wanted` tokens (the shared-state experiment's 1,000)."""
    sentence = "The customer wrote again about the failed reset and the locked account. "
    text = sentence
    while len(renderer.engine.tokenize(text, special=False)) < tokens_wanted:
        text += sentence
    return text


def decision_prompt(
    renderer, state: Any, question: str, options: list[dict[str, Any]]
) -> tuple[list[int], list[list[int]]]:
    """The exact tokens the adapter decodes for one decision (state prefix + question suffix),
    and each option label's tokens, in the options' order."""
    from decision_adapter.contract import Question
    from decision_adapter.scoring.score import build_plan

    plan = build_plan(
        renderer,
        state,
        [Question(question, [o["id"] for o in options], [o.get("description") for o in options])],
    )
    asked = plan.questions[0]
    return plan.prefix_tokens + asked.suffix_tokens, asked.label_tokens


def prompt_tokens(renderer, state: Any, question: str, options: list[dict[str, Any]]) -> list[int]:
    return decision_prompt(renderer, state, question, options)[0]


def chat_tokens(renderer, messages: list[dict[str, str]]) -> list[int]:
    """The tokens the adapter's /v1/chat/completions generates after, as its service renders
    them (decision_adapter.service.decision_service.DecisionService.prepare_chat)."""
    return renderer.tokens(renderer.chat(messages).prefix, starts_prompt=True)


def state_for_prompt_length(renderer, total_tokens: int) -> tuple[str, list[int]]:
    """The longest filler state whose whole decision prompt stays within `total_tokens`
    (binary search on words); returns the state and the prompt's tokens."""
    words = (FILLER * (total_tokens // 40 + 2)).split()

    def tokens_for(count: int) -> list[int]:
        return prompt_tokens(
            renderer, " ".join(words[:count]) or "-", LENGTH_QUESTION, LENGTH_OPTIONS
        )

    low, high = 1, len(words)
    if len(tokens_for(low)) > total_tokens:
        raise ValueError(f"a decision prompt needs more than {total_tokens} tokens")
    while low < high:
        middle = (low + high + 1) // 2
        if len(tokens_for(middle)) <= total_tokens:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low]), tokens_for(low)


def chat_prompt(item: dict[str, Any]) -> tuple[str, list[str]]:
    """The decision prompt's own text (system line, state, question, lettered options and the
    instruction), as one user message; returns it and the option labels in order."""
    from decision_adapter.scoring.prompts import SYSTEM_TEXT, state_text
    from decision_adapter.scoring.score import option_labels

    labels = option_labels(len(item["options"]))
    lines = [
        f"{SYSTEM_TEXT}\n\nState:\n{state_text(item['state'])}\n",
        f"Question: {item['question']}",
        "Options:",
    ]
    for label, option in zip(labels, item["options"], strict=False):
        description = option.get("description")
        lines.append(f"{label}. {option['id']}" + (f": {description}" if description else ""))
    lines.append("Answer with only the label of the best option.")
    return "\n".join(lines), labels


def parse_letter(text: str, labels: list[str]) -> str | None:
    """The label a chat answer names ('B', ' b.', '(B)'), or None when it names none."""
    cleaned = text.strip().strip(".:)(*[]'\"").strip().upper()
    return cleaned if cleaned in labels else None
