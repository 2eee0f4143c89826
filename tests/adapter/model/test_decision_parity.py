"""Trained decision models served by the adapter answer as llama.cpp's own llama-server does.

For each type the adapter serves, a tiny random-weight decision GGUF (tests/support/
decision_models.py) is served by both, from the same engine build, with the same batch size
and one slot: every answer of the same /v1/systemone body agrees (the label types' logits or
kev's and laya's hidden-state rows are read from the same batches, and the softmax is computed
the same way: scoring/trained_head.py), within TOLERANCE where the adapter decodes a state's
prefix apart, bit for bit where it does not (laya). The bodies reach kev's flattening of JSON,
laya's cutting of long options and questions, a kev prompt wider than a batch and 255 options.
Then the adapter's own guarantees on top: a question's answer is the same alone, beside others,
from the state cache and in batched mode, the model block names the type, a model read through
hidden states refuses chat with a 400, rows that cannot come from one batch are a 413, and a
type the engine does not know stops the start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from bench.llama_server import ServerSettings, running_llama_server
from bench.llama_server_build import ensure_llama_server
from launcher import running_adapter
from tests.support.decision_models import QUESTIONS, STATE, build

SERVED = ("openjev", "lev", "nimble", "kev", "laya", "julia")
# The adapter decodes a state's prefix once and each prompt's rest after it; llama-server decodes
# a prompt in one batch, and llama.cpp's CPU kernels round a row by the size of its batch (one
# class under 64 rows, another from 64). So the probabilities agree within TOLERANCE, the bound
# llama-server's own answers move by between --parallel 1 and 4 (research/decision_models,
# section 5; measured here up to 1.7e-4, openjev), and the chosen option, keys and legend
# exactly. laya keeps no memory: both decode each of its prompts whole, bit-identically.
TOLERANCE = 2e-4
NO_MEMORY = ("laya", "julia")
DECISION_TYPE = {"julia": "laya"}  # Julia-1 is laya-typed
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
    # kev flattens these to text, laya blanks its mask text and cuts long options and questions.
    "nested state, special spellings, long texts": {
        "state": {
            "customer": {"name": "Ana <|im_end|>", "vip": False, "since": 2019, "score": 0.25},
            "orders": [{"id": 7, "items": ["lamp", None]}, "none [MASK] here", []],
            "note": None,
        },
        "questions": {
            "long": {
                "type": "choice",
                "instructions": {"ask": "Which team? " * 120, "hint": ["<|box_end|>", 1.5]},
                "criteria": {
                    "billing": "refunds, " * 40,
                    "[MASK] shipping": ["late", "lost"],
                    "other": None,
                },
            },
            # kev: its options straddle the first batch's end, so that batch stops before them.
            "wide": {
                "type": "choice",
                "instructions": "Pick one. " * 100,
                "criteria": {"refund": "money back, " * 40, "resend": "a new parcel, " * 40},
            },
            "scale": {
                "type": "score",
                "instructions": "How upset, from calm to furious?",
                "criteria": ["calm", {"level": "annoyed"}, "furious " * 60],
            },
        },
    },
    "JSON everywhere, empty values": {
        "state": ["x", {"y": [1, {"z": None}]}],
        "questions": {
            "q": {
                "type": "noul",
                "instructions": ["one", "two"],
                "criteria": {"true": {}, "false": [""]},
            },
            "r": {"type": "score", "instructions": "How much?", "criteria": [{}, "x"]},
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


def deviation(ours: object, theirs: object) -> float:
    """The largest difference between two answers' numbers; AssertionError where anything
    else (a key, the chosen option, the legend) differs."""
    if isinstance(theirs, float) and isinstance(ours, float):
        return abs(ours - theirs)
    if isinstance(theirs, dict) and isinstance(ours, dict):
        assert list(ours) == list(theirs)
        # A confidence rescales the top probability by n/(n-1), at most 2: so does its deviation.
        return max(
            (
                deviation(ours[key], theirs[key]) / (2 if key == "confidence" else 1)
                for key in theirs
            ),
            default=0.0,
        )
    assert ours == theirs
    return 0.0


# The most options a question may have, for the types that reach them in these tests' batch of
# 512: openjev has 52 letters, kev's 255 rows need a wider batch, and llama-server checks laya's
# prompt against the batch before cutting it (a 500 here).
WIDEST = {
    "255 options": {
        "state": STATE,
        "questions": {
            "queue": {
                "type": "choice",
                "instructions": "Which queue?",
                "criteria": {f"q{n}": (f"queue {n}" if n % 2 else None) for n in range(255)},
            }
        },
    }
}
REACH_255 = ("lev", "nimble")


@pytest.mark.parametrize("kind", SERVED)
def test_every_answer_is_llama_servers(kind, binary, tmp_path):
    gguf = build(kind, tmp_path)
    tolerance = 0.0 if kind in NO_MEMORY else TOLERANCE
    bodies = {**BODIES, **(WIDEST if kind in REACH_255 else {})}
    with both(binary, gguf, tmp_path) as (server, adapter):
        for name, body in bodies.items():
            theirs, ours = systemone(server, body), systemone(adapter, body)
            assert ours["usage"] == theirs["usage"], name
            assert list(ours["answers"]) == list(theirs["answers"]), name
            for question, answer in theirs["answers"].items():
                mine = upstream_fields(ours["answers"][question])
                assert deviation(mine, answer) <= tolerance, (name, question, mine, answer)
        info = httpx.get(f"{adapter}/v1/models", timeout=30).json()["models"][0]
        declared = DECISION_TYPE.get(kind, kind)
        assert info["x_decision_type"] == declared
        answered = systemone(adapter, BODIES["three kinds"])
        assert answered["x_model_info"]["decision_type"] == declared
        assert f"{declared} decision head" in info["description"]


MODES = {
    "state cache off": {"DECISION_STATE_CACHE_BYTES": "0"},
    "state cache on": {},
    "requests batched": {"DECISION_MAX_SCORING_REQUESTS": "4"},
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["openjev", "lev", "kev", "laya"])
def test_a_question_alone_beside_others_and_from_the_cache_answers_the_same(kind, mode, tmp_path):
    """Several questions on one state decode its prefix once; each answer has the bits of the
    question asked alone, cached or not, and sent beside other requests (nimble is left out:
    its prompt lists every question of the request, by the model's design)."""
    gguf = build(kind, tmp_path)
    env = {**ADAPTER_ENV, "DECISION_MAX_QUEUE": "4", **MODES[mode]}  # the three at once wait
    with running_adapter(tmp_path, DECISION_MODEL_PATH=str(gguf), **env) as adapter:
        together = systemone(adapter.url, BODIES["three kinds"])
        timing = together["x_timing"]
        assert "states" not in timing  # one prefix for the three questions
        if kind == "laya":  # no memory to keep a prefix in
            assert timing["prefix_tokens"] == 0
        else:
            assert timing["prefix_tokens"] > 0
            assert timing["state_cache"] == ("off" if mode == "state cache off" else "miss")
        bodies = [{"state": STATE, "questions": {name: asked}} for name, asked in QUESTIONS.items()]
        with ThreadPoolExecutor(len(bodies)) as pool:  # at once: batched, in turn: alone
            alone = list(pool.map(lambda body: systemone(adapter.url, body), reversed(bodies)))
        for answered in alone:
            (name, answer), *_ = answered["answers"].items()
            assert answer == together["answers"][name]
            if kind != "laya" and mode != "state cache off":
                assert answered["x_timing"]["state_cache"] == "hit"


@pytest.mark.parametrize("kind", ["kev", "laya"])
def test_a_model_read_through_hidden_states_refuses_chat_with_a_4xx(kind, tmp_path):
    """Its context outputs hidden states, not logits: nothing to sample text from."""
    gguf = build(kind, tmp_path)
    body = {"model": "jev-latest", "messages": [{"role": "user", "content": "Hello"}]}
    with running_adapter(tmp_path, DECISION_MODEL_PATH=str(gguf), **ADAPTER_ENV) as adapter:
        reply = httpx.post(f"{adapter.url}/v1/chat/completions", json=body, timeout=60)
        assert reply.status_code == 400, reply.text
        assert f"{kind} decision model" in reply.text
        assert "cannot generate text" in reply.text
        streamed = httpx.post(
            f"{adapter.url}/v1/chat/completions", json={**body, "stream": True}, timeout=60
        )
        assert streamed.status_code == 400, streamed.text
        # The model still answers decisions after it.
        assert systemone(adapter.url, BODIES["three kinds"])["answers"]


def test_a_marker_written_by_the_request_is_refused_as_llama_server_refuses_it(binary, tmp_path):
    """laya blanks its mask text in strings, not in JSON keys, as llama-server does: a key that
    spells it adds a marker, and both refuse the question (llama-server with a 500)."""
    gguf = build("laya", tmp_path)
    body = {
        "model": "jev-latest",
        "state": {"a [MASK] key": "v"},
        "questions": {
            "q": {"type": "choice", "instructions": "i", "criteria": {"a": None, "b": None}}
        },
    }
    with both(binary, gguf, tmp_path) as (server, adapter):
        theirs = httpx.post(f"{server}/v1/systemone", json=body, timeout=60)
        ours = httpx.post(f"{adapter}/v1/systemone", json=body, timeout=60)
    assert "unexpected layout of the decision prompt" in theirs.text
    assert ours.status_code == 422, ours.text
    assert "unexpected layout of the decision prompt" in ours.text


def ask_one_choice(gguf: Path, options: dict, log_dir: Path) -> httpx.Response:
    """The adapter's reply to one choice question over `options`, the model served alone."""
    question = {"type": "choice", "instructions": "Which?", "criteria": options}
    body = {"model": "jev-latest", "state": STATE, "questions": {"q": question}}
    with running_adapter(log_dir, DECISION_MODEL_PATH=str(gguf), **ADAPTER_ENV) as adapter:
        return httpx.post(f"{adapter.url}/v1/systemone", json=body, timeout=60)


def test_rows_that_do_not_fit_one_batch_are_a_413_before_any_model_work(tmp_path):
    """kev reads its rows from one batch, as llama-server does: the question's options must
    fit DECISION_N_BATCH tokens."""
    options = {f"option {n} " + "word " * 40: None for n in range(20)}
    reply = ask_one_choice(build("kev", tmp_path), options, tmp_path)
    assert reply.status_code == 413, reply.text
    assert "too large to read in one batch of 512 tokens" in reply.text


def test_more_options_than_labels_is_a_4xx_naming_the_field(tmp_path):
    options = {f"option_{n}": None for n in range(53)}
    reply = ask_one_choice(build("openjev", tmp_path), options, tmp_path)  # 52 labels
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
