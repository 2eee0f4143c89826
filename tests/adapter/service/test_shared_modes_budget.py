"""The modes that share the model (batched decisions, chat streams) keep the promises the
one-at-a-time mode keeps (docs/hardening.md): no 5xx within the limits, a failure reaching only
its own request. Each test runs the adapter in the mode that broke the promise."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import numpy as np
import pytest
from decision_adapter.contract import Question
from decision_adapter.deadline import NEVER
from decision_adapter.errors import EngineError
from decision_adapter.model.streams import StreamContext
from decision_adapter.model.tokenizer import TokenLimitExceeded
from decision_adapter.scoring.budget import TokenBudget
from decision_adapter.scoring.score import build_plan, score
from decision_adapter.service.admission import ModelRunner
from decision_adapter.service.scoring_batching import ScoringBatcher, sharing_work

from launcher import running_adapter, wait_until
from tests.support.adapter_process import LONG_CHAT, model_held, post_together
from tests.support.bodies import decision

LIMIT = 1024  # DECISION_MAX_REQUEST_TOKENS: a multiple of llama.cpp's 256-cell rounding
QUESTION = "Is it?"


def _at_the_limit(renderer) -> tuple[dict, int]:
    """The heaviest decision batched mode admits: charged at most LIMIT tokens (its tokens and
    what its rounds do besides, padding included: scoring_batching.sharing_work), one word more
    over it, its question suffix padded (no multiple of 8 tokens); and its tokens."""
    question = Question(QUESTION, ["yes", "no"], [None, None], readout="letters")
    for words in range(LIMIT, 0, -1):
        state = "ab " * words
        try:
            plan = build_plan(renderer, state, [question], TokenBudget(LIMIT))
        except TokenLimitExceeded:
            continue
        suffix = plan.total_tokens - len(plan.prefix_tokens)
        if plan.cost + sharing_work(plan).cost <= LIMIT and suffix % 8:
            assert plan.total_tokens > LIMIT - 2 * 8  # the limit less its padding
            return decision(state, QUESTION, ("yes", "no"), readout="letters"), plan.total_tokens
    raise AssertionError("no state fits the limit")


@pytest.mark.serial
def test_a_batched_decision_at_the_token_limit_and_its_round_are_answered(renderer, tmp_path):
    """Finding 1: pieces padded to 8 rows ran past streams of exactly the limit's cells, and
    the failed call failed every request of its round with a 500. The budget now charges the
    padding too; the heaviest request it admits and its round are answered, one word more is
    a 413."""
    at_limit, tokens = _at_the_limit(renderer)
    small = [decision("The printer is on fire.", f"Team {i}?", ("it", "ops")) for i in range(6)]
    with running_adapter(
        tmp_path,
        DECISION_MAX_SCORING_REQUESTS="8",
        DECISION_MAX_REQUEST_TOKENS=str(LIMIT),
        DECISION_STATE_CACHE_BYTES="0",
    ) as adapter:
        url = adapter.url + "/invocations"
        replies = post_together(url, [at_limit, *small])
        for reply in replies:
            assert reply.status_code == 200, reply.text
        assert replies[0].json()["result"]["timing"]["request_tokens"] == tokens
        over = decision(at_limit["decision"]["state"] + "ab ", QUESTION, ("yes", "no"))
        over["decision"]["readout"] = "letters"
        assert httpx.post(url, json=over, timeout=60).status_code == 413


def test_a_failed_call_fails_only_the_request_it_belongs_to(engine, renderer):
    """Finding 1's other half, in-process on streams of 256 cells: one request's question runs
    past its stream's cells in the call it shares with another request's question; only the
    request that overflowed fails, the other is answered with the bits it has alone."""
    runner = ModelRunner(max_queue=8, wait_s=60, retry_after_s=1, max_in_flight=2)
    context = StreamContext(
        engine, 4, 256, swa_full=True, flash_attention=engine.config.flash_attention
    )
    batcher = ScoringBatcher(context, runner)
    question = Question(QUESTION, ["yes", "no"], [None, None], readout="letters")
    words = next(
        words
        for words in range(300, 0, -1)
        if 250 <= build_plan(renderer, "ab " * words, [question]).total_tokens <= 256
    )
    overflowing = build_plan(renderer, "ab " * words, [question])
    fits = build_plan(renderer, "The printer is on fire.", [question])
    try:

        async def one(plan):
            (results, _), _ = await batcher.run(lambda d: score(d, plan), NEVER)
            return results[0].option_logits

        async def together():
            release = threading.Event()
            runner.submit(release.wait)  # both queue their first step before a round runs
            both = asyncio.gather(one(overflowing), one(fits), return_exceptions=True)
            scoring = asyncio.ensure_future(both)
            while batcher.queued_steps < 2:
                await asyncio.sleep(0.001)
            release.set()
            return await scoring

        alone = asyncio.run(one(fits))
        failed, answered = asyncio.run(together())
        assert isinstance(failed, EngineError), failed
        assert np.array_equal(answered, alone)
    finally:
        runner.close()
        batcher.close()


@pytest.mark.serial
def test_a_batched_decision_is_not_admitted_behind_a_chat_answered_whole(tmp_path):
    """Finding 3: with decisions batched and chat one at a time, a decision was admitted beside
    a running chat and waited out its whole answer (13.4 s; a 503 after 48.5 s on a slow host).
    Admission sees the chat holding the model: a prompt 503 after the slot grace, as one at a
    time, and a 200 once the chat has ended."""
    with running_adapter(tmp_path, DECISION_MAX_SCORING_REQUESTS="4") as adapter:
        url = adapter.url + "/invocations"
        body = decision("The printer is on fire.", "Which team?", ("it", "ops"))
        with model_held(adapter):  # a 1,000-token chat answered whole
            started = time.monotonic()
            refused = httpx.post(url, json=body, timeout=120)
            took = time.monotonic() - started
            still_held = adapter.stats()["admission"]["in_flight"] == 1
        assert refused.status_code == 503 and refused.headers["Retry-After"], refused.text
        assert refused.json()["error_type"] == "overloaded"
        assert took < 5 and still_held, took
        assert httpx.post(url, json=body, timeout=60).status_code == 200


CHAT_DEADLINE_S = 6
# A decision round's batch and a chat round: what may follow a chat's deadline before it ends.
ONE_ROUND_S = 3
# About 6,000 tokens of state: a one-at-a-time decision of many seconds' prefill.
HEAVY = decision(
    "The warehouse scanner logs show repeated timeouts on aisle 7. " * 460,
    "Which team?",
    ("data", "infra"),
)


@pytest.mark.serial
def test_chat_streams_end_at_their_deadline_whatever_decisions_run(tmp_path):
    """Finding 5: with chat streams batched and decisions one at a time, a decision's whole
    model work ran between two chat rounds; with a 6 s deadline chats ended at 9.4-13.4 s. Each
    chat now ends within its deadline plus one round; a decision cut short for it is a
    retryable 503 naming the chat deadline, and one sent alone afterwards a 200."""
    with running_adapter(
        tmp_path,
        DECISION_MAX_CHAT_STREAMS="4",
        DECISION_CHAT_DEADLINE_S=str(CHAT_DEADLINE_S),
        DECISION_STATE_CACHE_BYTES="0",
        DECISION_MAX_QUEUE="4",
    ) as adapter:
        chats: list[float] = []
        answers: list[httpx.Response] = []
        chatting = threading.Event()

        def chat() -> None:
            started = time.monotonic()
            reply = httpx.post(adapter.url + "/v1/chat/completions", json=LONG_CHAT, timeout=120)
            chats.append(time.monotonic() - started)
            assert reply.status_code == 200, reply.text
            assert reply.json()["choices"][0]["finish_reason"] == "length"

        def decide() -> None:
            while chatting.is_set():
                answers.append(httpx.post(adapter.url + "/invocations", json=HEAVY, timeout=120))

        talkers = [threading.Thread(target=chat) for _ in range(2)]
        for talker in talkers:
            talker.start()
        wait_until(
            lambda: adapter.stats()["chat_admission"]["in_flight"] == 2, what="2 chats running"
        )
        chatting.set()
        decider = threading.Thread(target=decide)
        decider.start()
        for talker in talkers:
            talker.join()
        chatting.clear()
        decider.join()
        assert len(chats) == 2 and max(chats) < CHAT_DEADLINE_S + ONE_ROUND_S, chats
        for answer in answers:
            assert answer.status_code in (200, 503), answer.text
            if answer.status_code == 503:
                assert answer.json()["retryable"] is True
        assert httpx.post(adapter.url + "/invocations", json=HEAVY, timeout=120).status_code == 200


def _many_choices(questions: int) -> dict:
    """`questions` decisions of 255 options on one 3,000-token state, read as option_text: 255
    option paths each, 3,834 tokens of budget for one, 6,249 for four (of 8,192)."""
    options = [{"id": f"{n} team"} for n in range(255)]
    return {
        "decisions": [
            {"id": f"q{n}", "state": "ab " * 3000, "question": f"Which team {n}?",
             "options": options, "readout": "option_text"}
            for n in range(questions)
        ]
    }  # fmt: skip


@pytest.mark.serial
def test_shared_mode_charges_what_its_rounds_do_so_what_cannot_finish_is_a_413_at_once(tmp_path):
    """Finding 4: shared, every option path restores its question's whole saved sequence, a
    cost the budget did not count (32 questions of 255 options on a 3,000-token state: 52% of
    the limit, always a "retryable" 503 at 45 s). The budget now charges what the rounds do
    beyond the tokens (sharing_work: restores, paths' shared tokens, padding): four such
    questions, 76% of the limit in tokens, cost 10,166 tokens' worth more: a 413 before any
    model work; one such question is answered."""
    with running_adapter(
        tmp_path, DECISION_MAX_SCORING_REQUESTS="4", DECISION_STATE_CACHE_BYTES="0"
    ) as adapter:
        url = adapter.url + "/invocations"
        started = time.monotonic()
        refused = httpx.post(url, json=_many_choices(4), timeout=120)
        took = time.monotonic() - started
        assert refused.status_code == 413, refused.text[:300]
        assert took < 10, took  # tokenizing 1,020 options, no model work
        assert adapter.stats()["engine"]["decode_calls"] == 0
        answered = httpx.post(url, json=_many_choices(1), timeout=120)
        assert answered.status_code == 200, answered.text[:300]


class CountingStreams(StreamContext):
    """The real streams, counting the rows each call decodes and the cells each restore
    loads: what the rounds do, to hold the budget's charge to."""

    rows = cells = 0

    def decode(self, entries):
        self.rows += len(entries)
        super().decode(entries)

    def restore(self, stream, state):
        super().restore(stream, state)
        self.cells += self.length(stream)


SHARED_WORK = {  # (state, options, readout): every readout's paths, padding and passes
    "one-token labels": ("ab " * 300, ["yes", "no"], "letters"),
    "255 options": ("ab " * 300, [f"{n} team" for n in range(255)], "option_text"),
    "descriptions": ("The printer is on fire.", ["it support", "facilities"], "option_text_desc"),
    "calibrated": ("ab " * 100, ["billing", "shipping", "returns"], "calibrated"),
    "rotations": ("ab " * 50, ["billing", "shipping", "returns"], "permuted_letters"),
    "json": ("ab " * 50, ["billing", "shipping department"], "json_choice"),
}


@pytest.mark.parametrize("name", SHARED_WORK)
def test_the_shared_charge_counts_what_the_rounds_decode_and_restore(engine, renderer, name):
    """Finding 4, measured: the charge batched mode adds is what its rounds do beyond the
    tokens one at a time decodes, row for row and cell for cell (the worst-case study times
    what it admits, research/budget_worst_case)."""
    state, options, readout = SHARED_WORK[name]
    questions = [Question(f"Which team {n}?", options, [None] * len(options), readout=readout)
                 for n in range(3)]  # fmt: skip
    plan = build_plan(renderer, state, questions)
    runner = ModelRunner(max_queue=8, wait_s=60, retry_after_s=1, max_in_flight=1)
    context = CountingStreams(
        engine, 2, 1024, swa_full=True, flash_attention=engine.config.flash_attention
    )
    batcher = ScoringBatcher(context, runner)
    try:
        asyncio.run(batcher.run(lambda decoder: score(decoder, plan), NEVER))
    finally:
        runner.close()
        batcher.close()
    passes = [len(plan.prefix_tokens)]
    if plan.content_free_prefix is not None:
        passes.append(len(plan.content_free_prefix))
    alone = sum(passes) + sum(
        question.tokens * (len(passes) if question.readout == "calibrated" else 1)
        for question in plan.questions
    )  # what one at a time decodes: each prefix once, each reading's suffix and tree
    work = sharing_work(plan)
    assert (context.rows - alone, context.cells) == (work.rows, work.cells)
    assert work.rows > 0 and (work.cells > 0 or readout == "letters")
