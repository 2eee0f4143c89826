"""A state is rendered (indented JSON, NFC) once per request, however many questions it has: a
deeply nested state rendered once per question cost 67.6 s for 32 questions before."""

from __future__ import annotations

import asyncio
import json

from decision_adapter import prompts
from decision_adapter.contract import Question, StateQuestion
from decision_adapter.prompts import StateText, state_text
from decision_adapter.service import DecisionService
from decision_adapter.settings import Settings

STATE = {"ticket": {"subject": "Refund", "lines": [["charged", "twice"]] * 20}}


def test_a_rendered_state_renders_as_itself():
    text = state_text(STATE)
    assert isinstance(text, StateText) and state_text(text) is text
    assert state_text("e\u0301 \n") == "\u00e9"  # a string state: NFC, trailing space gone


def test_a_state_shared_by_every_question_is_rendered_once(gemma_gguf, monkeypatch):
    service = DecisionService(Settings(model_path=gemma_gguf, n_threads=2))
    renders = []
    dumps = json.dumps

    def counted(value, **options):
        if value is STATE:
            renders.append(value)
        return dumps(value, **options)

    monkeypatch.setattr(prompts.json, "dumps", counted)
    questions = [
        StateQuestion(STATE, Question(f"Question {n}?", ["yes", "no"], [None, None]))
        for n in range(8)
    ]
    try:
        scored = asyncio.run(service.score(questions))
    finally:
        service.close()
    assert all(answer is not None for answer in scored.answers)
    assert len(renders) == 1
