"""Decisions admitted together share the model's forward passes (DECISION_MAX_SCORING_REQUESTS).

Each admitted request scores (score.score) on a thread of its own through a `LaneDecoder`:
every model step it takes becomes a `Work` that waits for the next round. A round, one job on
the model thread, takes the waiting works in arrival order while their tokens fit one batch
and streams are free to lend, prepares them (restores saved sequences), decodes them as one
batch and hands each its logits. A request's state and questions live in the KV stream it
holds while it runs (its lane); the paths after a question are restored from the question into
streams lent for one round.

Exact: each answer has the bits of the same request alone. Every sequence is a KV stream of its
own (streams.py), so no request reads another's cells; and a round shows each row what it shows
it alone. llama.cpp's CPU matrix products round a row by the rows beside it and split a stream's
tokens between micro-batches by its neighbours' counts (tests/adapter/service/
test_scoring_batching.py measures both), so every piece of work is padded to a multiple of 8
tokens and asks for logits in whole blocks of 8 (`Work`), alone as together. The padding is cut
once decoded, which a recurrent memory cannot do: a hybrid model is scored one request at a
time.

A request whose client left, or whose deadline passed, is dropped at the next round (its thread
ends with LeftEarly or DeadlinePassed); at shutdown the decode in progress is interrupted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from ..contract import CLIENT_GONE
from ..errors import EngineError, RequestError
from ..model.engine import DeadlinePassed
from ..model.prefix_tree import Node
from ..model.streams import StreamContext
from .admission import ModelRunner

T = TypeVar("T")
Read = TypeVar("Read")
Entry = tuple[int, int, int, bool]  # token, position, stream, wants logits
# How often a request waiting for its rounds asks whether its client is still there.
CLIENT_CHECK_S = 0.1


class LeftEarly(EngineError):
    """The request's client left: its remaining model work is dropped."""


@dataclass
class Lane:
    """One admitted request's place in the batches."""

    stream: int  # its own KV stream: the state, then each question after it
    until: float  # time.perf_counter(): no batch of its work starts after it
    left: threading.Event = field(default_factory=threading.Event)


# The rows a piece of work comes in: llama.cpp's CPU matrix products round a row by the rows
# beside it (a 1-row kernel, 4-row blocks of repacked weights, tinyBLAS from 2 rows) and split a
# stream's tokens between micro-batches by its neighbours' counts, so a piece is padded to a
# multiple of 8 tokens and asks for logits in whole blocks of 8: every split then falls on a
# block, and each row meets the kernels it meets alone (test_scoring_batching.py).
ROW_BLOCK = 8


def padded_width(tokens: int) -> int:
    """The tokens a stream's piece of a work is padded to."""
    return max(ROW_BLOCK, -(-tokens // ROW_BLOCK) * ROW_BLOCK)


@dataclass
class Work:
    """One model step of one lane, done in one round: `prepare` (on the model thread, with the
    streams lent to it) returns its batch entries, each stream's together and in position order;
    `finish` reads their logits (by entry index) before the next decode replaces them.

    Each piece (a stream's tokens) is padded to a multiple of ROW_BLOCK with tokens after its
    own, cut once decoded, and asks for logits in whole blocks of ROW_BLOCK rows: alone or
    beside any other work, each of its rows then has the same bits."""

    lane: Lane
    lengths: tuple[int, ...]  # tokens per stream it decodes, in entry order
    streams: int  # streams it borrows for the round
    prepare: Callable[[StreamContext, list[int]], list[Entry]]
    finish: Callable[[StreamContext, Callable[[int], np.ndarray]], Any]
    outcome: Future[Any] = field(default_factory=Future)

    @property
    def rows(self) -> int:
        return sum(map(padded_width, self.lengths))


class ScoringBatcher:
    """Rounds of batched decision work on the model thread (see the module)."""

    def __init__(self, context: StreamContext, runner: ModelRunner, lanes: int) -> None:
        if context.n_streams <= lanes:
            raise ValueError("the context needs streams to lend beside the lanes' own")
        self._context = context
        self._runner = runner
        self._lock = threading.Lock()
        self._waiting: deque[Work] = deque()
        self._free_lanes = list(range(lanes))
        self._lendable = list(range(lanes, context.n_streams))
        self._scheduled = False  # a round is queued or running on the model thread

    @property
    def n_batch(self) -> int:
        return self._context.n_batch

    @property
    def chunk(self) -> int:
        """The most tokens of one stream a work decodes: padded, they fit a batch."""
        return self.n_batch // ROW_BLOCK * ROW_BLOCK

    @property
    def lendable(self) -> int:
        return len(self._lendable)

    # --- the event loop's side ---------------------------------------------------------
    async def run(self, function: Callable[[LaneDecoder], T], until: float) -> tuple[T, float]:
        """Admit, then `function(decoder)` on a thread of its own; returns (its result, ms
        waited for admission). Leaving (cancellation) drops the rest of its model work; the
        admission slot frees when its thread has ended."""
        arrived = time.perf_counter()
        done: Future[T] = Future()
        done.set_running_or_notify_cancel()  # a caller that leaves cannot cancel the thread's work
        await self._runner.admit_job(done)
        with self._lock:
            lane = Lane(self._free_lanes.pop(), until)
        waited_ms = (time.perf_counter() - arrived) * 1000

        def work() -> None:
            try:
                result, error = function(LaneDecoder(self, lane)), None
            except BaseException as failure:  # noqa: BLE001 - handed to the awaiting task
                result, error = None, self._runner.failure(failure)
            with self._lock:  # the lane is free before the slot (done's callbacks free it)
                self._free_lanes.append(lane.stream)
            if error is None:
                done.set_result(result)  # type: ignore[arg-type]
            else:
                done.set_exception(error)

        threading.Thread(target=work, name="scoring", daemon=True).start()
        finished = asyncio.wrap_future(done)
        gone = CLIENT_GONE.get()
        try:
            while not (await asyncio.wait({finished}, timeout=CLIENT_CHECK_S))[0]:
                if gone is not None and await gone():
                    raise RequestError(
                        400,
                        "the client disconnected before its decisions were scored",
                        error_type="client_disconnected",
                    )
            return finished.result(), waited_ms
        finally:
            lane.left.set()  # a no-op once done; else the client left: stop at the next round

    def close(self) -> None:
        """After the model thread has stopped (ModelRunner.close)."""
        self._context.close()

    # --- a lane's thread ---------------------------------------------------------------
    def submit(self, work: Work) -> Any:
        """Queue `work` for the next round and wait for its result (on the lane's thread)."""
        with self._lock:
            self._waiting.append(work)
            if not self._scheduled:
                self._scheduled = True
                self._submit_round()
        return work.outcome.result()

    def _submit_round(self) -> None:
        try:
            self._runner.submit(self._round)
        except RuntimeError:  # the model thread is closed (the process is exiting)
            self._scheduled = False
            for work in self._waiting:
                work.outcome.set_exception(EngineError("the model thread has stopped"))
            self._waiting.clear()

    # --- the model thread's side -------------------------------------------------------
    def _round(self) -> None:
        context = self._context
        with self._lock:
            waiting, self._waiting = self._waiting, deque()
        taken: list[tuple[Work, list[int]]] = []
        deferred: deque[Work] = deque()
        room, lendable = context.n_batch, list(self._lendable)
        now = time.perf_counter()
        for work in waiting:
            if work.lane.left.is_set():
                work.outcome.set_exception(LeftEarly("the client left"))
            elif now > work.lane.until:
                work.outcome.set_exception(
                    DeadlinePassed(f"the deadline passed before a batch of {work.rows} tokens")
                )
            elif work.rows <= room and work.streams <= len(lendable):
                room -= work.rows
                taken.append((work, [lendable.pop() for _ in range(work.streams)]))
            else:
                deferred.append(work)
        try:
            self._decode(taken)
        finally:
            for _, streams in taken:
                for stream in streams:
                    context.clear(stream)
            with self._lock:
                deferred.extend(self._waiting)
                self._waiting = deferred
                if self._waiting:
                    self._submit_round()
                else:
                    self._scheduled = False

    def _decode(self, taken: list[tuple[Work, list[int]]]) -> None:
        context = self._context
        entries: list[Entry] = []
        ready: list[tuple[Work, list[int]]] = []  # each work's entries' batch indexes
        padding: list[tuple[int, int]] = []  # (stream, first padded position)
        for work, streams in taken:
            try:
                own = work.prepare(context, streams)
            except Exception as error:  # noqa: BLE001 - this request's failure alone
                work.outcome.set_exception(error)
                continue
            ready.append((work, _padded(own, entries, padding)))
        # By stream (a micro-batch takes a run of consecutive streams), stably.
        order = sorted(range(len(entries)), key=lambda index: entries[index][2])
        try:
            if entries:
                context.decode([entries[index] for index in order])
        except Exception as error:  # noqa: BLE001 - the batch failed (interrupted): all fail
            for work, _ in ready:
                work.outcome.set_exception(error)
            return
        finally:
            for stream, position in padding:
                context.cut(stream, position)
        at = {index: rank for rank, index in enumerate(order)}
        for work, indexes in ready:

            def logits_at(k: int, indexes: list[int] = indexes) -> np.ndarray:
                return context.logits(at[indexes[k]])

            try:
                result = work.finish(context, logits_at)
            except Exception as error:  # noqa: BLE001 - this request's failure alone
                work.outcome.set_exception(error)
            else:
                work.outcome.set_result(result)


def _padded(own: list[Entry], entries: list[Entry], padding: list[tuple[int, int]]) -> list[int]:
    """Append a work's entries to `entries`, each stream's piece padded to a multiple of
    ROW_BLOCK with copies of its last token at the positions after it, and logits asked of
    every row of a block that has a row asking; the indexes of its own entries. The padding's
    (stream, first position) go to `padding`, to be cut once decoded."""
    pieces: list[list[Entry]] = []
    for entry in own:
        if pieces and pieces[-1][-1][2] == entry[2]:
            pieces[-1].append(entry)
        else:
            pieces.append([entry])
    indexes: list[int] = []
    for piece in pieces:
        token, last, stream, _ = piece[-1]
        padding.append((stream, last + 1))
        extra = [
            (token, last + 1 + step, stream, False)
            for step in range(padded_width(len(piece)) - len(piece))
        ]
        rows = piece + extra
        for block in range(0, len(rows), ROW_BLOCK):
            asks = any(row[3] for row in rows[block : block + ROW_BLOCK])
            for offset, (token_, position, stream_, _) in enumerate(
                rows[block : block + ROW_BLOCK]
            ):
                if block + offset < len(piece):
                    indexes.append(len(entries))
                entries.append((token_, position, stream_, asks))
    return indexes


def _chunks(count: int, size: int) -> list[range]:
    """0..count in consecutive ranges of `size` (one empty range for nothing)."""
    return [range(start, min(start + size, count)) for start in range(0, count, size)] or [range(0)]


class LaneDecoder:
    """score.Decoder for one lane: each step one or more Works of the batcher's rounds."""

    def __init__(self, batcher: ScoringBatcher, lane: Lane) -> None:
        self._batcher = batcher
        self._lane = lane
        self._state: bytes | None = None
        self._question_length = 0  # the state's and the question's tokens
        self._question: bytes | None = None  # the question's sequence, saved for its paths

    def _do(
        self,
        lengths: Sequence[int],
        prepare: Callable[[StreamContext, list[int]], list[Entry]],
        finish: Callable[[StreamContext, Callable[[int], np.ndarray]], Any] = lambda *_: None,
        streams: int = 0,
    ) -> Any:
        work = Work(self._lane, tuple(n for n in lengths if n), streams, prepare, finish)
        return self._batcher.submit(work)

    def begin(self) -> None:
        self._state = self._question = None

    def prefill(self, tokens: Sequence[int]) -> bytes:
        own = self._lane.stream
        chunks = _chunks(len(tokens), self._batcher.chunk)
        saved: bytes = b""
        for number, chunk in enumerate(chunks):

            def prepare(context: StreamContext, _: list[int], chunk: range = chunk) -> list[Entry]:
                if chunk.start == 0:
                    context.clear(own)
                return [(tokens[i], i, own, False) for i in chunk]

            def save(context: StreamContext, _: Callable[[int], np.ndarray]) -> bytes:
                return context.save(own)

            last = number == len(chunks) - 1
            saved = self._do([len(chunk)], prepare, save if last else lambda *_: None)
        return saved

    def use_state(self, saved: bytes) -> None:
        self._state = saved

    def question(self, suffix: Sequence[int]) -> np.ndarray:
        own, state = self._lane.stream, self._state
        if state is None:
            raise EngineError("a question before its state")
        self._question = None
        start = [0]
        chunks = _chunks(len(suffix), self._batcher.chunk)
        row: np.ndarray | None = None
        for chunk in chunks:

            def prepare(context: StreamContext, _: list[int], chunk: range = chunk) -> list[Entry]:
                if chunk.start == 0:
                    context.restore(own, state)
                    start[0] = context.length(own)
                last = len(suffix) - 1
                return [(suffix[i], start[0] + i, own, i == last) for i in chunk]

            def copy_last(
                _: StreamContext, logits_at: Callable[[int], np.ndarray], chunk: range = chunk
            ) -> Any:
                return logits_at(len(chunk) - 1).copy() if chunk.stop == len(suffix) else None

            row = self._do([len(chunk)], prepare, copy_last)
        self._question_length = start[0] + len(suffix)
        if row is None:
            raise EngineError("an empty question suffix")
        return row

    def paths(
        self, nodes: Sequence[Node], n_paths: int, read: Callable[[int, np.ndarray], Read]
    ) -> list[Read]:
        """Each path on a stream of its own, all its tokens; a node shared by several paths is
        read on the first (the same bits on each: the same tokens after the same cells)."""
        through: list[list[int]] = [[] for _ in range(n_paths)]
        for index, node in enumerate(nodes):
            for path in node.paths:
                through[path].append(index)
        results: dict[int, Read] = {}
        n_batch, chunk, start = self._batcher.n_batch, self._batcher.chunk, self._question_length
        group: list[int] = []
        groups: list[list[int]] = []
        rows = 0
        for path in range(n_paths):
            rows += padded_width(len(through[path]))
            if group and (rows > n_batch or len(group) == self._batcher.lendable):
                groups.append(group)
                group, rows = [], padded_width(len(through[path]))
            group.append(path)
        groups.append(group)
        for group in groups:
            if len(through[group[0]]) > chunk:  # one long path: chunks on the lane's stream
                self._long_path(nodes, through[group[0]], read, results)
                continue
            wanted = [
                (path, depth, index) for path in group for depth, index in enumerate(through[path])
            ]

            def prepare(
                context: StreamContext, streams: list[int], group: list[int] = group
            ) -> list[Entry]:
                saved = self._saved_question(context)
                entries: list[Entry] = []
                for path, stream in zip(group, streams, strict=True):
                    context.restore(stream, saved)
                    entries += [
                        (nodes[index].token, start + depth, stream, nodes[index].paths[0] == path)
                        for depth, index in enumerate(through[path])
                    ]
                return entries

            def finish(
                _: StreamContext,
                logits_at: Callable[[int], np.ndarray],
                wanted: list[tuple[int, int, int]] = wanted,
            ) -> None:
                for k, (path, _depth, index) in enumerate(wanted):
                    if nodes[index].paths[0] == path:
                        results[index] = read(index, logits_at(k))

            self._do([len(through[path]) for path in group], prepare, finish, streams=len(group))
        return [results[index] for index in range(len(nodes))]

    def _long_path(
        self,
        nodes: Sequence[Node],
        path: list[int],
        read: Callable[[int, np.ndarray], Read],
        results: dict[int, Any],
    ) -> None:
        """A path longer than a batch, in n_batch chunks on the lane's own stream, restored from
        the saved question first (so another long path of the question finds the same)."""
        own, start = self._lane.stream, self._question_length
        for chunk in _chunks(len(path), self._batcher.chunk):

            def prepare(context: StreamContext, _: list[int], chunk: range = chunk) -> list[Entry]:
                if chunk.start == 0:
                    context.restore(own, self._saved_question(context))
                return [(nodes[path[i]].token, start + i, own, True) for i in chunk]

            def finish(
                _: StreamContext, logits_at: Callable[[int], np.ndarray], chunk: range = chunk
            ) -> None:
                for k, i in enumerate(chunk):
                    results[path[i]] = read(path[i], logits_at(k))

            self._do([len(chunk)], prepare, finish)

    def _saved_question(self, context: StreamContext) -> bytes:
        """The lane's stream as the question left it, saved once per question (model thread)."""
        if self._question is None:
            self._question = context.save(self._lane.stream)
        return self._question

    def end_question(self) -> None:
        self._question = None

    def end(self) -> None:
        self._state = self._question = None
