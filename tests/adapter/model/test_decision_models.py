"""The tiny decision GGUFs of tests/support/decision_models.py load in llama.cpp's own
llama-server and answer POST /v1/systemone with a valid System One response: the reference the
adapter's decision models are to equal (research/decision_models/README.md).

`make test` builds the recipe's llama-server first (`make llama-server`); run alone, the first
test builds it (minutes, once)."""

from __future__ import annotations

import contextlib

import httpx
import pytest

from bench.llama_server import ServerSettings, running_llama_server
from bench.llama_server_build import ensure_llama_server
from tests.support.decision_models import QUESTIONS, STATE, TYPES, build, check_answers

SETTINGS = ServerSettings(threads=2, n_ctx=4096, parallel=1)


@pytest.fixture(scope="module")
def binary():
    build_ = ensure_llama_server()
    assert build_.binary is not None, build_.reason
    return build_.binary


def _ask(binary, gguf, log_dir, body: dict) -> httpx.Response:
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(running_llama_server(binary, gguf, SETTINGS, log_dir))
        return httpx.post(f"{server.url}/v1/systemone", json=body, timeout=60)


@pytest.mark.parametrize("kind", TYPES)
def test_llama_server_answers_each_decision_type(kind, binary, tmp_path):
    gguf = build(kind, tmp_path)
    reply = _ask(binary, gguf, tmp_path, {"state": STATE, "questions": QUESTIONS})
    assert reply.status_code == 200, reply.text
    check_answers(reply.json())


def test_a_bad_question_is_a_400_naming_it(binary, tmp_path):
    gguf = build("openjev", tmp_path)
    body = {
        "state": STATE,
        "questions": {"q": {"type": "score", "instructions": "x", "criteria": ["only one"]}},
    }
    reply = _ask(binary, gguf, tmp_path, body)
    assert reply.status_code == 400
    assert reply.json()["error"] == {
        "code": 400,
        "message": 'questions.q: "criteria" must be an array of 2 to 10 levels',
        "type": "invalid_request_error",
    }


def test_a_type_this_llama_cpp_does_not_know_stops_llama_server(binary, tmp_path):
    """pplx-decider and lfm2-d1 are no types of this tree (common/common.cpp): the server
    refuses the model at load, it does not fall back to text."""
    gguf = build("openjev", tmp_path, decision_type="lfm2-d1")
    with pytest.raises(RuntimeError, match="unsupported decision model type: lfm2-d1"):
        _ask(binary, gguf, tmp_path, {"state": STATE, "questions": QUESTIONS})
