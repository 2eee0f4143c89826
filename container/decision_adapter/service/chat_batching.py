"""Chats admitted together take turns on the model thread, a token each per round, or share
each round's call (DECISION_CHAT_SHARED_BATCHES): the chat rounds. How a round runs:
docs/architecture.md, "Batching"; why a chat keeps its bits in turns, and not shared:
docs/scoring.md, "Requests at once".

Each chat has its own KV stream and sampler. A chat whose reader left ends at the next round;
one past its deadline ends after its next token, its text ending with `length`.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from ..contract import SampledToken
from ..deadline import NEVER, Deadline
from ..errors import EngineError
from ..model.engine import Engine, Sampling, token_log_probs
from ..model.streams import StreamContext
from .admission import ModelRunner
from .daemon_threads import on_daemon_thread
from .rounds import RoundLoop

_DONE = object()


@dataclass
class BatchedChat:
    """One admitted chat's model-side state; the model thread alone changes it once queued."""

    prompt: list[int]
    sampler: Any  # a llama.cpp sampler chain, freed when the chat ends
    max_tokens: int
    until: Deadline  # no token sampled past it
    top_logprobs: int | None
    deliver: Callable[[object], None]  # (token, SampledToken | None), an error, or _DONE
    ended: Callable[[], None]  # the chat's model work is over (its admission slot frees)
    left: threading.Event = field(default_factory=threading.Event)  # the reader is gone
    stream: int = -1  # its KV stream, once started
    position: int = 0
    count: int = 0
    token: int | None = None  # sampled and handed over, not decoded yet
    expired: bool = False  # stopped by its deadline
    done: bool = False  # ended: its sampler freed, its KV stream free


class ChatBatcher(RoundLoop[BatchedChat]):
    """The chat rounds: each running chat's next token, a call each (`turns`) or one call for
    all (`shared`) (docs/architecture.md, "Batching")."""

    def __init__(self, context: StreamContext, runner: ModelRunner, *, shared: bool) -> None:
        super().__init__(context, runner)
        self.mode = "shared" if shared else "turns"
        self._running: list[BatchedChat] = []
        self._free = list(range(context.n_streams))

    # --- the event loop's side ---------------------------------------------------------
    async def generate(
        self,
        prompt: list[int],
        *,
        sampling: Sampling,
        max_tokens: int,
        until: Deadline,
        top_logprobs: int | None,
        sampled_token: Callable[[int, float, list[tuple[int, float]]], SampledToken],
        text: Callable[
            [Iterator[int], Callable[[int], SampledToken] | None, Callable[..., Any]], Iterator[Any]
        ],
    ) -> AsyncGenerator[Any, None]:
        """Admit, then the events `text(tokens, sampled, out_of_time)` makes of this chat's
        tokens, computed on a thread of their own (stop strings, UTF-8), never the loop's.
        `sampled_token(token, logprob, best)` turns the log-probabilities read on the model
        thread as the token was sampled into a SampledToken (with top_logprobs only)."""
        release = await self._runner.admit()
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Any] = asyncio.Queue()
        tokens: queue.SimpleQueue[object] = queue.SimpleQueue()
        finished = loop.create_future()

        def finish() -> None:
            if not finished.done():
                finished.set_result(None)

        def ended() -> None:
            release()
            loop.call_soon_threadsafe(finish)

        chat = BatchedChat(
            prompt=prompt,
            sampler=self._context.engine.sampler(**sampling),
            max_tokens=max_tokens,
            until=until,
            top_logprobs=top_logprobs,
            deliver=tokens.put,
            ended=ended,
        )
        latest: Any = None  # the last token's (logprob, best)

        def arrivals() -> Iterator[int]:
            nonlocal latest
            while (item := tokens.get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise item
                token, latest = cast(tuple[int, Any], item)
                yield token

        def pump() -> None:
            try:
                sampled = None
                if top_logprobs is not None:
                    sampled = lambda token: sampled_token(token, *latest)  # noqa: E731
                for event in text(arrivals(), sampled, lambda: chat.expired):
                    loop.call_soon_threadsafe(events.put_nowait, event)
                    if chat.left.is_set():
                        break
            except BaseException as error:  # hand the failure to the reader
                loop.call_soon_threadsafe(events.put_nowait, self._runner.failure(error))
            finally:
                chat.left.set()  # a stop string ends the chat as a departure does
                loop.call_soon_threadsafe(events.put_nowait, _DONE)

        self._put(chat)
        on_daemon_thread(pump, "chat-text")
        try:
            while (event := await events.get()) is not _DONE:
                if isinstance(event, BaseException):
                    raise event
                yield event
        finally:
            chat.left.set()
            # As ModelRunner.generate: the answer ends once the chat's slot is free again.
            await asyncio.shield(finished)

    def earliest_deadline(self) -> Deadline:
        """The soonest deadline of the chats admitted and not ended (NEVER for none): a job
        run between two rounds must not keep their next round past it."""
        with self._lock:
            chats = [*self._queue, *self._running]
        return min((chat.until for chat in chats if not chat.done), default=NEVER)

    # --- the model thread's side (RoundLoop) -------------------------------------------
    def _run(self, taken: list[BatchedChat]) -> None:
        """The chats that arrived prefilled, then every running chat's next token."""
        try:
            for chat in taken:
                self._start(chat)
            for chat in [chat for chat in self._running if chat.left.is_set()]:
                self._end(chat, None)
            running = sorted(self._running, key=lambda chat: chat.stream)
            batches = [running] if self.mode == "shared" else [[chat] for chat in running]
            for batch in filter(None, batches):
                self._context.step(
                    [(chat.stream, cast(int, chat.token), chat.position) for chat in batch]
                )
                for index, chat in enumerate(batch):
                    chat.position += 1
                    self._sample(chat, index)
        except Exception as error:  # the decode failed (interrupted at shutdown): all end
            for chat in [*taken, *self._running]:
                self._end(chat, error)

    def _continues(self) -> bool:
        return bool(self._running)

    def _stopped(self, queued: list[BatchedChat], error: EngineError) -> None:
        for chat in [*queued, *self._running]:
            self._end(chat, error)

    def _start(self, chat: BatchedChat) -> None:
        if chat.left.is_set():
            self._end(chat, None)
            return
        chat.stream = min(self._free)  # shared: the running streams stay side by side
        self._free.remove(chat.stream)
        self._running.append(chat)
        index = self._context.prefill(chat.stream, chat.prompt)
        chat.position = len(chat.prompt)
        self._sample(chat, index)

    def _sample(self, chat: BatchedChat, index: int) -> None:
        context = self._context
        token = context.sample(chat.sampler, index)
        if context.engine.is_end_of_generation(token):
            self._end(chat, None)
            return
        sampled = None
        if chat.top_logprobs is not None:
            sampled = token_log_probs(context.logits(index), token, chat.top_logprobs)
        chat.deliver((token, sampled))
        chat.count += 1
        chat.token = token
        if chat.until.passed():
            chat.expired = True
        if (
            chat.expired
            or chat.count >= chat.max_tokens
            or chat.position >= context.n_ctx_per_stream
        ):
            self._end(chat, None)

    def _end(self, chat: BatchedChat, error: BaseException | None) -> None:
        if chat.done:
            return
        chat.done = True
        if chat in self._running:
            self._running.remove(chat)
        if chat.stream >= 0:
            self._context.clear(chat.stream)
            self._free.append(chat.stream)
            chat.stream = -1
        Engine.free_sampler(chat.sampler)
        chat.deliver(error if error is not None else _DONE)
        chat.ended()
