"""Admission to the one llama.cpp context: run now, wait briefly, or answer 503.

Model work runs on a single dedicated thread (the context is not thread-safe). A request is
admitted only after its body was read and validated, so slow uploads and bad requests never
hold the model. The slot is released when the model work itself ends, not when the awaiting
request does: a client that disconnects mid-request cannot let a second job into the context.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
_DONE = object()


class Busy(Exception):
    """No model slot free within the admission wait; retryable."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__("the model is busy with other requests; retry shortly")
        self.retry_after_s = retry_after_s


class ShuttingDown(Busy):
    """The server stopped model work at its shutdown deadline; retryable elsewhere."""

    def __init__(self, retry_after_s: int) -> None:
        Exception.__init__(self, "the server is shutting down; retry the request")
        self.retry_after_s = retry_after_s


class ModelRunner:
    def __init__(self, *, max_queue: int, wait_s: float, retry_after_s: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        self._slots = asyncio.Semaphore(1 + max_queue)  # the running job plus the waiting ones
        self._wait_s = wait_s if max_queue > 0 else 0.0
        self._retry_after_s = retry_after_s
        self.in_flight = 0
        self._stopping = threading.Event()  # set at the shutdown deadline; never cleared

    def stop_work(self) -> None:
        """Shutdown deadline: refuse new work; running work ends with ShuttingDown."""
        self._stopping.set()

    def _stopped(self, error: BaseException) -> BaseException:
        return ShuttingDown(self._retry_after_s) if self._stopping.is_set() else error

    async def _admit(self) -> None:
        if self._stopping.is_set():
            raise ShuttingDown(self._retry_after_s)
        if self._slots.locked() and self._wait_s <= 0:
            raise Busy(self._retry_after_s)
        try:
            await asyncio.wait_for(self._slots.acquire(), timeout=self._wait_s or None)
        except TimeoutError:
            raise Busy(self._retry_after_s) from None
        self.in_flight += 1

    def _submit(self, function: Callable[..., T], *args: Any):
        loop = asyncio.get_running_loop()
        future = self._executor.submit(function, *args)

        def release(_):
            loop.call_soon_threadsafe(self._release)

        future.add_done_callback(release)
        return future

    def _release(self) -> None:
        self.in_flight -= 1
        self._slots.release()

    async def run(self, function: Callable[..., T], *args: Any) -> tuple[T, float]:
        """Run `function(*args)` on the model thread; returns (result, ms waited for the model,
        in a queue slot and behind the job before it)."""
        arrived = time.perf_counter()
        started: list[float] = []

        def timed() -> T:
            started.append(time.perf_counter())
            return function(*args)

        await self._admit()
        try:
            result = await asyncio.wrap_future(self._submit(timed))
        except Exception as error:  # an interrupted decode fails: say why
            raise self._stopped(error) from None
        return result, (started[0] - arrived) * 1000

    async def stream(self, produce: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
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
                loop.call_soon_threadsafe(queue.put_nowait, self._stopped(error))
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
        self._executor.shutdown(wait=True)
