"""Decisions admitted together share the model's calls (DECISION_MAX_SCORING_REQUESTS): the
decision rounds. How a round runs: docs/architecture.md, "Batching"; why each answer keeps the
bits of its request alone: docs/scoring.md, "Requests at once".

Here, what the pages leave to the code. Each span is padded to a multiple of ROW_BLOCK tokens and
each call asks for logits in a multiple of ROW_BLOCK rows (the rows it reads, then rows nobody
reads): llama.cpp's CPU matrix products round a row by the rows beside it (measured in
tests/adapter/service/test_scoring_batching.py). The padding is cut once decoded, which a
recurrent memory cannot do: a hybrid model is scored one request at a time. A call that fails is
tried again a request at a time, so its failure reaches only its own request; at shutdown the
call in progress is interrupted, and every step fails.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, TypeVar

import numpy as np

from ..contract import CLIENT_GONE
from ..deadline import Deadline
from ..errors import EngineError, RequestError
from ..model.engine import DeadlinePassed
from ..model.prefix_tree import Node
from ..model.streams import StreamContext
from ..scoring.score import ScoringPlan
from .admission import ModelRunner
from .rounds import RoundLoop

T = TypeVar("T")
Read = TypeVar("Read")
Entry = tuple[int, int, int, bool]  # token, position, stream, wants logits
Logits = Callable[[int], np.ndarray]  # a span's row k (k: an index into its tokens)
# How often a request waiting for its rounds asks whether its client is still there.
CLIENT_CHECK_S = 0.1
# The longest a round waits for the admitted requests still between two steps (reading their
# last logits, or their thread starting): a round with every request's next step shares the
# most calls.
GATHER_S = 0.005
# The rows every span and every call's logits come in (see the module).
ROW_BLOCK = 8
# Restored cells that cost about one prompt token's time on the bundled model at 2 threads;
# what the budget charges for sharing_work is timed by research/budget_worst_case in batched mode.
RESTORED_CELLS_PER_TOKEN = 1024


class LeftEarly(EngineError):
    """The request's client left: its remaining model work is dropped."""


@dataclass
class Lane:
    """One admitted request's place in the rounds."""

    until: Deadline  # no round of its work starts past it
    left: threading.Event = field(default_factory=threading.Event)


def padded_width(tokens: int) -> int:
    """The tokens a span is padded to."""
    return max(ROW_BLOCK, -(-tokens // ROW_BLOCK) * ROW_BLOCK)


def stream_cells(request_tokens: int) -> int:
    """The cells a stream needs for a request of `request_tokens`: its last span's padding
    lies past its last token (a span ending at the limit runs up to ROW_BLOCK - 1 beyond)."""
    return request_tokens + ROW_BLOCK


def padding(tokens: int) -> int:
    """The rows a span of `tokens` is padded with past its last token."""
    return padded_width(tokens) - tokens if tokens else 0


@dataclass(frozen=True)
class SharingWork:
    """What the rounds do for a plan beyond the tokens one at a time decodes."""

    rows: int  # decoded besides: paths' tokens the tree shares, and every span's padding
    cells: int  # restored from saved sequences

    @property
    def cost(self) -> int:
        """In prompt tokens' worth: a row a token, RESTORED_CELLS_PER_TOKEN cells a token."""
        return self.rows + -(-self.cells // RESTORED_CELLS_PER_TOKEN)


def sharing_work(plan: ScoringPlan) -> SharingWork:
    """No stream belongs to a request: each question restores its state's saved sequence, and
    each option path the question's whole one (state and question). Each path is a span of its
    own, all its tokens decoded (not only those the tree does not share), and every span is
    padded to ROW_BLOCK rows. One at a time, paths share the question's cells in one sequence,
    each distinct prefix decoded once."""
    prefills = [len(plan.prefix_tokens)]
    calibrated = any(question.readout == "calibrated" for question in plan.questions)
    if calibrated and plan.content_free_prefix is not None:
        prefills.append(len(plan.content_free_prefix))  # the second pass, on "N/A"
    cells, rows = 0, sum(map(padding, prefills))
    for question in plan.questions:
        passes = prefills if question.readout == "calibrated" else prefills[:1]
        for prefix in passes:
            for reading in question.readings:
                paths = [path for batch in reading.tree_batches for path in batch]
                cells += prefix + len(paths) * (prefix + len(reading.suffix_tokens))
                rows += padding(len(reading.suffix_tokens))
                rows += sum(padded_width(len(path)) for path in paths) - reading.branch_tokens
    return SharingWork(rows, cells)


def _nothing(*_: Any) -> None:
    return None


@dataclass
class Span:
    """One stream's tokens in a call. `load` readies the stream it is given (clears it, or
    restores a saved sequence) and returns the position of the first token; `done` runs right
    after the call, before the stream is lent again (reads the rows in `asks`, saves the
    stream)."""

    tokens: Sequence[int]
    asks: Sequence[int]  # the indexes of the tokens whose logits it reads
    load: Callable[[StreamContext, int], int]
    done: Callable[[StreamContext, int, Logits], None] = _nothing

    @property
    def width(self) -> int:
        return padded_width(len(self.tokens)) if self.tokens else 0


@dataclass
class Step:
    """One model step of one lane, its spans decoded in one round (they hand their results
    over in `done`); its outcome is set once they all are."""

    lane: Lane
    spans: list[Span]
    outcome: Future[None] = field(default_factory=Future)

    @property
    def rows(self) -> int:
        return sum(span.width for span in self.spans)


class ScoringBatcher(RoundLoop[Step]):
    """The decision rounds: the lanes' steps, decoded in calls of equal width
    (docs/architecture.md, "Batching")."""

    def __init__(self, context: StreamContext, runner: ModelRunner) -> None:
        super().__init__(context, runner)
        self._lanes = 0  # admitted requests whose thread has not ended

    @property
    def n_batch(self) -> int:
        return self._context.n_batch

    @property
    def queued_steps(self) -> int:
        """Steps waiting for a round."""
        return len(self._queue)

    @property
    def chunk(self) -> int:
        """The most tokens of one span: padded, they fit a batch."""
        return self.n_batch // ROW_BLOCK * ROW_BLOCK

    # --- the event loop's side ---------------------------------------------------------
    async def run(self, function: Callable[[LaneDecoder], T], until: Deadline) -> tuple[T, float]:
        """Admit, then `function(decoder)` on a thread of its own; returns (its result, ms
        waited for admission). Leaving (cancellation) drops the rest of its model work; the
        admission slot frees when its thread has ended."""
        arrived = time.perf_counter()
        done: Future[T] = Future()
        done.set_running_or_notify_cancel()  # a caller that leaves cannot cancel the thread's work
        await self._runner.admit_until(done)
        lane = Lane(until)
        waited_ms = (time.perf_counter() - arrived) * 1000

        def lane_thread() -> None:
            try:
                result, error = function(LaneDecoder(self, lane)), None
            except BaseException as failure:  # noqa: BLE001 - handed to the awaiting task
                result, error = None, self._runner.failure(failure)
            with self._ready:
                self._lanes -= 1
                self._ready.notify()
            if error is None:
                done.set_result(result)  # type: ignore[arg-type]
            else:
                done.set_exception(error)

        with self._lock:
            self._lanes += 1
        threading.Thread(target=lane_thread, name="scoring", daemon=True).start()
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

    # --- a lane's thread ---------------------------------------------------------------
    def submit(self, step: Step) -> None:
        """Queue `step` for the next round and wait until it is done (on the lane's thread)."""
        self._put(step)
        step.outcome.result()

    # --- the model thread's side (RoundLoop) -------------------------------------------
    def _gather(self) -> None:
        # The runner's count also holds a request admitted in a slot just handed over.
        self._ready.wait_for(
            lambda: len(self._queue) >= max(self._lanes, self._runner.in_flight),
            timeout=GATHER_S,
        )

    def _take(self, queued: deque[Step]) -> tuple[list[Step], deque[Step]]:
        """In arrival order, the steps whose rows fit the batch left; a lane gone or past its
        deadline ends here."""
        taken: list[Step] = []
        waits: deque[Step] = deque()
        room = self.n_batch
        for step in queued:
            if step.lane.left.is_set():
                step.outcome.set_exception(LeftEarly("the client left"))
            elif step.lane.until.passed():
                step.outcome.set_exception(
                    DeadlinePassed(f"the deadline passed before a batch of {step.rows} tokens")
                )
            elif step.rows <= room:  # a step alone fits a batch (LaneDecoder)
                room -= step.rows
                taken.append(step)
            else:
                waits.append(step)
        return taken, waits

    def _stopped(self, queued: list[Step], error: EngineError) -> None:
        for step in queued:
            step.outcome.set_exception(error)

    def _run(self, taken: list[Step]) -> None:
        """The taken steps' spans in calls of equal width, then each step's result."""
        spans = sorted(
            ((step, span) for step in taken for span in step.spans),
            key=lambda pair: pair[1].width,
        )
        for width, alike in groupby(spans, key=lambda pair: pair[1].width):
            each = min(self._context.n_streams, self.n_batch // max(width, 1))
            same = list(alike)
            for start in range(0, len(same), each):
                self._call_apart(same[start : start + each])
        for step in taken:
            if not step.outcome.done():  # else one of its spans failed
                step.outcome.set_result(None)

    def _call_apart(self, spans: list[tuple[Step, Span]]) -> None:
        """`_call`, and where it fails, each step's spans again in a call of their own: a
        failure reaches only the request it belongs to, not the others sharing its call.
        (Interrupted at shutdown, every call fails: every step then does.)"""
        try:
            self._call(spans)
        except Exception as error:  # noqa: BLE001 - whose failure: decided below
            steps: list[Step] = []
            for step, _ in spans:
                if not step.outcome.done() and all(step is not s for s in steps):
                    steps.append(step)
            if len(steps) == 1:
                steps[0].outcome.set_exception(error)
                return
            for step in steps:
                own = [(s, span) for s, span in spans if s is step]
                try:
                    self._call(own)
                except Exception as alone:  # noqa: BLE001 - this request's failure alone
                    step.outcome.set_exception(alone)

    def _call(self, spans: list[tuple[Step, Span]]) -> None:
        """One llama_decode: span k on stream k, padded to its width; logits asked of a
        multiple of ROW_BLOCK rows."""
        context = self._context
        entries: list[Entry] = []
        placed: list[tuple[Step, Span, int, int]] = []  # (step, span, stream, position)
        for step, span in spans:
            if step.outcome.done():  # failed in an earlier call of this round
                continue
            stream = len(placed)
            try:
                start = span.load(context, stream)
            except Exception as error:  # noqa: BLE001 - this request's failure alone
                step.outcome.set_exception(error)
                continue
            placed.append((step, span, stream, start))
            padding = [span.tokens[-1]] * (span.width - len(span.tokens)) if span.tokens else []
            asks = set(span.asks)
            entries += [
                (token, start + i, stream, i in asks)
                for i, token in enumerate([*span.tokens, *padding])
            ]
        unread = -sum(len(span.asks) for _, span, _, _ in placed) % ROW_BLOCK
        for index in reversed(range(len(entries))):  # the last rows nobody reads
            if not unread:
                break
            if not entries[index][3]:
                entries[index] = (*entries[index][:3], True)
                unread -= 1
        if entries:
            try:
                context.decode(entries)
            finally:
                for _, span, stream, start in placed:
                    context.cut(stream, start + len(span.tokens))
        first = 0  # each span's first row in the batch
        for step, span, stream, _ in placed:

            def logits(k: int, first: int = first) -> np.ndarray:
                return context.logits(first + k)

            first += span.width
            try:
                span.done(context, stream, logits)
            except Exception as error:  # noqa: BLE001 - this request's failure alone
                if not step.outcome.done():
                    step.outcome.set_exception(error)


def _chunks(count: int, size: int) -> list[range]:
    """0..count in consecutive ranges of `size` (one empty range for nothing)."""
    return [range(start, min(start + size, count)) for start in range(0, count, size)] or [range(0)]


def _clear(context: StreamContext, stream: int) -> int:
    context.clear(stream)
    return 0


def _restoring(saved: Callable[[], bytes]) -> Callable[[StreamContext, int], int]:
    """A span's `load` that restores a saved sequence: its first token follows it."""

    def load(context: StreamContext, stream: int) -> int:
        context.restore(stream, saved())
        return context.length(stream)

    return load


class LaneDecoder:
    """score.Decoder for one lane: each of its model steps is one or more `Step`s of the rounds."""

    def __init__(self, batcher: ScoringBatcher, lane: Lane) -> None:
        self._batcher = batcher
        self._lane = lane
        self._state: bytes | None = None
        self._question: bytes | None = None  # the question's sequence, saved for its paths

    def _do(self, spans: list[Span]) -> None:
        self._batcher.submit(Step(self._lane, spans))

    def _in_chunks(
        self,
        tokens: Sequence[int],
        first: Callable[[StreamContext, int], int],
        asks: Callable[[range], Sequence[int]],
        read: Callable[[range, Logits], None],
        keep: bool,
    ) -> bytes:
        """`tokens` on one sequence in spans of at most a chunk, one round each: the first
        loaded by `first`, each after it restored from the one before (saved after it);
        `read(chunk, logits)` after each. The sequence saved at the end if `keep`."""
        chunks = _chunks(len(tokens), self._batcher.chunk)
        saved = b""
        for number, chunk in enumerate(chunks):
            last = number == len(chunks) - 1

            def done(
                context: StreamContext,
                stream: int,
                logits: Logits,
                chunk: range = chunk,
                save: bool = keep or not last,
            ) -> None:
                nonlocal saved
                read(chunk, logits)
                if save:
                    saved = context.save(stream)

            load = first if number == 0 else _restoring(lambda: saved)
            self._do([Span([tokens[i] for i in chunk], asks(chunk), load, done)])
        return saved

    def begin(self) -> None:
        self._state = self._question = None

    def prefill(self, tokens: Sequence[int]) -> bytes:
        return self._in_chunks(tokens, _clear, lambda _: (), _nothing, keep=True)

    def use_state(self, saved: bytes) -> None:
        self._state = saved

    def question(self, suffix: Sequence[int]) -> np.ndarray:
        state = self._state
        if state is None:
            raise EngineError("a question before its state")
        if not suffix:
            raise EngineError("an empty question suffix")
        last = len(suffix) - 1
        row: np.ndarray | None = None

        def asks(chunk: range) -> Sequence[int]:
            return [last - chunk.start] if last in chunk else ()

        def read(chunk: range, logits: Logits) -> None:
            nonlocal row
            if last in chunk:
                row = logits(last - chunk.start).copy()

        # Saved for the question's paths (its stream is lent again after the call).
        self._question = self._in_chunks(suffix, _restoring(lambda: state), asks, read, True)
        assert row is not None  # the last chunk holds the last token
        return row

    def paths(
        self, nodes: Sequence[Node], n_paths: int, read: Callable[[int, np.ndarray], Read]
    ) -> list[Read]:
        """Each path a span of its own, all its tokens after the saved question; a node shared
        by several paths is read on the first (the same bits on each: the same tokens after the
        same cells). As many paths a round as fit a batch; a path longer than a batch in
        chunks, one a round."""
        question = self._question
        if question is None:
            raise EngineError("paths before their question")
        results: dict[int, Read] = {}
        through: list[list[int]] = [[] for _ in range(n_paths)]
        for index, node in enumerate(nodes):
            for path in node.paths:
                through[path].append(index)

        def own(path: int) -> list[int]:
            """The depths of the nodes read on `path`."""
            return [d for d, i in enumerate(through[path]) if nodes[i].paths[0] == path]

        def asking(path: int) -> Callable[[range], Sequence[int]]:
            """The rows of `chunk` of `path`'s tokens whose logits it reads."""
            return lambda chunk: [depth - chunk.start for depth in own(path) if depth in chunk]

        def reading(path: int) -> Callable[[range, Logits], None]:
            """Reads the nodes of `path` in `chunk` of its tokens."""

            def read_chunk(chunk: range, logits: Logits) -> None:
                for depth in own(path):
                    if depth in chunk:
                        index = through[path][depth]
                        results[index] = read(index, logits(depth - chunk.start))

            return read_chunk

        n_batch, rows = self._batcher.n_batch, 0
        group: list[Span] = []
        for path in range(n_paths):
            tokens = [nodes[index].token for index in through[path]]
            if len(tokens) > self._batcher.chunk:
                self._in_chunks(
                    tokens,
                    _restoring(lambda: question),
                    asking(path),
                    reading(path),
                    keep=False,
                )
                continue

            def done(
                _: StreamContext, __: int, logits: Logits, path: int = path, n: int = len(tokens)
            ) -> None:
                reading(path)(range(n), logits)

            span = Span(tokens, own(path), _restoring(lambda: question), done)
            if group and rows + span.width > n_batch:
                self._do(group)
                group, rows = [], 0
            group.append(span)
            rows += span.width
        if group:
            self._do(group)
        return [results[index] for index in range(len(nodes))]

    def end_question(self) -> None:
        self._question = None

    def end(self) -> None:
        self._state = self._question = None
