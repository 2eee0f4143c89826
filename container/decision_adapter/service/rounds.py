"""The round loop both batchers share: a queue, one round at a time on the model thread, the
next submitted while work is left. See docs/architecture.md, "Batching".
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

from ..errors import EngineError
from ..model.streams import StreamContext
from .admission import ModelRunner

Item = TypeVar("Item")


class RoundLoop(Generic[Item]):
    """Rounds of one batcher on the model thread, each one job of `runner`'s.

    Policy, in order, each round:
    1. `_gather`, lock held: wait (briefly) for items still on their way; none by default.
    2. Take the whole queue; `_take` splits it into what this round runs and what waits.
    3. `_run` the taken items (the model work), outside the lock.
    4. Put what waits back at the queue's head, before what arrived meanwhile.
    5. Submit the next round while the queue holds items or `_continues()`; else stop until
       `_put` queues an item.
    6. Where the model thread is closed (the process is exiting), `_stopped` ends the queued
       items with an error: no round will run them.
    A round is a job like any other: jobs of other runners on the model thread run between two.
    """

    def __init__(self, context: StreamContext, runner: ModelRunner) -> None:
        self._context = context
        self._runner = runner
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)  # an item was queued (or a lane ended)
        self._queue: deque[Item] = deque()
        self._scheduled = False  # a round is queued or running on the model thread

    def close(self) -> None:
        """After the model thread has stopped (ModelRunner.close)."""
        self._context.close()

    # --- any thread ----------------------------------------------------------------------
    def _put(self, item: Item) -> None:
        """Queue `item` for the next round, submitting one where none is."""
        with self._ready:
            self._queue.append(item)
            self._ready.notify()
            if not self._scheduled:
                self._scheduled = True
                self._submit()

    def _submit(self) -> None:
        """The next round, lock held."""
        try:
            self._runner.submit(self._round)
        except RuntimeError:  # the model thread is closed (the process is exiting)
            self._scheduled = False
            queued, self._queue = list(self._queue), deque()
            self._stopped(queued, EngineError("the model thread has stopped"))

    # --- the model thread --------------------------------------------------------------
    def _round(self) -> None:
        with self._ready:
            self._gather()
            queued, self._queue = self._queue, deque()
        taken, waits = self._take(queued)
        try:
            self._run(taken)
        finally:
            with self._lock:
                waits.extend(self._queue)
                self._queue = waits
                if self._queue or self._continues():
                    self._submit()
                else:
                    self._scheduled = False

    # --- what a batcher supplies -------------------------------------------------------
    def _gather(self) -> None:
        """Lock held (`self._ready`): wait for items about to be queued."""

    def _take(self, queued: deque[Item]) -> tuple[list[Item], deque[Item]]:
        """What this round runs, and what waits for the next (in order). All, by default."""
        return list(queued), deque()

    def _run(self, taken: list[Item]) -> None:
        raise NotImplementedError

    def _continues(self) -> bool:
        """Lock held: work the next round goes on with, beyond the queue."""
        return False

    def _stopped(self, queued: list[Item], error: EngineError) -> None:
        """Lock held: no round will run `queued` (nor, from the model thread, what runs)."""
        raise NotImplementedError
