"""Decisions admitted together (DECISION_MAX_SCORING_REQUESTS above 1) share the model's
batches, and every answer keeps the bits it has alone.

Over the model matrix (every served family but the hybrid one, which is scored one at a time,
and two real instruct models), in-process: requests of every readout, short and long states, a
question of 60 options whose paths outnumber the streams a round lends, scored one at a time,
then all at once (half finding their state kept), then alone again in reverse, read the same
bits; requests of one shape take one batch per step between them. Why the rounds pad their work:
the kernel measurement below. Over HTTP on the bundled model: the same bits for concurrent
clients, admission bounded (503 beyond it), a departed client's work dropped at the next round,
the deadline and SIGTERM as for one request at a time (docs/hardening.md).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
from decision_adapter.contract import READOUTS, Question
from decision_adapter.deadline import NEVER
from decision_adapter.model.engine import Engine, EngineConfig
from decision_adapter.model.streams import StreamContext
from decision_adapter.scoring.prompts import PromptRenderer
from decision_adapter.scoring.score import build_plan, score
from decision_adapter.scoring.state_cache import StateCache
from decision_adapter.service.admission import ModelRunner
from decision_adapter.service.scoring_batching import ScoringBatcher

from launcher import running_adapter, wait_until
from tests.adapter.model.test_model_matrix import (
    ANGRY,
    BINS,
    LONG_STATE,
    REAL,
    ROUTE,
    SHORT_STATE,
    _with,
)
from tests.conftest import MODEL_THREADS
from tests.support.adapter_process import post_together
from tests.support.bodies import decision
from tests.support.model_matrix import SERVED, ensure_matrix

LANES = 4
# A hybrid model is scored one request at a time (its recurrent state keeps the padding).
BATCHED = [family for family in (*SERVED, *REAL) if family.memory != "hybrid"]
HYBRID = [family for family in SERVED if family.memory == "hybrid"]


@pytest.fixture(scope="module")
def matrix():
    from launcher.models import local_model

    return {**ensure_matrix(), **{family.name: local_model(family.name) for family in REAL}}


def _requests(renderer: PromptRenderer) -> list:
    """Plans of every readout, on two states; one question of 60 options (more paths than a
    round lends) and a shared-state request of two questions."""
    plans = []
    for index, readout in enumerate(READOUTS):
        state = SHORT_STATE if index % 2 == 0 else LONG_STATE
        plans.append(build_plan(renderer, state, [_with(ROUTE, readout)]))
    plans.append(build_plan(renderer, SHORT_STATE, [_with(BINS, "option_text")]))
    plans.append(build_plan(renderer, LONG_STATE, [ROUTE, _with(ANGRY, "calibrated")]))
    return plans


def _batched(engine: Engine, lanes: int = LANES) -> tuple[ScoringBatcher, ModelRunner]:
    runner = ModelRunner(max_queue=64, wait_s=60, retry_after_s=1, max_in_flight=lanes)
    context = StreamContext(engine, 2 * lanes, 4096, swa_full=True, flash_attention=True)
    return ScoringBatcher(context, runner), runner


def _logits(results) -> list[np.ndarray]:
    return [question.option_logits for question in results]


@pytest.mark.parametrize("family", BATCHED, ids=lambda family: family.name)
def test_requests_scored_together_read_the_same_answers_as_alone_in_fewer_batches(family, matrix):
    engine = Engine(
        matrix[family.name],
        EngineConfig(
            n_ctx=4096, n_batch=512, n_threads=MODEL_THREADS, n_gpu_layers=0, n_seq_max=64
        ),
    )
    batcher, runner = _batched(engine)
    try:
        plans = _requests(PromptRenderer(engine))
        assert 2 * LANES < len(BINS.option_ids)  # its paths take several calls
        cache = StateCache(64 << 20, "matrix")

        async def one(plan, kept=None):
            (results, _), _ = await batcher.run(lambda d: score(d, plan, cache=kept), NEVER)
            return _logits(results)

        async def alone():
            return [await one(plan) for plan in plans]

        async def alone_reversed():
            return [await one(plan) for plan in reversed(plans)][::-1]

        async def together(batch, kept=None):
            return await asyncio.gather(*(one(plan, kept) for plan in batch))

        async def queued_together(batch):
            """`batch` at once, the model thread held until each has queued its first step."""
            release = threading.Event()
            runner.submit(release.wait)
            scoring = asyncio.ensure_future(together(batch))
            while batcher.queued_steps < len(batch):
                await asyncio.sleep(0.001)
            release.set()
            return await scoring

        expected = asyncio.run(alone())
        # Every plan twice at once: the second of each finds its state kept.
        seen = asyncio.run(together(plans + plans, cache))
        assert cache.stats.hits >= len(plans)
        for got in (seen[: len(plans)], seen[len(plans) :]):
            for want, have in zip(expected, got, strict=True):
                for a, b in zip(want, have, strict=True):
                    assert np.array_equal(a, b), (family.name, a, b)
        # One at a time, in any order, after any other work: the same bits.
        again = asyncio.run(alone_reversed())
        for want, have in zip(expected, again, strict=True):
            assert all(np.array_equal(a, b) for a, b in zip(want, have, strict=True))
        # Requests of one shape queued at once go in step: each step's pieces share calls.
        calls = engine.stats.decode_calls
        asyncio.run(one(plans[0]))
        one_calls = engine.stats.decode_calls - calls
        calls = engine.stats.decode_calls
        asyncio.run(queued_together([plans[0]] * LANES))
        assert engine.stats.decode_calls - calls == one_calls
    finally:
        runner.close()
        batcher.close()
        engine.close()


def test_a_path_longer_than_a_batch_reads_the_same_answers_alone_and_together(matrix):
    """n_batch 32: the options' paths outgrow a batch and go in chunks on the lane's stream."""
    engine = Engine(
        matrix[BATCHED[0].name],
        EngineConfig(n_ctx=4096, n_batch=32, n_threads=MODEL_THREADS, n_gpu_layers=0, n_seq_max=8),
    )
    batcher, runner = _batched(engine, lanes=2)
    long = Question("Which clause applies?", ["a", "b"], [" ".join(["words"] * 60), "short"])
    try:
        renderer = PromptRenderer(engine)
        plans = [
            build_plan(renderer, SHORT_STATE, [_with(long, "option_text_desc")]),
            build_plan(renderer, LONG_STATE, [_with(ROUTE, "option_text_desc")]),
        ]
        assert any(len(batch[0]) > 32 for batch in plans[0].questions[0].readings[0].tree_batches)

        async def one(plan):
            (results, _), _ = await batcher.run(lambda d: score(d, plan), NEVER)
            return _logits(results)

        async def run_all():
            alone = [await one(plan) for plan in plans]
            return alone, await asyncio.gather(*(one(plan) for plan in plans))

        alone, together = asyncio.run(run_all())
        for want, have in zip(alone, together, strict=True):
            assert all(np.array_equal(a, b) for a, b in zip(want, have, strict=True))
    finally:
        runner.close()
        batcher.close()
        engine.close()


def _rows_beside(context: StreamContext, tokens: list[int], lengths: list[int]) -> np.ndarray:
    """Stream 0's last logits row when streams 0.. decode `lengths` tokens in one batch."""
    for stream in range(context.n_streams):
        context.clear(stream)
    entries = [
        (tokens[stream * 7 + i], i, stream, stream == 0 and i == length - 1)
        for stream, length in enumerate(lengths)
        for i in range(length)
    ]
    context.decode(entries)
    return context.logits(lengths[0] - 1).copy()


def test_a_rows_bits_follow_the_rows_beside_it_in_the_cpu_kernels():
    """Why a round pads its steps (scoring_batching.Step), on Qwen2.5-Coder-0.5B's real weights:
    the same 20 tokens of stream 0 read the same bits beside streams of 20 tokens each (every
    micro-batch holds as many of each stream), but not beside streams of 3 (llama.cpp splits
    stream 0's tokens 3 + 17 between micro-batches), nor 2 tokens beside one more stream of 2
    (4 rows: the repacked weights' 4-row kernel instead of the 1-row one)."""
    from launcher.models import local_model

    engine = Engine(
        local_model("qwen2.5-coder-0.5b"),
        EngineConfig(n_ctx=512, n_batch=512, n_threads=MODEL_THREADS, n_gpu_layers=0, n_seq_max=4),
    )
    context = StreamContext(engine, 4, 1024, swa_full=True)
    try:
        tokens = engine.tokenize(
            "The quick brown fox jumps over the lazy dog. " * 30, special=False
        )
        alone = _rows_beside(context, tokens, [20])
        assert np.array_equal(alone, _rows_beside(context, tokens, [20, 20, 20, 20]))
        assert not np.array_equal(alone, _rows_beside(context, tokens, [20, 3, 3, 3]))
        two = _rows_beside(context, tokens, [2])
        assert not np.array_equal(two, _rows_beside(context, tokens, [2, 2]))
    finally:
        context.close()
        engine.close()


# --- over HTTP, the bundled model -----------------------------------------------------------
BODIES = [
    decision("I was charged twice for my March invoice.", "Which team?", ("billing", "shipping")),
    decision(
        "My invoice was charged twice and I want a refund now",
        "Which team should handle this?",
        ("billing", "shipping", "technical support", "sales"),
        readout="option_text",
    ),
    decision(
        "order late by a week, customer furious", "Angry?", ("yes", "no"), readout="calibrated"
    ),
    decision(
        "disk full on db-1, writes failing " * 20,
        "How urgent is this?",
        ("page on-call now", "ticket for tomorrow", "ignore it"),
        readout="json_choice_sum",
    ),
]
SLOW = decision("ab " * 3000, "Is it?", ("yes", "no"), readout="letters")


@pytest.fixture(scope="module")
def batching(tmp_path_factory):
    with running_adapter(
        tmp_path_factory.mktemp("scoring"),
        DECISION_MAX_SCORING_REQUESTS=str(LANES),
        DECISION_MAX_QUEUE="8",
    ) as adapter:
        yield adapter


def _in_flight(adapter, count: int) -> None:
    wait_until(
        lambda: adapter.stats()["scoring_admission"]["in_flight"] == count,
        what=f"{count} decisions in flight",
    )


@pytest.mark.serial
def test_clients_at_once_get_the_bits_they_get_alone(batching):
    url = batching.url + "/invocations"
    alone = [httpx.post(url, json=body, timeout=120).json()["result"] for body in BODIES]
    together = [reply.json()["result"] for reply in post_together(url, BODIES + BODIES)]
    for index, result in enumerate(together):
        expected = alone[index % len(BODIES)]
        assert result["probabilities"] == expected["probabilities"]
        assert result["option_logits"] == expected["option_logits"]
        assert result["model"]["decision_batching"] == "shared"
    assert batching.stats()["scoring_admission"]["in_flight"] == 0


@pytest.mark.serial
def test_clients_of_one_shape_share_each_batch(batching):
    url = batching.url + "/invocations"
    body = BODIES[3]
    httpx.post(url, json=body, timeout=120)  # its state kept: each alike costs its question
    before = batching.stats()["engine"]["decode_calls"]
    httpx.post(url, json=body, timeout=120)
    one = batching.stats()["engine"]["decode_calls"] - before
    before = batching.stats()["engine"]["decode_calls"]
    post_together(url, [body] * LANES)
    assert batching.stats()["engine"]["decode_calls"] - before < LANES * one


@pytest.mark.serial
@pytest.mark.parametrize("family", HYBRID, ids=lambda family: family.name)
def test_a_hybrid_model_is_scored_one_request_at_a_time(family, matrix, tmp_path):
    with running_adapter(
        tmp_path,
        DECISION_MODEL_PATH=str(matrix[family.name]),
        DECISION_MAX_SCORING_REQUESTS=str(LANES),
    ) as adapter:
        reply = httpx.post(adapter.url + "/invocations", json=BODIES[0], timeout=60)
        assert reply.json()["result"]["model"]["decision_batching"] == "alone"
        assert "scoring_admission" not in adapter.stats()


@pytest.mark.serial
def test_beyond_the_bound_a_decision_gets_a_503_and_a_departed_client_frees_its_lane(tmp_path):
    with running_adapter(
        tmp_path, DECISION_MAX_SCORING_REQUESTS="2", DECISION_SLOT_GRACE_MS="0"
    ) as adapter:
        body = httpx.Request("POST", adapter.url + "/invocations", json=SLOW).content
        parts = urlsplit(adapter.url)
        connections = [socket.create_connection((parts.hostname, parts.port)) for _ in range(2)]
        for connection in connections:
            connection.sendall(
                b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body
            )
        _in_flight(adapter, 2)
        refused = httpx.post(adapter.url + "/invocations", json=BODIES[0], timeout=60)
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        left = time.monotonic()
        for connection in connections:
            connection.close()
        _in_flight(adapter, 0)  # dropped at the next round, not after 3,000 tokens each
        assert time.monotonic() - left < 5
        reply = httpx.post(adapter.url + "/invocations", json=BODIES[0], timeout=60)
        assert reply.status_code == 200


@pytest.mark.serial
def test_the_deadline_stops_each_batched_decision_with_a_retryable_503(tmp_path):
    with running_adapter(
        tmp_path, DECISION_MAX_SCORING_REQUESTS="2", DECISION_SCORING_DEADLINE_S="0.5"
    ) as adapter:
        url = adapter.url + "/invocations"
        for reply in post_together(url, [SLOW, SLOW]):
            assert reply.status_code == 503, reply.text
            assert "DECISION_SCORING_DEADLINE_S" in reply.json()["error"]
        assert httpx.post(url, json=BODIES[0], timeout=60).status_code == 200


@pytest.mark.serial
def test_sigterm_ends_every_batched_decision_with_a_retryable_error(tmp_path):
    with running_adapter(
        tmp_path, DECISION_MAX_SCORING_REQUESTS="2", DECISION_GRACEFUL_SHUTDOWN_S="1"
    ) as adapter:
        url = adapter.url + "/invocations"
        replies: list = [None, None]

        def send(index: int) -> None:
            replies[index] = httpx.post(url, json=SLOW, timeout=60)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        _in_flight(adapter, 2)
        adapter.process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join()
        wait_until(lambda: adapter.process.poll() is not None, what="the adapter to exit")
    for reply in replies:
        assert reply.status_code == 503 and reply.json()["retryable"] is True
        assert reply.json()["error_type"] == "shutting_down", reply.text
