"""The serving contract on every family of the model matrix (tests/support/model_matrix.py): tiny
random-weight models of each architecture, with the family's real vocabulary and template; and
on real weights of two more families: SmolLM2-135M-Instruct and Qwen2.5-Coder-0.5B-Instruct.

Random weights say nothing about accuracy; they do exercise each architecture's memory
(attention, hybrid) under the engine's branching, the real tokenizers and templates,
and every route. Exact means bit for bit: a partial llama_memory_seq_rm, a chunking that depends
on the batch's other work, or a state restored wrongly shows up as a different float.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import numpy as np
import pytest
from decision_adapter.calibration import built_in_readout
from decision_adapter.contract import MIN_CONFIDENT_MASS, READOUTS, Question
from decision_adapter.formats.systemone import SystemOneRequest
from decision_adapter.scoring.letter_spellings import letter_spellings
from decision_adapter.scoring.score import build_plan, score
from decision_adapter.scoring.state_cache import StateCache

from launcher import run_adapter_until_exit, running_adapter
from launcher.models import local_model
from tests.conftest import MODEL_THREADS
from tests.support.adapter_process import LONG_CHAT
from tests.support.model_matrix import FAMILIES, REFUSED, SERVED, Family, ensure_matrix

# Real models beside the random ones: SmolLM2-135M-Instruct (llama, BPE, its own template)
# and Qwen2.5-Coder-0.5B-Instruct (qwen2, ChatML), an instruct model of the kind users deploy.
SMOLLM2 = Family("smollm2", "llama", "SmolLM2", "its own", "attention")
QWEN_CODER = Family("qwen2.5-coder-0.5b", "qwen2", "qwen2", "its own", "attention")
REAL = (SMOLLM2, QWEN_CODER)

ROUTE = Question(
    "Which queue should handle this request?",
    ["account_access", "billing", "shipping", "technical_support"],
    ["Logins and passwords.", "Charges, refunds and invoices.", "Deliveries.", None],
)
ANGRY = Question(
    "Is the customer angry?", ["true", "false"], [None, None], answer_words=["yes", "no"]
)
SHORT_STATE = "I was charged twice for my March invoice and the refund never arrived."
# Past one batch of 512 tokens in every vocabulary here (asserted below).
LONG_STATE = "Ledger: " + " ".join(f"invoice {i} paid {i % 13} times;" for i in range(75))
BINS = Question("Which bin holds the most crates?", [f"bin{i}" for i in range(60)], [None] * 60)
SYSTEM_ONE = {
    "model": "jev-latest",
    "state": SHORT_STATE,
    "questions": {
        "refund": {"type": "noul", "instructions": "Does the customer want a refund?"},
        "queue": {"type": "choice", "criteria": {"billing": "Charges.", "shipping": None}},
        "severity": {"type": "score", "criteria": ["minor", "major", "critical"]},
    },
}
CHAT = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 12, "temperature": 0}


@pytest.fixture(scope="module")
def matrix():
    return {**ensure_matrix(), **{family.name: local_model(family.name) for family in REAL}}


@pytest.fixture(scope="module", params=[*SERVED, *REAL], ids=lambda family: family.name)
def family(request):
    return request.param


@pytest.fixture(scope="module")
def served(family, matrix):
    """(engine, renderer) on the family's model, in this process."""
    from decision_adapter.model.engine import Engine, EngineConfig
    from decision_adapter.scoring.prompts import PromptRenderer

    engine = Engine(
        matrix[family.name],
        EngineConfig(
            n_ctx=8192, n_batch=512, n_threads=MODEL_THREADS, n_gpu_layers=0, n_seq_max=64
        ),
    )
    yield engine, PromptRenderer(engine)
    engine.close()


@pytest.fixture(scope="module")
def family_adapter(family, matrix, tmp_path_factory):
    """The adapter serving the family's model; the last of its tests sends it SIGTERM."""
    with running_adapter(
        tmp_path_factory.mktemp(family.name),
        DECISION_MODEL_PATH=str(matrix[family.name]),
        DECISION_GRACEFUL_SHUTDOWN_S="0.2",
    ) as running:
        yield running


def _with(question: Question, readout: str) -> Question:
    return Question(
        question.question,
        question.option_ids,
        question.descriptions,
        readout=readout,
        answer_words=question.answer_words,
    )


def _logits(engine, renderer, state, questions, cache=None):
    results, timing = score(engine, build_plan(renderer, state, questions), cache=cache)
    return [r.option_logits for r in results], timing


def _assert_exact(expected, *others):
    for other in others:
        assert len(other) == len(expected)
        for a, b in zip(expected, other, strict=False):
            assert np.array_equal(a, b), (a, b)


def _every_readout_is_exact(engine, renderer, state):
    # Options with descriptions, and answer words; tests/adapter/scoring/test_readouts.py has
    # more shapes.
    questions = [_with(q, readout) for readout in READOUTS for q in (ROUTE, ANGRY)]
    alone = [_logits(engine, renderer, state, [q])[0][0] for q in questions]
    # Every readout shares one request, in the reverse order.
    shared = _logits(engine, renderer, state, questions[::-1])[0][::-1]
    cache = StateCache(1 << 30, model_id="m")
    missed, miss = _logits(engine, renderer, state, questions, cache=cache)
    hit, hit_timing = _logits(engine, renderer, state, questions, cache=cache)
    assert (miss.state_cache, hit_timing.state_cache) == ("miss", "hit")
    _assert_exact(alone, shared, missed, hit)


def test_every_readout_is_exact_alone_shared_and_from_the_state_cache(served):
    _every_readout_is_exact(*served, SHORT_STATE)


# The random models only: SmolLM2's llama architecture is here already, and its 30 prefills
# of a long state would double this file's time.
@pytest.mark.parametrize("family", SERVED, ids=lambda family: family.name, indirect=True)
def test_every_readout_is_exact_past_a_batch(served):
    engine, renderer = served
    assert len(build_plan(renderer, LONG_STATE, [ROUTE]).prefix_tokens) > engine.n_batch
    _every_readout_is_exact(engine, renderer, LONG_STATE)


def test_a_question_of_60_options_is_exact_through_the_prefix_tree(served):
    engine, renderer = served
    plan = build_plan(renderer, SHORT_STATE, [BINS])
    assert not plan.questions[0].single_token_labels  # two-letter labels: a prefix tree
    alone, _ = _logits(engine, renderer, SHORT_STATE, [BINS])
    shared, _ = _logits(engine, renderer, SHORT_STATE, [ANGRY, BINS])
    cache = StateCache(1 << 30, model_id="m")
    _logits(engine, renderer, SHORT_STATE, [BINS], cache=cache)
    hit, timing = _logits(engine, renderer, SHORT_STATE, [BINS], cache=cache)
    assert timing.state_cache == "hit" and len(alone[0]) == 60
    _assert_exact(alone, shared[1:], hit)


def test_system_one_noul_choice_and_score_are_exact_alone_shared_and_cached(served):
    engine, renderer = served
    request = SystemOneRequest.model_validate(SYSTEM_ONE)
    questions = [q.as_question() for q in request.questions.values()]
    alone = [_logits(engine, renderer, request.state, [q])[0][0] for q in questions]
    shared, _ = _logits(engine, renderer, request.state, questions)
    cache = StateCache(1 << 30, model_id="m")
    _logits(engine, renderer, request.state, questions, cache=cache)
    hit, timing = _logits(engine, renderer, request.state, questions, cache=cache)
    assert timing.state_cache == "hit" and [len(a) for a in alone] == [2, 2, 3]
    _assert_exact(alone, shared, hit)


def test_letters_read_every_spelling_of_each_label_in_every_vocabulary(served):
    engine, renderer = served
    index = letter_spellings(engine)
    counted = np.concatenate(list(index.tokens.values())).tolist()
    assert len(counted) == len(set(counted))  # no token counts for two labels
    for letter, tokens in index.tokens.items():
        assert len(tokens) >= 2 and renderer.label_tokens(letter)[0] in tokens  # "A" and " A"
    (answer,), _ = score(engine, build_plan(renderer, SHORT_STATE, [_with(ROUTE, "letters")]))
    assert answer.readout == "letter-spellings"
    assert answer.low_allowed_mass == (answer.allowed_token_mass < MIN_CONFIDENT_MASS)


def test_models_and_the_start_up_line_name_the_architecture_and_its_memory(family, family_adapter):
    listed = httpx.get(family_adapter.url + "/v1/models", timeout=10).json()["models"][0]
    assert (listed["x_architecture"], listed["x_memory"]) == (family.architecture, family.memory)
    loaded = [
        json.loads(line) for line in family_adapter.log().splitlines() if '"model_loaded"' in line
    ]
    assert len(loaded) == 1
    model = loaded[0]["model"]
    assert (model["architecture"], model["memory"]) == (family.architecture, family.memory)
    assert model["prompt_mode"] == ("chat-template" if family.template else "completion")


def test_a_model_without_a_profile_answers_with_its_prompt_modes_built_in_readout(
    family, family_adapter
):
    """An instruct model (a chat template) gets the JSON answer cue, a base model letters."""
    assert built_in_readout("chat-template").startswith("json_choice")
    body = {"decision": {"id": "d", "state": SHORT_STATE, "question": ROUTE.question,
                         "options": [{"id": o} for o in ROUTE.option_ids]}}  # fmt: skip
    result = httpx.post(family_adapter.url + "/invocations", json=body, timeout=60).json()
    expected = built_in_readout("chat-template" if family.template else "completion")
    assert result["result"]["readout"] == expected, result


def test_the_bundled_gemma_is_named_sliding_window(adapter):
    listed = httpx.get(adapter.url + "/v1/models", timeout=10).json()["models"][0]
    assert (listed["x_architecture"], listed["x_memory"]) == ("gemma3", "sliding window")


def _chat(adapter) -> str:
    reply = httpx.post(adapter.url + "/v1/chat/completions", json=CHAT, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["message"]["content"]


def _streamed_chat(adapter) -> str:
    text = ""
    body = {**CHAT, "stream": True}
    with httpx.stream("POST", adapter.url + "/v1/chat/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:])["choices"]
                text += (choices[0]["delta"].get("content") or "") if choices else ""
    return text


def test_chat_streamed_or_not_gives_the_same_text_before_and_after_a_decision(
    family_adapter,
):
    before = _chat(family_adapter)
    assert before and _streamed_chat(family_adapter) == before
    reply = httpx.post(family_adapter.url + "/v1/systemone", json=SYSTEM_ONE, timeout=60)
    assert reply.status_code == 200, reply.text
    assert _chat(family_adapter) == before  # the decision left nothing in the memory


def test_sigterm_mid_chat_ends_the_stream_with_an_error_and_the_process_cleanly(
    family_adapter,
):
    """Last for its adapter (tests run grouped by family, in this file's order)."""
    # A thousand tokens at a few ms each: still generating when the grace period ends.
    body = {**LONG_CHAT, "stream": True}
    url = family_adapter.url + "/v1/chat/completions"
    with httpx.stream("POST", url, json=body, timeout=60) as response:
        lines = (line for line in response.iter_lines() if line)
        for line in lines:  # the first text: generation is in progress
            if json.loads(line[6:])["choices"][0]["delta"].get("content"):
                break
        family_adapter.process.send_signal(signal.SIGTERM)
        rest = list(lines)
    assert family_adapter.process.wait(timeout=30) == 0
    assert rest[-1] == "data: [DONE]" and len(rest) < LONG_CHAT["max_tokens"]
    assert json.loads(rest[-2][6:])["error"]["type"] == "server_shutting_down", rest[-3:]


@pytest.mark.parametrize("refused", REFUSED, ids=lambda family: family.name)
def test_a_model_the_engine_cannot_serve_is_refused_at_start_up_with_one_line(refused, matrix):
    finished = run_adapter_until_exit({"DECISION_MODEL_PATH": str(matrix[refused.name])})
    lines = [line for line in finished.stderr.splitlines() if line.strip()]
    assert finished.returncode == 1 and len(lines) == 1, finished.stderr
    print(lines[0])
    assert f"is a {refused.architecture} model: " in lines[0] and refused.memory in lines[0]


def test_the_readme_table_lists_every_model_of_the_matrix():
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("\n## Models\n", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    for family in FAMILIES:
        template = f"`{family.template}`" if family.template else "none"
        assert any(
            row[0].startswith(f"`{family.architecture}`")
            and row[1].startswith(f"`{family.vocabulary}`")
            and row[2] == template
            and row[3].startswith(family.memory)
            for row in rows
        ), family.name
