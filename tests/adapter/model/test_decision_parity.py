"""Trained decision models served by the adapter answer as llama.cpp's own llama-server does.

For each type the adapter serves, a tiny random-weight decision GGUF (tests/support/
decision_models.py) is served by both, from the same engine build, with the same batch size
and one slot: every answer of the same /v1/systemone body is bit-identical (each prompt is
decoded alone in both, and the softmax is computed the same way: scoring/trained_head.py).
Then the adapter's own guarantees on top: a question's answer is the same alone and beside
others, the model block names the type, and a type the engine does not know stops the start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.llama_server import ServerSettings, running_llama_server
from bench.llama_server_build import ensure_llama_server
from launcher import running_adapter
from tests.support.decision_models import QUESTIONS, STATE, build

SERVED = ("openjev", "lev", "nimble")
SETTINGS = ServerSettings(threads=2, n_ctx=8192, n_batch=512, parallel=1)
ADAPTER_ENV = {"DECISION_N_THREADS": "2", "DECISION_N_CTX": "8192", "DECISION_N_BATCH": "512"}
MANY = {f"team_{n}": (f"handles case {n}" if n % 3 else None) for n in range(30)}
BODIES = {
    "three kinds": {"state": STATE, "questions": QUESTIONS},
    "two and thirty options, a JSON state": {
        "state": {"order": 1234, "paid": True, "note": "charged twice"},
        "questions": {
            "refund": {
                "type": "choice",
                "instructions": "Refund or not?",
                "criteria": {"refund": None, "decline": "not our fault"},
            },
            "queue": {"type": "choice", "instructions": "Which queue?", "criteria": MANY},
            "sure": {
                "type": "noul",
                "instructions": "Is it a duplicate charge?",
                "criteria": {"true": "two equal charges", "false": None},
            },
        },
    },
}


@pytest.fixture(scope="module")
def binary() -> Path:
    built = ensure_llama_server()
    assert built.binary is not None, built.reason
    return built.binary


@contextlib.contextmanager
def both(binary: Path, gguf: Path, log_dir: Path) -> Iterator[tuple[str, str]]:
    with (
        running_llama_server(binary, gguf, SETTINGS, log_dir) as server,
        running_adapter(log_dir, DECISION_MODEL_PATH=str(gguf), **ADAPTER_ENV) as adapter,
    ):
        yield server.url, adapter.url


def systemone(url: str, body: dict) -> dict:
    reply = httpx.post(f"{url}/v1/systemone", json={"model": "jev-latest", **body}, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()


def upstream_fields(answer: dict) -> dict:
    """What llama-server answers; the adapter adds its x_ fields beside them."""
    return {key: value for key, value in answer.items() if not key.startswith("x_")}


@pytest.mark.parametrize("kind", SERVED)
def test_every_answer_is_llama_servers_bit_for_bit(kind, binary, tmp_path):
    gguf = build(kind, tmp_path)
    with both(binary, gguf, tmp_path) as (server, adapter):
        for name, body in BODIES.items():
            theirs, ours = systemone(server, body), systemone(adapter, body)
            assert ours["usage"] == theirs["usage"], name
            assert list(ours["answers"]) == list(theirs["answers"]), name
            for question, answer in theirs["answers"].items():
                assert upstream_fields(ours["answers"][question]) == answer, (name, question)
        info = httpx.get(f"{adapter}/v1/models", timeout=30).json()["models"][0]
        assert info["x_decision_type"] == kind
        answered = systemone(adapter, BODIES["three kinds"])
        assert answered["x_model_info"]["decision_type"] == kind
        assert f"{kind} decision head" in info["description"]


@pytest.mark.parametrize("kind", ["openjev", "lev"])
def test_a_question_alone_and_beside_others_answers_the_same(kind, tmp_path):
    """Each question's prompt is decoded alone, so its neighbours change nothing (nimble is
    left out: its prompt lists every question of the request, by the model's design)."""
    gguf = build(kind, tmp_path)
    with running_adapter(tmp_path, DECISION_MODEL_PATH=str(gguf), **ADAPTER_ENV) as adapter:
        together = systemone(adapter.url, BODIES["three kinds"])["answers"]
        for question, asked in reversed(QUESTIONS.items()):
            alone = systemone(adapter.url, {"state": STATE, "questions": {question: asked}})
            assert alone["answers"][question] == together[question]


def test_more_options_than_labels_is_a_4xx_naming_the_field(tmp_path):
    gguf = build("openjev", tmp_path)  # 52 labels: A-Z, a-z
    options = {f"option_{n}": None for n in range(53)}
    body = {
        "model": "jev-latest",
        "state": STATE,
        "questions": {"q": {"type": "choice", "instructions": "Which?", "criteria": options}},
    }
    with running_adapter(tmp_path, DECISION_MODEL_PATH=str(gguf), **ADAPTER_ENV) as adapter:
        reply = httpx.post(f"{adapter.url}/v1/systemone", json=body, timeout=60)
    assert reply.status_code == 422, reply.text
    assert "53 options, this model answers at most 52" in reply.text
    assert "questions" in reply.text


def test_a_type_the_engine_does_not_know_is_refused_at_start_up(tmp_path):
    gguf = build("openjev", tmp_path, decision_type="lfm2-d1")
    with (
        pytest.raises(RuntimeError, match="unsupported decision model type: lfm2-d1"),
        running_adapter(tmp_path, DECISION_MODEL_PATH=str(gguf), **ADAPTER_ENV),
    ):
        pass
