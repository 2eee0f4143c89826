"""A state is rendered (indented JSON, NFC) once per request, however many questions it has: a
deeply nested state rendered once per question cost 67.6 s for 32 questions before."""

from __future__ import annotations

import asyncio
import json
import time

from decision_adapter.contract import Question, StateQuestion
from decision_adapter.scoring import prompts
from decision_adapter.scoring.prompts import StateText, state_text
from decision_adapter.service.decision_service import DecisionService
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


def test_waiting_for_a_preparation_thread_is_not_charged_to_the_requests_deadline(
    gemma_gguf, monkeypatch
):
    """Two requests slow to prepare hold both preparation threads for a second; a small one
    waiting behind them keeps its own 0.5 s scoring deadline, counted from its preparation."""
    from decision_adapter.errors import OutOfTime

    settings = Settings(model_path=gemma_gguf, n_threads=2, scoring_deadline_s=0.5, max_queue=4)
    service = DecisionService(settings)  # a queue: the slow ones may reach the model first
    tokens = service.renderer.tokens

    def slow_for_slow_states(pieces, **options):
        if any("slow" in piece.text for piece in pieces):
            time.sleep(1.0)
        return tokens(pieces, **options)

    monkeypatch.setattr(service.renderer, "tokens", slow_for_slow_states)
    question = Question("Is it late?", ["yes", "no"], [None, None])

    async def three() -> list:
        slow = [service.score([StateQuestion(f"slow {n}", question)]) for n in range(2)]
        started = [asyncio.ensure_future(call) for call in slow]
        await asyncio.sleep(0.05)  # both threads taken
        small = await service.score([StateQuestion("The parcel is late.", question)])
        return [small, *await asyncio.gather(*started, return_exceptions=True)]

    try:
        small, *slow = asyncio.run(three())
    finally:
        service.close()
    assert small.answers[0] is not None
    assert all(isinstance(outcome, OutOfTime) for outcome in slow)  # their own time ran out
