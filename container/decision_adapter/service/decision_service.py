"""The served model's two operations: score questions about states, and generate a chat answer.

Knows no wire format: the formats turn bodies into `StateQuestion`s and `Chat`s and encode what
comes back. Owns the engine, its admission and the state cache.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from ..calibration import load_calibration
from ..contract import (
    WORK_DEADLINE,
    Answer,
    Chat,
    Generated,
    SampledToken,
    Scored,
    StateQuestion,
    TextDelta,
    TokenChoice,
)
from ..deadline import NEVER, Deadline
from ..errors import (
    EngineError,
    OutOfTime,
    RequestError,
    ShuttingDown,
    TooManyQuestions,
    over_token_budget,
    too_many_tokens_requested,
)
from ..model.decision_head import read_decision_head, reads_embeddings
from ..model.engine import DeadlinePassed, Engine, EngineConfig, Sampling
from ..model.files import load_model_file
from ..model.streams import StreamContext, kv_bytes, memory_left
from ..model.tokenizer import TokenLimitExceeded
from ..scoring import trained_head
from ..scoring.budget import TokenBudget
from ..scoring.prompts import PromptRenderer, state_text
from ..scoring.score import (
    ContentFreeScores,
    QuestionsOverBudget,
    ScoringPlan,
    ScoringTiming,
    build_plan,
    score,
)
from ..scoring.state_cache import StateCache
from ..settings import Settings
from .admission import ModelRunner
from .chat_batching import ChatBatcher
from .daemon_threads import on_daemon_thread
from .generation import text_events
from .identity import model_identity
from .scoring_batching import LaneDecoder, ScoringBatcher, sharing_work, stream_cells

T = TypeVar("T")


def _ms(since: float) -> float:
    """The milliseconds since `since` (time.monotonic(), the clock of deadline.Deadline)."""
    return round((time.monotonic() - since) * 1000, 3)


def _request_timing(timings: list[dict[str, Any]]) -> dict[str, Any]:
    """One request's timing: its only state's, or the states' model work added up."""
    if len(timings) == 1:
        return timings[0]
    timing = dict(timings[0])
    for key in ("prefill_ms", "branches_ms", "prefix_tokens"):
        timing[key] = round(sum(group[key] for group in timings), 3)
    timing["state_cache"] = ",".join(group["state_cache"] for group in timings)
    timing["states"] = len(timings)
    return timing


def engine_config(settings: Settings) -> EngineConfig:
    """The engine's context as the settings ask for it (the GPU bisection loads it so too)."""
    return EngineConfig(
        n_ctx=settings.n_ctx,
        n_batch=settings.n_batch,
        n_threads=settings.n_threads,
        n_gpu_layers=settings.n_gpu_layers,
        n_seq_max=settings.n_seq_max,
        extra_buffer_types=settings.extra_buffer_types,
    )


def model_runner(
    settings: Settings, *, max_in_flight: int = 1, model_thread: ThreadPoolExecutor | None = None
) -> ModelRunner:
    """A runner admitting as the settings say (queue, wait, Retry-After, grace); on
    `model_thread` where given, else on a model thread of its own."""
    return ModelRunner(
        max_queue=settings.max_queue,
        wait_s=settings.admission_wait_s,
        retry_after_s=settings.retry_after_s,
        grace_s=settings.slot_grace_ms / 1000,
        max_in_flight=max_in_flight,
        model_thread=model_thread,
    )


def refuse_unless_kv_fits(reserved: Sequence[tuple[str, int, int, str]]) -> None:
    """On the CPU the batched contexts' KV streams are host memory, reserved (and zeroed) at
    once: a start they do not fit, together, would be killed for memory, or be at the next
    request's mercy. `reserved`: each context's setting, its value, its streams' bytes (0: not
    made) and what one of the value is."""
    reserved = [part for part in reserved if part[2]]
    need = sum(size for _, _, size, _ in reserved)
    left, bound = memory_left()
    if need <= max(left, 0):
        return
    named = " and ".join(f"{setting}={value}" for setting, value, _, _ in reserved)
    each = ", ".join(f"{size / value / 2**20:.0f} MiB {one}" for _, value, size, one in reserved)
    its, it = ("its", "it") if len(reserved) == 1 else ("their", "them")
    raise EngineError(
        f"{named}: {its} KV streams need {need / 2**30:.1f} GiB ({each}), more than the "
        f"{max(left, 0) / 2**30:.1f} GiB {bound} leaves; lower {it}, or "
        "DECISION_MAX_REQUEST_TOKENS"
    )


class DecisionService:
    """The real model behind the `contract.ModelService` protocol."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        model_file = load_model_file(settings)
        calibration = load_calibration(
            settings.calibration_temperature,
            model_file.path,
            model_file.sha256,
            settings.calibration_profiles,
        )
        self.engine = Engine(
            model_file.path,
            engine_config(settings),
            # A decision head read through hidden states (kev, laya) needs an embeddings context.
            embeddings=reads_embeddings,
        )
        # A trained decision model answers with its own head, not a prompt readout.
        self.decision_head = read_decision_head(self.engine)
        self.renderer = PromptRenderer(self.engine)
        calibration = calibration.for_prompt_mode(self.renderer.mode)
        self.state_cache = StateCache(settings.state_cache_budget, model_id=model_file.sha256)
        self.content_free = ContentFreeScores(settings.content_free_cache_bytes)
        self.runner = model_runner(settings)  # decisions and chats one at a time; the thread
        # Batched chat streams: admitted apart from decisions, run on the same model thread.
        # An embeddings context has no logits: such a model answers decisions only (generate).
        chats = settings.max_chat_streams
        chatting = chats > 1 and not self.engine.embeddings
        # Batched decisions: admitted apart from chat, their rounds on the same model thread.
        # A hybrid model's recurrent state cannot drop a round's padding (scoring_batching.py).
        # A decision head decodes each prompt alone in the engine's context (trained_head.py).
        lanes = settings.max_scoring_requests
        sharing = lanes > 1 and self.engine.memory_kind != "hybrid" and self.decision_head is None
        tokens = settings.request_token_limit
        # A call of a round lends a stream to each span: a state, a question or a path.
        cells = stream_cells(tokens)
        # The KV streams of each, counted before either is reserved (logged at start-up).
        self.chat_kv_bytes = kv_bytes(self.engine, chats, tokens) if chatting else 0
        self.shared_kv_bytes = (
            kv_bytes(self.engine, 2 * lanes, cells, swa_full=True) if sharing else 0
        )
        if settings.n_gpu_layers == 0:
            refuse_unless_kv_fits(
                [
                    ("DECISION_MAX_SCORING_REQUESTS", lanes, self.shared_kv_bytes, "a request"),
                    ("DECISION_MAX_CHAT_STREAMS", chats, self.chat_kv_bytes, "a chat stream"),
                ]
            )
        self.chat_runner: ModelRunner | None = None
        self.chat_batcher: ChatBatcher | None = None
        if chatting:
            self.chat_runner = model_runner(
                settings, max_in_flight=chats, model_thread=self.runner.model_thread
            )
            self.chat_batcher = ChatBatcher(
                StreamContext(
                    self.engine,
                    chats,
                    tokens,
                    flash_attention=self.engine.config.flash_attention,  # as the engine's own
                ),
                self.chat_runner,
                shared=settings.chat_shared_batches,
            )
        self.scoring_runner: ModelRunner | None = None
        self.scoring_batcher: ScoringBatcher | None = None
        if sharing:
            self.scoring_runner = model_runner(
                settings, max_in_flight=lanes, model_thread=self.runner.model_thread
            )
            streams = StreamContext(
                self.engine,
                2 * lanes,
                cells,
                swa_full=True,
                flash_attention=self.engine.config.flash_attention,  # as the engine's own context
            )
            self.scoring_batcher = ScoringBatcher(streams, self.scoring_runner)
            # A one-at-a-time job (a chat answered whole, a trained head's decisions) holds the
            # model thread from start to end: batched decisions admitted beside it would wait
            # it out, past their deadline, and it theirs.
            self.runner.share_model(self.scoring_runner)
        # Rendering and tokenizing run on threads of their own, two at a time, never on the
        # event loop (100 KB of newlines cost llama.cpp seconds before UserTextTokenizer) nor on
        # the model thread (a request over its budget must not hold the model). llama.cpp's
        # tokenizer only reads the vocabulary, which decoding leaves alone, and releases the
        # GIL. The threads are daemons: one llama.cpp call can take seconds (393 KB of
        # private-use characters: 3.4 s), and a shutdown does not wait for it.
        self._prepare_slots = asyncio.Semaphore(2)
        self._preparing = 0  # preparations whose thread still runs
        self._stopping = asyncio.Event()  # the shutdown deadline: preparation ends too
        self.identity = model_identity(
            model_file,
            self.engine,
            settings,
            prompt_mode=self.renderer.mode,
            calibration=calibration,
            decision_batching="alone" if self.scoring_batcher is None else "shared",
            decisions_at_once=1 if self.scoring_batcher is None else settings.max_scoring_requests,
            chat_batching="alone" if self.chat_batcher is None else self.chat_batcher.mode,
            decision_head=self.decision_head,
        )

    def close(self) -> None:
        self.runner.close()
        if self._preparing == 0:  # else a thread still reads the vocabulary: the process exits
            if self.chat_batcher is not None:
                self.chat_batcher.close()
            if self.scoring_batcher is not None:
                self.scoring_batcher.close()
            self.engine.close()

    def stop_work(self) -> None:
        """Shutdown deadline: end the model work in progress and refuse more."""
        self.runner.stop_work()
        if self.chat_runner is not None:
            self.chat_runner.stop_work()
        if self.scoring_runner is not None:
            self.scoring_runner.stop_work()
        self.engine.interrupt()  # tokenizing stops too, at its next call into llama.cpp
        self._stopping.set()

    def reserved(self) -> AbstractAsyncContextManager[None]:
        """One admission for several `score` calls of this task (see ModelRunner.reserved)."""
        return (self.scoring_runner or self.runner).reserved()

    async def _prepared(self, function: Callable[[], T]) -> tuple[T, float]:
        """`function()` on a preparation thread, and the seconds spent waiting for a thread:
        other requests' preparation, which the request's own deadline does not count. At the
        shutdown deadline the request ends at once with ShuttingDown (a 503 in its format),
        whatever the thread is still doing."""
        asked = time.monotonic()
        slot = asyncio.ensure_future(self._prepare_slots.acquire())
        try:
            await self._unless_stopping(slot)
        except BaseException:
            if slot.done() and not slot.cancelled():
                self._prepare_slots.release()
            slot.cancel()
            raise
        waited_s = time.monotonic() - asked
        work = on_daemon_thread(function, "prepare")
        self._preparing += 1
        work.add_done_callback(self._prepared_one)  # the slot is free when the thread is
        try:
            return await self._unless_stopping(work), waited_s
        except EngineError:
            if self._stopping.is_set():  # Engine.interrupt() stopped the tokenizer
                raise ShuttingDown(self.settings.retry_after_s) from None
            raise

    async def _unless_stopping(self, future: asyncio.Future[T]) -> T:
        """`future`'s result, or ShuttingDown as soon as the shutdown deadline comes."""
        stopped = asyncio.ensure_future(self._stopping.wait())
        try:
            either: set[asyncio.Future[Any]] = {future, stopped}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if self._stopping.is_set():
            raise ShuttingDown(self.settings.retry_after_s)
        return future.result()

    def _prepared_one(self, _: asyncio.Future[Any]) -> None:
        self._preparing -= 1
        self._prepare_slots.release()

    def stats(self) -> dict[str, Any]:
        return {
            "state_cache": self.state_cache.stats.as_dict(),
            "content_free_scores": self.content_free.as_dict(),
            "engine": self.engine.stats.as_dict(),
            "admission": self.runner.counters(),
            **({"chat_admission": self.chat_runner.counters()} if self.chat_runner else {}),
            **(
                {"scoring_admission": self.scoring_runner.counters()} if self.scoring_runner else {}
            ),
            "preparing": self._preparing,
        }

    def _beside_chats(self, until: Deadline) -> tuple[Deadline, bool]:
        """On the model thread, as a job that holds it whole starts: its deadline, brought
        forward to the soonest running chat's, and whether it was. The chats' next round waits
        for the job, so a chat ends at its deadline only if the job ends by then (a decision of
        45 s ended a 50 s chat at 63.7 s, past InvokeEndpoint's 60)."""
        if self.chat_batcher is None:
            return until, False
        chat = self.chat_batcher.earliest_deadline()
        return min(until, chat), chat < until

    # --- scoring -----------------------------------------------------------------------
    async def score(
        self, questions: Sequence[StateQuestion], *, refuse_unfit: bool = False
    ) -> Scored:
        """Limits, plans and budget, admission, then the engine. One group per distinct
        state: each is prefilled once and scored exactly as if it came alone, all in one model
        job. `refuse_unfit`: a question that cannot fit beside its state is answered None (a
        refusal) instead of failing the request; a state that leaves no room still fails it."""
        received = time.monotonic()
        if len(questions) > self.settings.max_decisions:
            raise TooManyQuestions(len(questions), self.settings.max_decisions)
        if self.decision_head is not None:
            return await self._score_with_head(questions, received)
        limit = self.settings.request_token_limit

        def make_plans() -> tuple[list[list[int]], list[ScoringPlan]]:
            # Grouped by the text the model reads: states equal in Python ({"paid": true} and
            # {"paid": 1}, 1 and 1.0, other key orders) render differently and are scored
            # apart. A rendered state renders as itself: no second rendering.
            # The questions of one System One or OpenAI request share one state object: it is
            # rendered once, not once per question.
            groups: dict[str, list[int]] = {}
            rendered: dict[int, str] = {}
            for index, item in enumerate(questions):
                if (text := rendered.get(id(item.state))) is None:
                    text = rendered[id(item.state)] = state_text(item.state)
                groups.setdefault(text, []).append(index)
            budget = TokenBudget(limit)  # one for the whole request, every group spends from it
            kept: list[list[int]] = []
            plans: list[ScoringPlan] = []
            for text, members in groups.items():
                unfit: list[int] | None = [] if refuse_unfit else None
                group_plan = build_plan(
                    self.renderer,
                    text,
                    [questions[i].question for i in members],
                    budget,
                    default_readout=self.identity.calibration.default_readout(self.renderer.mode),
                    unfit=unfit,
                )
                if refuse_unfit and len(group_plan.prefix_tokens) >= limit:
                    raise over_token_budget("state", len(group_plan.prefix_tokens), limit)
                if self.scoring_batcher is not None:  # what sharing the model costs beside it
                    try:
                        budget.spend(sharing_work(group_plan).cost)
                    except TokenLimitExceeded:
                        raise QuestionsOverBudget(limit) from None
                if unfit:  # the refused: not in the plan, their answers stay None
                    refused = set(unfit)
                    members = [m for k, m in enumerate(members) if k not in refused]
                if members:
                    kept.append(members)
                    plans.append(group_plan)
            return kept, plans

        try:
            (members, plans), slot_wait_s = await self._prepared(make_plans)
        except QuestionsOverBudget:
            raise over_token_budget("questions", None, limit) from None
        except TokenLimitExceeded:
            # Refusing unfit questions, only a state can be proved too long here.
            raise over_token_budget("state" if refuse_unfit else "questions", None, limit) from None
        needed = sum(plan.total_tokens for plan in plans)
        if not plans:  # every question refused: nothing for the model to do
            timing = {"prepare_ms": _ms(received), "state_cache": "off", "prefix_tokens": 0}
            return Scored([None] * len(questions), [{}] * len(questions), 0, timing)
        prepared_ms = _ms(received)

        deadline_s = self.settings.scoring_deadline_s
        # Counted from arrival, less the wait for a preparation thread (others' work).
        until = min(
            Deadline.after(slot_wait_s + deadline_s, since=received), WORK_DEADLINE.get() or NEVER
        )

        def score_all(decoder: Engine | LaneDecoder) -> list[tuple[list[Answer], ScoringTiming]]:
            outcomes = []
            for plan in plans:
                scores, timing = score(
                    decoder, plan, cache=self.state_cache, content_free=self.content_free
                )
                outcomes.append((plan.answers(scores, self.engine), timing))
            return outcomes

        for_chat = False  # the deadline met was a running chat's (_beside_chats)

        def score_alone() -> list[tuple[list[Answer], ScoringTiming]]:
            nonlocal for_chat
            deadline, for_chat = self._beside_chats(until)
            with self.engine.deadline(deadline):
                return score_all(self.engine)

        try:
            if self.scoring_batcher is None:
                outcomes, waited_ms = await self.runner.run(score_alone)
            else:
                outcomes, waited_ms = await self.scoring_batcher.run(score_all, until)
        except DeadlinePassed:
            raise OutOfTime(self.settings.retry_after_s, deadline_s, for_chat=for_chat) from None
        total_ms = _ms(received)
        answers: list[Any] = [None] * len(questions)
        timings: list[Any] = [None] * len(questions)
        group_timings = []
        for group, plan, (group_answers, spent) in zip(members, plans, outcomes, strict=False):
            group_timing = {
                "prepare_ms": prepared_ms,
                "admission_wait_ms": round(waited_ms, 3),
                "prefill_ms": round(spent.prefill_ms, 3),
                "branches_ms": round(spent.branches_ms, 3),
                "state_cache": spent.state_cache,
                "total_ms": total_ms,
                "prefix_tokens": len(plan.prefix_tokens),
                "request_tokens": needed,
            }
            group_timings.append(group_timing)
            for index, answer in zip(group, group_answers, strict=False):
                answers[index], timings[index] = answer, group_timing
        return Scored(answers, timings, needed, _request_timing(group_timings))

    async def _score_with_head(self, questions: Sequence[StateQuestion], received: float) -> Scored:
        """A trained decision model's answers: each question's prompts rendered and tokenized
        off the model thread (over its budget: a 413 before any model work), then decoded one
        request at a time in the engine's context, each state's prefix once, under the scoring
        deadline."""
        head = self.decision_head
        assert head is not None
        limit = self.settings.request_token_limit
        names = [item.question.name or f"q{index}" for index, item in enumerate(questions)]
        planned, slot_wait_s = await self._prepared(
            lambda: trained_head.plan(self.engine, head, questions, names, limit)
        )
        prepared_ms = _ms(received)
        deadline_s = self.settings.scoring_deadline_s
        until = min(
            Deadline.after(slot_wait_s + deadline_s, since=received), WORK_DEADLINE.get() or NEVER
        )
        prefixes = trained_head.StatePrefixes(self.engine, head, self.state_cache)
        for_chat = False  # the deadline met was a running chat's (_beside_chats)

        def answer_all() -> tuple[list[Answer], float]:
            nonlocal for_chat
            started = time.monotonic()
            deadline, for_chat = self._beside_chats(until)
            with self.engine.deadline(deadline):
                try:
                    answers = [
                        trained_head.answer(self.engine, head, item, prefixes) for item in planned
                    ]
                finally:
                    self.engine.reset()
            return answers, _ms(started)

        try:
            (answers, model_ms), waited_ms = await self.runner.run(answer_all)
        except DeadlinePassed:
            raise OutOfTime(self.settings.retry_after_s, deadline_s, for_chat=for_chat) from None
        needed = sum(item.tokens for item in planned)
        total_ms = _ms(received)
        # One timing per state prefix, as the generic path times each state; laya has none.
        spent_by_prefix = prefixes.timings or {(): trained_head.PrefixTiming()}
        prefills_ms = sum(spent.prefill_ms for spent in spent_by_prefix.values())
        by_prefix: dict[tuple[int, ...], dict[str, Any]] = {}
        for prefix, spent in spent_by_prefix.items():
            by_prefix[prefix] = {
                "prepare_ms": prepared_ms,
                "admission_wait_ms": round(waited_ms, 3),
                "prefill_ms": round(spent.prefill_ms, 3),
                "branches_ms": round((model_ms - prefills_ms) / len(spent_by_prefix), 3),
                "state_cache": spent.state_cache,
                "total_ms": total_ms,
                "prefix_tokens": len(prefix),
                "request_tokens": needed,
            }
        fallback = next(iter(by_prefix.values()))
        timings = [by_prefix.get(tuple(item.prefix(0)), fallback) for item in planned]
        return Scored(list(answers), timings, needed, _request_timing(list(by_prefix.values())))

    # --- generation --------------------------------------------------------------------
    def _sampled_token(self, top: int) -> Callable[[int], SampledToken]:
        """On the model thread, as each token is sampled: its log-probability and the `top`
        likeliest tokens', as text."""

        def sampled(token: int) -> SampledToken:
            return self._sampled_token_of(token, *self.engine.sampled_log_probs(token, top))

        return sampled

    def _sampled_token_of(
        self, token: int, logprob: float, best: list[tuple[int, float]]
    ) -> SampledToken:
        """A sampled token's log-probability and the likeliest tokens', as text."""

        def choice(token: int, logprob: float) -> TokenChoice:
            utf8 = self.engine.piece(token, special=False)
            return TokenChoice(utf8.decode("utf-8", errors="replace"), utf8, logprob)

        return SampledToken(choice(token, logprob), tuple(choice(t, lp) for t, lp in best))

    async def generate(self, chat: Chat) -> AsyncGenerator[TextDelta | Generated, None]:
        """Text as it is sampled, then the finished generation. Limits are checked and the
        model admitted on the first `anext`, before anything is sent."""
        if self.engine.embeddings:
            head = self.decision_head.type if self.decision_head is not None else "decision"
            raise RequestError(
                400,
                f"this model is a {head} decision model, read through its hidden states: it "
                "answers decisions (/v1/systemone, /v1/decisions) and cannot generate text",
                field="model",
            )
        limit = self.settings.request_token_limit
        received = time.monotonic()

        def tokens_of_prompt() -> list[int]:
            messages = [{"role": role, "content": text} for role, text in chat.messages]
            return self.renderer.tokens(
                self.renderer.chat(messages).prefix, starts_prompt=True, limit=limit
            )

        try:
            tokens, slot_wait_s = await self._prepared(tokens_of_prompt)
        except TokenLimitExceeded:
            raise over_token_budget("prompt", None, limit) from None
        if len(tokens) >= limit:
            raise over_token_budget("prompt", len(tokens), limit)
        cap = self.settings.max_chat_tokens
        requested = chat.max_tokens or cap
        if requested > cap:
            raise too_many_tokens_requested(requested, cap)
        # Generation stops at the context's end; report that as finish_reason "length".
        max_tokens = min(requested, limit - len(tokens))
        seed = chat.seed if chat.seed is not None else time.time_ns() & 0xFFFFFFFF
        until = Deadline.after(slot_wait_s + self.settings.chat_deadline_s, since=received)
        expired = False

        def within_deadline(sampled: Iterator[int]) -> Iterator[int]:
            """The sampled tokens until the chat's deadline: then generation stops."""
            nonlocal expired
            for token in sampled:
                yield token
                if until.passed():
                    expired = True
                    return

        sampling: Sampling = {
            "temperature": chat.temperature,
            "top_p": chat.top_p,
            "top_k": chat.top_k,
            "min_p": chat.min_p,
            "seed": seed,
        }
        # The client's stops add to the prompt's own: without "\nUser:" a completion-mode
        # model writes the user's next turn itself.
        stops = [*self.renderer.chat_stops, *(chat.stop or [])]

        def text(
            sampled: Iterator[int],
            log_probs: Callable[[int], SampledToken] | None,
            out_of_time: Callable[[], bool],
        ) -> Iterator[TextDelta | Generated]:
            return text_events(
                sampled,
                self.engine.piece,
                stops,
                max_tokens,
                len(tokens),
                log_probs,
                out_of_time=out_of_time,
            )

        def produce() -> Iterator[TextDelta | Generated]:
            """On the model thread: sample and decode the answer text piece by piece."""
            sampled = self.engine.generate(tokens, max_tokens=max_tokens, **sampling)
            log_probs = (
                None if chat.top_logprobs is None else self._sampled_token(chat.top_logprobs)
            )
            return text(within_deadline(iter(sampled)), log_probs, lambda: expired)

        if self.chat_batcher is None:
            events = self.runner.generate(produce)
        else:  # the chat takes its turns (or shares its calls) with the others running
            events = self.chat_batcher.generate(
                tokens,
                sampling=sampling,
                max_tokens=max_tokens,
                until=until,
                top_logprobs=chat.top_logprobs,
                sampled_token=self._sampled_token_of,
                text=text,
            )
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()
