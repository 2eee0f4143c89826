"""Chat streams admitted together take turns on the model thread, a token each per round (or
share each round's batch: `shared`, below), each stream its own KV stream and sampler
(streams.StreamContext), so a stream's text has the same bits alone and beside others.

One job on the model thread is one round: the streams that arrived are prefilled, each prompt
its own batches (time to first token as alone, plus at most one round of the others); then
every running stream decodes its next token. Rounds follow each other while any stream runs,
queued behind whatever else the model thread has (decisions run between two rounds, and stop
at the soonest running stream's deadline: `earliest_deadline`). A stream whose reader left is
dropped at the next round.

Each stream's token is a batch of its own. In one micro-batch the streams' rows would share a
read of the weights, but a row's bits follow the rows beside it: on the bundled model a stream's
logits move beside three others (repacked weights multiply four rows at a time, one alone), on
F16 weights beside one (tinyBLAS from two rows); test_chat_batching.py measures it. A token is
one row, so padding it to a block as scoring_batching.py does would cost a stream alone several
times its time per token. `shared` (DECISION_CHAT_SHARED_BATCHES) trades that exactness for the
shared reads: every running stream's token in one batch, on consecutive KV streams (each stream
takes the lowest free one), which llama.cpp decodes as one micro-batch.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from ..contract import SampledToken
from ..model.engine import Engine, Sampling, token_log_probs
from ..model.streams import StreamContext
from .admission import ModelRunner
from .daemon_threads import on_daemon_thread

_DONE = object()


@dataclass
class ChatStream:
    """One admitted chat's model-side state; the model thread alone changes it after `add`."""

    prompt: list[int]
    sampler: Any  # a llama.cpp sampler chain, freed when the stream ends
    max_tokens: int
    until: float  # time.monotonic(): no token sampled after it
    top_logprobs: int | None
    deliver: Callable[[object], None]  # (token, SampledToken | None), an error, or _DONE
    ended: Callable[[], None]  # the stream's model work is over (its admission slot frees)
    left: threading.Event = field(default_factory=threading.Event)  # the reader is gone
    slot: int = -1  # its KV stream, once started
    position: int = 0
    count: int = 0
    token: int | None = None  # sampled and handed over, not decoded yet
    expired: bool = False  # stopped by its deadline
    done: bool = False  # ended: its sampler freed, its KV stream free


class ChatBatcher:
    """Runs admitted chat streams in rounds on the model thread (see the module)."""

    def __init__(self, context: StreamContext, runner: ModelRunner, *, shared: bool) -> None:
        self.mode = "shared" if shared else "turns"
        self._context = context
        self._runner = runner
        self._lock = threading.Lock()
        self._arrived: list[ChatStream] = []
        self._running: list[ChatStream] = []
        self._free = list(range(context.n_streams))
        self._scheduled = False  # a round is queued or running on the model thread

    # --- the event loop's side ---------------------------------------------------------
    async def stream(
        self,
        prompt: list[int],
        *,
        sampling: Sampling,
        max_tokens: int,
        until: float,
        top_logprobs: int | None,
        sampled_token: Callable[[int, float, list[tuple[int, float]]], SampledToken],
        text: Callable[
            [Iterator[int], Callable[[int], SampledToken] | None, Callable[..., Any]], Iterator[Any]
        ],
    ) -> AsyncGenerator[Any, None]:
        """Admit, then the events `text(tokens, sampled, out_of_time)` makes of this stream's
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

        job = ChatStream(
            prompt=prompt,
            sampler=self._context.engine.sampler(**sampling),
            max_tokens=max_tokens,
            until=until,
            top_logprobs=top_logprobs,
            deliver=tokens.put,
            ended=ended,
        )
        latest: list[Any] = [None]  # the last token's (logprob, best)

        def arrivals() -> Iterator[int]:
            while (item := tokens.get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise item
                token, latest[0] = cast(tuple[int, Any], item)
                yield token

        def pump() -> None:
            try:
                sampled = None
                if top_logprobs is not None:
                    sampled = lambda token: sampled_token(token, *latest[0])  # noqa: E731
                for event in text(arrivals(), sampled, lambda: job.expired):
                    loop.call_soon_threadsafe(events.put_nowait, event)
                    if job.left.is_set():
                        break
            except BaseException as error:  # hand the failure to the reader
                loop.call_soon_threadsafe(events.put_nowait, self._runner.failure(error))
            finally:
                job.left.set()  # a stop string ends the stream as a departure does
                loop.call_soon_threadsafe(events.put_nowait, _DONE)

        self._add(job)
        on_daemon_thread(pump, "chat-text")
        try:
            while (event := await events.get()) is not _DONE:
                if isinstance(event, BaseException):
                    raise event
                yield event
        finally:
            job.left.set()
            # As ModelRunner.stream: the answer ends once the stream's slot is free again.
            await asyncio.shield(finished)

    def earliest_deadline(self) -> float:
        """The soonest deadline of the streams admitted and not ended (time.monotonic; inf for
        none): a job run between two rounds must not keep their next round past it."""
        with self._lock:
            streams = [*self._arrived, *self._running]
        return min((job.until for job in streams if not job.done), default=float("inf"))

    def close(self) -> None:
        """After the model thread has stopped (ModelRunner.close)."""
        self._context.close()

    def _add(self, job: ChatStream) -> None:
        with self._lock:
            self._arrived.append(job)
            if not self._scheduled:
                self._scheduled = True
                self._submit_round()

    def _submit_round(self) -> None:
        try:
            self._runner.submit(self._round)
        except RuntimeError:  # the model thread is closed (the process is exiting)
            self._scheduled = False

    # --- the model thread's side -------------------------------------------------------
    def _round(self) -> None:
        with self._lock:
            arrived, self._arrived = self._arrived, []
        try:
            for job in arrived:
                self._start(job)
            for job in [job for job in self._running if job.left.is_set()]:
                self._end(job, None)
            running = sorted(self._running, key=lambda job: job.slot)
            batches = [running] if self.mode == "shared" else [[job] for job in running]
            for batch in filter(None, batches):
                self._context.step(
                    [(job.slot, cast(int, job.token), job.position) for job in batch]
                )
                for index, job in enumerate(batch):
                    job.position += 1
                    self._sample(job, index)
        except Exception as error:  # the decode failed (interrupted at shutdown): all end
            for job in [*arrived, *self._running]:
                self._end(job, error)
        finally:
            with self._lock:
                if self._running or self._arrived:
                    self._submit_round()
                else:
                    self._scheduled = False

    def _start(self, job: ChatStream) -> None:
        if job.left.is_set():
            self._end(job, None)
            return
        job.slot = min(self._free)  # shared: the running streams stay side by side
        self._free.remove(job.slot)
        self._running.append(job)
        index = self._context.prefill(job.slot, job.prompt)
        job.position = len(job.prompt)
        self._sample(job, index)

    def _sample(self, job: ChatStream, index: int) -> None:
        context = self._context
        token = context.sample(job.sampler, index)
        if context.engine.is_end_of_generation(token):
            self._end(job, None)
            return
        sampled = None
        if job.top_logprobs is not None:
            sampled = token_log_probs(context.logits(index), token, job.top_logprobs)
        job.deliver((token, sampled))
        job.count += 1
        job.token = token
        if time.monotonic() >= job.until:
            job.expired = True
        if job.expired or job.count >= job.max_tokens or job.position >= context.n_ctx_per_stream:
            self._end(job, None)

    def _end(self, job: ChatStream, error: BaseException | None) -> None:
        if job.done:
            return
        job.done = True
        if job in self._running:
            self._running.remove(job)
        if job.slot >= 0:
            self._context.clear(job.slot)
            self._free.append(job.slot)
            job.slot = -1
        Engine.free_sampler(job.sampler)
        job.deliver(error if error is not None else _DONE)
        job.ended()
