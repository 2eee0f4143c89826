"""Nothing a client sends costs more than its budget, on live adapters and the real model: every
pass of every readout is counted before any model work, a request over the budget is refused
in well under a second with the server's memory bounded, whatever readout and format carry it,
and its preparation leaves other requests theirs."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from decision_adapter.contract import READOUTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher import running_adapter
from tests.support.bodies import decision


def _post(url: str, body: dict, path: str = "/invocations") -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = httpx.post(url + path, json=body, timeout=120)
    return response, time.perf_counter() - started


def _peak_memory(adapter) -> int:
    """The adapter process's peak resident memory so far, in bytes (VmHWM)."""
    status = open(f"/proc/{adapter.process.pid}/status").read()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def _described(text: str, readout: str) -> dict:
    body = decision("s", "Is it?", ("yes", "no"), readout=readout)
    body["decision"]["options"][0]["description"] = text
    return body


def _noul(true: str, readout: str) -> dict:
    question = {"type": "noul", "instructions": "Is it?", "criteria": {"true": true}}
    return {"model": "jev-latest", "state": "s", "questions": {"q": question}, "x_readout": readout}


def _refused_fast(adapter, body: dict, path: str = "/invocations") -> httpx.Response:
    before = _peak_memory(adapter)
    response, seconds = _post(adapter.url, body, path)
    assert response.status_code == 413, response.text
    assert seconds < 1.0, f"refused after {seconds:.1f} s"
    grown = _peak_memory(adapter) - before
    assert grown < 128 << 20, f"peak memory grew by {grown >> 20} MiB"
    return response


@pytest.mark.parametrize("words", [20_000, 35_000, 120_000])
@pytest.mark.parametrize("readout", ["option_text_desc", "calibrated"])
def test_a_long_option_text_is_refused_at_once_in_bounded_memory(adapter, words, readout):
    """Before: `"ab " * 20000` as a description got its 413 after 9-15 s with the server at
    4 GB (every prefix of its 20,000 tokens built), 35,000 a 500 (MemoryError)."""
    if readout == "option_text_desc":
        body = _described("ab " * words, readout)
    else:  # calibrated reads the ids
        body = decision("s", "Is it?", ("ab " * words, "no"), readout=readout)
    response = _refused_fast(adapter, body)
    assert response.json()["error_type"] == "token_limit_exceeded"
    assert "the limit is 8192" in response.json()["error"]


@pytest.mark.parametrize("shared", [False, True])
def test_many_long_options_are_refused_before_most_are_tokenized(adapter, shared):
    """255 options of 1,300 words each (1 MiB), distinct or alike but for their ends: the tree
    of those read so far proves the request over its budget after a few."""
    words = "ab " * 1300
    ids = [words + f"o{i}" if shared else f"o{i} " + words for i in range(255)]
    _refused_fast(adapter, decision("s", "Which?", ids, readout="option_text"))


def test_a_system_one_noul_with_long_criteria_is_refused_at_once(adapter):
    response = _refused_fast(adapter, _noul("ab " * 35_000, "option_text_desc"), "/v1/systemone")
    assert response.json()["detail"]["error_type"] == "token_limit_exceeded"


def test_one_long_option_over_the_time_budget_is_refused_up_front(adapter):
    """One option of about 8,000 tokens fits the context, but each of its tokens reads a whole
    vocabulary row: it took 79 s, past SageMaker's 60 s. Its branch tokens count
    READ_TOKEN_COST each, so it is refused before any model work."""
    response = _refused_fast(
        adapter, decision("s", "q?", ("ab " * 8000, "no"), readout="option_text")
    )
    assert "more than 8192" in response.json()["error"]
    # 400 words fit (1,200 in the budget's terms) and are answered.
    fits, _ = _post(adapter.url, decision("s", "q?", ("ab " * 400, "no"), readout="option_text"))
    assert fits.status_code == 200, fits.text
    assert fits.json()["result"]["timing"]["request_tokens"] > 400


def test_permuted_letters_are_refused_before_every_rotation_is_tokenized(adapter):
    """255 options of 85 words (111 KB): 255 rotations of a 30,000-token listing. Before, the
    413 came after 23.5 s of CPU on a preparation thread; two such requests took both threads
    and an unrelated decision waited 16.5 s for its preparation."""
    options = [{"id": f"option_{i}", "description": "word " * 85} for i in range(255)]
    body = decision("s", "Which one?", (), readout="permuted_letters")
    body["decision"]["options"] = options
    with ThreadPoolExecutor(max_workers=3) as pool:
        refused = [pool.submit(_post, adapter.url, body) for _ in range(2)]
        time.sleep(0.1)  # both preparation threads are taken by now (before: for 23 s)
        other = pool.submit(_post, adapter.url, decision(readout="letters"))
        for future in refused:
            response, seconds = future.result()
            assert response.status_code == 413 and seconds < 1.0, (response.text, seconds)
        answered, _ = other.result()
    assert answered.status_code == 200, answered.text
    assert answered.json()["result"]["timing"]["prepare_ms"] < 1000


# --- every readout near the budget: a small context keeps admitted requests cheap ----------
SMALL_CONTEXT = 512


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    with running_adapter(
        tmp_path_factory.mktemp("small"), DECISION_N_CTX=str(SMALL_CONTEXT)
    ) as adapter:
        yield adapter


def test_calibrated_counts_its_content_free_pass(small):
    """An option id of 476 words fitted the context on the first pass, but the content-free
    state `N/A` is longer than the state `""`: its second pass overflowed the context, a 500
    (`llama_decode failed`). Both passes count now."""
    body = decision("", "q?", ("ab " * 476, "no"), readout="calibrated")
    response, seconds = _post(small.url, body)
    assert response.status_code == 413, response.text
    assert seconds < 1.0
    # The same question read once fits: the difference is the second pass.
    alone = decision("", "q?", ("ab " * 100, "no"), readout="option_text")
    assert _post(small.url, alone)[0].status_code == 200


def test_an_admitted_calibrated_request_is_answered_on_both_passes(small):
    body = decision("", "q?", ("ab " * 40, "no"), readout="calibrated")
    response, _ = _post(small.url, body)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["readout_mode"] == "text-mean-minus-content-free"
    assert result["timing"]["request_tokens"] <= SMALL_CONTEXT


# Texts from a few words whose tokens differ in kind: word pieces, spaces, newlines, digits.
texts = st.builds(
    lambda word, count: word * count + "z",  # never blank
    st.sampled_from(["ab ", "word ", "\n", "x", "1 2 ", "é ", "<b>"]),
    st.integers(1, 520),  # past the small context's 512 tokens
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    readout=st.sampled_from(READOUTS),
    where=st.sampled_from(["id", "description", "question", "state", "noul"]),
    text=texts,
    options=st.integers(2, 6),
)
def test_every_readout_near_the_budget_is_answered_or_refused_never_a_5xx(
    small, readout, where, text, options
):
    ids = [f"o{i}" for i in range(options)]
    if where == "noul":
        response, seconds = _post(small.url, _noul(text, readout), "/v1/systemone")
    else:
        body = decision("s", "q?", ids, readout=readout)
        target = body["decision"]
        if where in ("question", "state"):
            target[where] = text
        else:
            # An id is one line of the prompt: its newlines would be a 422.
            option = text if where == "description" else text.replace("\n", "n")
            target["options"][0][where] = option
        response, seconds = _post(small.url, body)
    assert response.status_code in (200, 413), response.text
    if response.status_code == 413:
        assert seconds < 1.0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    readout=st.sampled_from(READOUTS),
    # Each repetition at least one token (a run of one character may merge into few).
    word=st.sampled_from(["ab ", "word ", "\n- ", "1 2 ", "<b>", "é "]),
    count=st.integers(10_000, 150_000),
    options=st.integers(2, 255),
    where=st.sampled_from(["id", "description", "question", "state"]),
)
def test_every_readout_over_the_budget_is_refused_at_once(
    adapter, readout, word, count, options, where
):
    """Texts far past the default budget in every place a decision carries text: a 413 in
    under a second, whatever the readout."""
    count = min(count, 900_000 // len(word.encode()))  # within the 1 MiB body limit
    if where == "description" and readout in ("option_text", "calibrated"):
        where = "id"  # these read the ids only
    body = decision("s", "q?", [f"o{i}" for i in range(options)], readout=readout)
    target = body["decision"]
    text = word * count + "z"  # never blank
    if where in ("question", "state"):
        target[where] = text
    else:
        target["options"][0][where] = text if where == "description" else text.replace("\n", "n")
    response, seconds = _post(adapter.url, body)
    assert response.status_code == 413, response.text
    assert seconds < 1.0, f"{seconds:.2f} s"


# --- the deadline: time bounded on a machine slower than the budget assumes -------------------
@pytest.fixture(scope="module")
def hurried(tmp_path_factory):
    """A deadline shorter than one long prefill, as a loaded or small machine would meet it."""
    with running_adapter(
        tmp_path_factory.mktemp("hurried"), DECISION_SCORING_DEADLINE_S="0.5"
    ) as adapter:
        yield adapter


def test_work_past_the_deadline_stops_between_batches_with_a_retryable_503(hurried):
    long_state = decision("ab " * 3000, "Is it?", ("yes", "no"), readout="letters")
    before = hurried.stats()["engine"]["tokens_decoded"]
    response, _ = _post(hurried.url, long_state)
    assert response.status_code == 503, response.text
    refusal = response.json()
    assert refusal["error_type"] == "overloaded" and refusal["retryable"] is True
    assert "DECISION_SCORING_DEADLINE_S" in refusal["error"]
    assert response.headers["retry-after"] == str(refusal["retry_after_s"])
    # Stopped between the prefill's 512-token batches, not after the whole state.
    decoded = hurried.stats()["engine"]["tokens_decoded"] - before
    assert decoded < 3000 and decoded % 512 == 0
    # The model is free and whole: a short request is answered.
    assert _post(hurried.url, decision(readout="letters"))[0].status_code == 200
