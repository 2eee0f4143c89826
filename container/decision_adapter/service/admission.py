"""Admission to the one llama.cpp context: run now, wait briefly in a bounded queue, or 503.

Model work runs on a single dedicated thread (the context is not thread-safe). A request is
admitted only after its body was read and validated, so slow uploads and bad requests never
hold the model. The slot is released when the model work itself ends, not when the awaiting
request does: a client that disconnects mid-request cannot let a second job into the context.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import metrics
from ..errors import Busy, ShuttingDown

T = TypeVar("T")
_DONE = object()


@dataclass
class Reservation:
    """The slot `ModelRunner.reserved()` holds for its task. `job`: the latest job run on it,
    which the slot waits for where the task leaves mid-job."""

    job: Future[Any] | None = None


@dataclass
class AdmissionStats:
    admitted: int = 0  # ran at once or after waiting
    waited: int = 0  # of those, admitted after waiting in the queue
    refused_queue_full: int = 0  # answered 503: the model busy, the queue full, no grace slot
    refused_wait_expired: int = 0  # answered 503 after waiting the whole admission wait
    admitted_in_grace: int = 0  # the queue was full, but the slot came free within the grace

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class ModelRunner:
    """At most `max_in_flight` admitted at a time (decisions and chat: 1; batched chats:
    DECISION_MAX_CHAT_STREAMS), at most `max_queue` waiting, none longer than `wait_s`. Jobs run
    one after the other on the one model thread, which runners may share (`model_thread`).

    A slot passes from finished work straight to the oldest waiter, so a waiter's time is
    bounded whether the model is busy with a long job or a queue: once it holds a slot, the
    model thread is free of the work before it.
    """

    def __init__(
        self,
        *,
        max_queue: int,
        wait_s: float,
        retry_after_s: int,
        grace_s: float = 0.0,
        max_in_flight: int = 1,
        model_thread: ThreadPoolExecutor | None = None,
    ) -> None:
        self._owns_thread = model_thread is None
        self._executor = model_thread or ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="llama"
        )
        self._max_in_flight = max_in_flight
        self._max_queue = max_queue
        self._wait_s = wait_s
        self._grace_s = grace_s
        self._in_grace = 0  # waiters in their grace, not in the queue
        self._retry_after_s = retry_after_s
        self._waiters: deque[asyncio.Future[None]] = deque()
        # Runners whose work holds the model thread for a whole job (share_model): while one of
        # them has work in flight, this one admits none, and the other way round.
        self._rivals: list[ModelRunner] = []
        self.in_flight = 0
        self.stats = AdmissionStats()
        self._stopping = threading.Event()  # set at the shutdown deadline; never cleared
        # Set inside `reserved()`: the task's jobs run on the slot it already holds.
        self._reservation: ContextVar[Reservation | None] = ContextVar(
            f"reservation-{id(self)}", default=None
        )

    @property
    def model_thread(self) -> ThreadPoolExecutor:
        return self._executor

    def share_model(self, rival: ModelRunner) -> None:
        """Admit nothing while `rival` has work in flight, nor it while this one has: a job of
        one (a chat answered whole) would otherwise hold the model thread while the other's
        admitted work (batched decisions' rounds) waits behind it, past its deadline."""
        self._rivals.append(rival)
        rival._rivals.append(self)

    def _free(self) -> bool:
        """A slot is free, and no rival holds the model."""
        return self.in_flight < self._max_in_flight and not any(r.in_flight for r in self._rivals)

    def stop_work(self) -> None:
        """Shutdown deadline: refuse new work; running work ends with ShuttingDown."""
        self._stopping.set()

    def failure(self, error: BaseException) -> BaseException:
        """What a job's `error` means to its caller: ShuttingDown once the shutdown began (an
        interrupted decode fails), else the error itself."""
        return ShuttingDown(self._retry_after_s) if self._stopping.is_set() else error

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def counters(self) -> dict[str, int]:
        return {"in_flight": self.in_flight, "waiting": self.waiting, **self.stats.as_dict()}

    async def _admit(self) -> None:
        if self._stopping.is_set():
            raise ShuttingDown(self._retry_after_s)
        arrived = time.perf_counter()
        if self._free() and not self._waiters:
            self.in_flight += 1
            self.stats.admitted += 1
            metrics.record_admitted(0.0)
            return
        if len(self._waiters) - self._in_grace >= self._max_queue:
            # The queue is full. A job whose client just left frees the slot a moment later
            # (the token being decoded ends first): one request at a time may wait that grace,
            # outside the queue, so a client's next request is not refused for its own
            # abandoned one. Under overload every other request is still refused at once.
            grace_s = self._grace_s if self._in_grace == 0 else 0
            if not await self._slot_within(grace_s, grace=True):
                self.stats.refused_queue_full += 1
                metrics.record_overloaded()
                raise Busy(self._retry_after_s)
            self.stats.admitted_in_grace += 1
        elif not await self._slot_within(self._wait_s):
            self.stats.refused_wait_expired += 1
            metrics.record_overloaded()
            raise Busy(self._retry_after_s)
        else:
            self.stats.waited += 1
        self.stats.admitted += 1
        metrics.record_admitted((time.perf_counter() - arrived) * 1000)

    async def _slot_within(self, timeout_s: float, *, grace: bool = False) -> bool:
        """Wait in line for the slot, at most `timeout_s`; True once it was handed over."""
        if timeout_s <= 0:
            return False
        granted = asyncio.get_running_loop().create_future()
        self._waiters.append(granted)
        self._in_grace += grace
        try:
            await asyncio.wait({granted}, timeout=timeout_s)
        except BaseException:  # cancelled while waiting (the client left)
            if granted.done():
                self._release()  # the slot arrived just now: pass it on
            else:
                self._waiters.remove(granted)
            raise
        finally:
            self._in_grace -= grace
        if not granted.done():
            self._waiters.remove(granted)
            return False
        return True

    def _submit(self, function: Callable[..., T], *args: Any, release: bool = True) -> Future[T]:
        future = self._executor.submit(function, *args)
        if release:
            self._release_when_done(future)
        return future

    def _release_when_done(self, future: Future[Any]) -> None:
        loop = asyncio.get_running_loop()
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(self._release))

    def _release(self) -> None:
        if self._waiters:  # hand the slot over: in_flight stays
            self._waiters.popleft().set_result(None)
            return
        self.in_flight -= 1
        if not self.in_flight:  # the model is free of this runner: a rival's waiters may start
            for rival in self._rivals:
                rival._hand_over()

    def _hand_over(self) -> None:
        """Slots to waiters while they are free (a rival just let go of the model)."""
        while self._waiters and self._free():
            self.in_flight += 1
            self._waiters.popleft().set_result(None)

    async def admit(self) -> Callable[[], None]:
        """Admit work that runs as many jobs, not one (a batched chat); returns its
        release, which any thread calls once, when the work's last job has ended."""
        await self._admit()
        loop = asyncio.get_running_loop()

        def release() -> None:
            loop.call_soon_threadsafe(self._release)

        return release

    async def admit_until(self, done: Future[Any]) -> None:
        """Admit work that runs off the model thread (a batched decision on a thread of its
        own) and ends when `done` does: the slot frees then. Inside `reserved()` it takes the
        reservation's slot, which then waits for `done` as for a `run()` job."""
        reservation = self._reservation.get()
        if reservation is None:
            await self._admit()
            self._release_when_done(done)
        elif self._stopping.is_set():
            raise ShuttingDown(self._retry_after_s)
        else:
            reservation.job = done

    def submit(self, function: Callable[[], T]) -> Future[T]:
        """Run `function()` on the model thread for work already admitted (`admit`)."""
        return self._executor.submit(function)

    async def run(self, function: Callable[..., T], *args: Any) -> tuple[T, float]:
        """Run `function(*args)` on the model thread; returns (result, ms waited for the model,
        in a queue slot and behind the job before it)."""
        arrived = time.perf_counter()
        started = arrived

        def timed() -> T:
            nonlocal started
            started = time.perf_counter()
            return function(*args)

        reservation = self._reservation.get()
        if reservation is None:
            await self._admit()
        elif self._stopping.is_set():
            raise ShuttingDown(self._retry_after_s)
        future = self._submit(timed, release=reservation is None)
        if reservation is not None:
            reservation.job = future  # the latest job: the one the slot waits for
        try:
            result = await asyncio.wrap_future(future)
        except Exception as error:  # an interrupted decode fails: say why
            raise self.failure(error) from None
        return result, (started - arrived) * 1000

    @asynccontextmanager
    async def reserved(self) -> AsyncIterator[None]:
        """Admit once for several jobs (a JSON Lines body): `run()` calls made inside, by this
        task (and tasks it starts, which copy its context), skip admission. The slot is released
        when the block ends, or, if the task was cancelled mid-job, when that job does.
        `generate()` is not covered: it always admits."""
        if self._reservation.get() is not None:  # nested: the slot is already held
            yield
            return
        await self._admit()
        reservation = Reservation()
        token = self._reservation.set(reservation)
        try:
            yield
        finally:
            self._reservation.reset(token)
            job = reservation.job
            if job is not None and not job.done():  # cancelled mid-job: free the slot then
                self._release_when_done(job)
            else:
                self._release()

    async def generate(self, produce: Callable[[], Iterator[T]]) -> AsyncGenerator[T, None]:
        """Admit, then iterate `produce()` on the model thread, handing items over as they come.

        Admission happens on the first `__anext__`, so call `await anext(...)` before committing
        to a streaming response. Closing the iterator stops production after the current item.
        """
        await self._admit()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def pump() -> None:
            try:
                for item in produce():
                    loop.call_soon_threadsafe(queue.put_nowait, item)
                    if stop.is_set():
                        break
                    if self._stopping.is_set():
                        raise ShuttingDown(self._retry_after_s)
            except BaseException as error:  # hand the failure to the reader
                loop.call_soon_threadsafe(queue.put_nowait, self.failure(error))
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _DONE)

        finished = asyncio.wrap_future(self._submit(pump))
        try:
            while (item := await queue.get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            # Answer only once the slot is free again: a client that sends its next request
            # as soon as it has this answer must not find the model still taken by it.
            await asyncio.shield(finished)

    def close(self) -> None:
        if self._owns_thread:
            self._executor.shutdown(wait=True)
