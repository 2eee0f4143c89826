"""Decision scoring over HTTP against the live adapter on the real bundled model."""

from __future__ import annotations

import unicodedata

import httpx
import pytest

from tests.conftest import MODEL_THREADS
from tests.support.adapter_process import model_held

STATE = "The customer cannot receive a password reset email."


def decision(
    id="support-route",
    state=STATE,
    question="Which queue should handle this request?",
    options=None,
):
    return {
        "id": id,
        "state": state,
        "question": question,
        "options": options
        or [
            {"id": "account_access", "description": "Account access support."},
            {"id": "billing", "description": "Billing support."},
        ],
    }


def post(adapter, body, path="/invocations", **kwargs):
    return httpx.post(adapter.url + path, json=body, timeout=120, **kwargs)


def test_ping_answers_once_the_model_is_loaded(adapter):
    response = httpx.get(adapter.url + "/ping")
    assert response.status_code == 200 and response.json()["model"] == "gemma-3-270m-q4_k_m"


def test_single_decision_returns_probabilities_in_request_order(adapter):
    response = post(adapter, {"decision": decision()})
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["id"] == "support-route"
    assert result["option_ids"] == ["account_access", "billing"]
    assert sum(result["probabilities"]) == pytest.approx(1.0)
    assert len(result["option_logits"]) == 2 and result["readout_mode"] == "letter-spellings"
    assert 0 < result["allowed_token_mass"] <= 1
    assert result["input_tokens"] > 20 and len(result["prompt_sha256"]) == 64
    assert result["readout"] == "letters" and "no tokens generated" in result["readout_text"]
    model = result["model"]
    assert model["gguf_file"] == "gemma-3-270m-q4_k_m.gguf" and model["quantization"] == "Q4_K_M"
    assert len(model["gguf_sha256"]) == 64 and model["gguf_bytes"] > 100_000_000
    assert model["context_tokens"] == 8192 and model["gpu_layers"] == 0
    assert model["threads"] == MODEL_THREADS  # what the launcher asked for, not a default
    assert model["llama_cpp_python_version"] == "0.3.36"
    assert result["timing"]["total_ms"] > 0 and result["timing"]["prefill_ms"] > 0


def test_same_prompt_same_hash_and_answer(adapter):
    first = post(adapter, {"decision": decision()}).json()["result"]
    again = post(adapter, {"decision": decision(id="other-id")}).json()["result"]
    changed = post(adapter, {"decision": decision(question="Which team?")}).json()["result"]
    assert first["prompt_sha256"] == again["prompt_sha256"] != changed["prompt_sha256"]
    assert first["probabilities"] == again["probabilities"]


def test_shared_state_matches_single_decisions(adapter):
    questions = [
        decision(id="route"),
        decision(
            id="urgency",
            question="How urgent is it?",
            options=[{"id": "low"}, {"id": "medium"}, {"id": "high"}],
        ),
        decision(
            id="angry", question="Is the customer angry?", options=[{"id": "yes"}, {"id": "no"}]
        ),
    ]
    shared = post(adapter, {"decisions": questions})
    assert shared.status_code == 200, shared.text
    body = shared.json()
    assert [r["id"] for r in body["results"]] == ["route", "urgency", "angry"]
    assert body["timing"]["prefix_tokens"] > 0
    for item, result in zip(questions, body["results"], strict=False):
        alone = post(adapter, {"decision": item}).json()["result"]
        assert result["probabilities"] == alone["probabilities"]  # bit-identical (docs/api.md)
        assert result["input_tokens"] == alone["input_tokens"]


def test_shared_budget_counts_the_state_once(adapter):
    """A long state shared by six questions: an even split of the 8,192-token budget (1,365
    each) would reject it, counting the prefix once accepts it."""
    long_state = "Ticket history: the customer reported that login fails after a reset. " * 110
    questions = [
        decision(id=f"q{i}", state=long_state, question=f"Question {i}: which queue?")
        for i in range(6)
    ]
    response = post(adapter, {"decisions": questions})
    assert response.status_code == 200, response.text
    timing = response.json()["timing"]
    assert timing["prefix_tokens"] > 1365
    assert timing["request_tokens"] < 8192 < 6 * timing["prefix_tokens"]


def test_prompt_over_the_limit_is_rejected_naming_the_limit(adapter):
    huge = "word " * 9000
    response = post(adapter, {"decision": decision(state=huge)})
    assert response.status_code == 413
    body = response.json()
    assert body["field"] == "decision"
    # Refused at the first piece past the budget, before the rest is counted.
    assert "needs more than 8192 tokens, the limit is 8192" in body["error"]


def test_255_options_are_scored_and_256_refused(adapter):
    options = [{"id": f"option_{i}"} for i in range(255)]
    response = post(adapter, {"decision": decision(question="Pick one", options=options)})
    assert response.status_code == 200, response.text
    assert len(response.json()["result"]["probabilities"]) == 255
    too_many = post(adapter, {"decision": decision(options=options + [{"id": "one_more"}])})
    assert too_many.status_code == 422 and too_many.json()["field"] == "decision.options"


BAD_BODIES = [
    ({"decision": {**decision(), "options": [{"id": "only"}]}}, 422, "decision.options"),
    ({"decision": {**decision(), "question": 42}}, 422, "decision.question"),
    ({"decision": {**decision(), "question": "   "}}, 422, "decision.question"),
    ({"decision": {k: v for k, v in decision().items() if k != "state"}}, 422, "decision.state"),
    ({"decision": decision(options=[{"id": "a"}, {"id": "a"}])}, 422, "decision.options"),
    ({"decisions": [decision(id="x"), decision(id="x")]}, 422, "decisions"),
    ({"decisions": []}, 422, "decisions"),
    ({"decision": decision(), "decisions": [decision()]}, 422, "body"),
    ({"decision": {**decision(), "colour": "red"}}, 422, "decision.colour"),
    ({"something": "else"}, 422, "body"),
    ([1, 2, 3], 422, "body"),
]


@pytest.mark.parametrize("body,status,field", BAD_BODIES)
def test_bad_bodies_get_4xx_naming_the_field(in_process, body, status, field):
    response = in_process.post("/invocations", json=body)
    assert response.status_code == status, response.text
    payload = response.json()
    assert payload["field"] == field and payload["retryable"] is False
    assert field.split(".")[-1].split("[")[0] in payload["error"] or field == "body"


@pytest.mark.parametrize(
    "raw,headers,status,field",
    [
        (b'{"decision": ', {"content-type": "application/json"}, 400, "body"),
        (b'{"decision": NaN}', {"content-type": "application/json"}, 400, "body"),
        (b'{"decision": {}, "decision": {}}', {"content-type": "application/json"}, 400, "body"),
        (b"", {"content-type": "application/json"}, 400, "body"),
        (b"decision=1", {"content-type": "application/x-www-form-urlencoded"}, 415, "Content-Type"),
        (b"{" + b" " * 2_000_000 + b"}", {"content-type": "application/json"}, 413, "body"),
    ],
)
def test_malformed_requests_get_4xx(in_process, raw, headers, status, field):
    response = in_process.post("/invocations", content=raw, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["field"] == field


def test_busy_model_answers_503_retryable_with_retry_after(adapter):
    with model_held(adapter):
        busy = post(adapter, {"decision": decision()})
    assert busy.status_code == 503
    # DECISION_RETRY_AFTER_S's default; the secured adapter checks a configured value.
    assert busy.json()["retryable"] is True and busy.headers["retry-after"] == "1"
    assert post(adapter, {"decision": decision()}).status_code == 200  # and free again


def test_states_equal_in_python_but_rendered_differently_are_scored_apart(adapter):
    # Each pair compares equal in Python (True == 1, 1 == 1.0, dicts ignore key order) but the
    # model reads different text; a fourth decision repeats the first state and shares its prefill.
    states = [
        {"paid": True, "amount": 1},
        {"paid": 1, "amount": 1.0},
        {"amount": 1, "paid": True},
        {"paid": True, "amount": 1},
    ]
    decisions = [
        decision(
            id=f"d{i}",
            state=state,
            question="Was the invoice paid?",
            options=[{"id": "paid"}, {"id": "unpaid"}],
        )
        for i, state in enumerate(states)
    ]
    response = post(adapter, {"decisions": decisions})
    assert response.status_code == 200, response.text
    together = response.json()
    for sent, result in zip(decisions, together["results"], strict=False):
        alone = post(adapter, {"decision": sent}).json()["result"]
        assert result["id"] == sent["id"]
        assert result["prompt_sha256"] == alone["prompt_sha256"]
        assert result["probabilities"] == alone["probabilities"]
    assert together["results"][0]["prompt_sha256"] == together["results"][3]["prompt_sha256"]
    assert len({r["prompt_sha256"] for r in together["results"]}) == 3
    assert together["timing"]["states"] == 3


def test_a_chunked_body_over_the_limit_gets_413(adapter):
    # No Content-Length to refuse up front: the limit applies while the chunks arrive.
    def chunks():
        for _ in range(20):
            yield b" " * 65536  # 1.25 MiB in all, over the 1 MiB DECISION_MAX_BODY_BYTES

    response = httpx.post(
        adapter.url + "/invocations",
        content=chunks(),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in response.request.headers
    assert response.status_code == 413, response.text
    refusal = response.json()
    assert refusal["field"] == "body" and "more than 1048576 bytes" in refusal["error"]


def test_stats_count_decodes_and_admissions(adapter):
    before = adapter.stats()
    fresh = decision(state="A state no other test sends: the stats counter probe, 7f3a.")
    result = post(adapter, {"decision": fresh}).json()["result"]
    after = adapter.stats()
    assert after["admission"]["admitted"] == before["admission"]["admitted"] + 1
    assert after["admission"]["waited"] == before["admission"]["waited"]
    assert after["engine"]["decode_calls"] > before["engine"]["decode_calls"]
    decoded = after["engine"]["tokens_decoded"] - before["engine"]["tokens_decoded"]
    assert decoded == result["input_tokens"]
    assert after["engine"]["decode_seconds"] > before["engine"]["decode_seconds"]
    assert after["state_cache"]["misses"] == before["state_cache"]["misses"] + 1


def test_a_state_in_nfd_or_with_a_final_newline_is_the_same_state(adapter):
    composed = "Le caf\u00e9 a factur\u00e9 deux fois le m\u00eame repas."
    variants = [composed, unicodedata.normalize("NFD", composed), composed + "\n", composed + " \n"]
    results = [
        httpx.post(
            adapter.url + "/invocations",
            json={"decision": decision(state=state)},
            timeout=60,
        ).json()["result"]
        for state in variants
    ]
    assert len({r["prompt_sha256"] for r in results}) == 1
    assert all(r["probabilities"] == results[0]["probabilities"] for r in results)


# A state that shows Gemma the answer format (a worked question) makes it answer with a letter
# (allowed mass 0.68 measured); an angry message and a yes/no question make it start a
# sentence instead (0.07). MIN_CONFIDENT_MASS is 0.5.
WORKED = "Question: 2+2?\nOptions:\nA. 4\nB. 5\nAnswer: A\n"
CONFIDENT = decision(
    id="alphabet",
    state=WORKED,
    question="Which letter comes first in the alphabet?",
    options=[
        {"id": "A", "description": "The letter A."},
        {"id": "B", "description": "The letter B."},
    ],
)
UNSURE = decision(
    id="angry",
    state="I am furious! Refund me now!!!",
    question="Reply A or B. Which one?",
    options=[{"id": "first"}, {"id": "second"}],
)


def test_a_letters_answer_under_the_mass_threshold_is_flagged_and_one_above_is_not(adapter):
    body = {"decisions": [{**CONFIDENT, "readout": "letters"}, {**UNSURE, "readout": "letters"}]}
    response = post(adapter, body)
    assert response.status_code == 200, response.text
    confident, unsure = response.json()["results"]
    assert confident["readout_mode"] == unsure["readout_mode"] == "letter-spellings"
    assert confident["allowed_token_mass"] > 0.6 and confident["low_allowed_mass"] is False
    assert unsure["allowed_token_mass"] < 0.3 and unsure["low_allowed_mass"] is True
    # The flag says how far to trust them; the probabilities are still the readout's.
    assert sum(unsure["probabilities"]) == pytest.approx(1.0)


def test_system_one_carries_the_mass_and_the_flag(adapter):
    body = {
        "model": "jev-latest",
        "x_readout": "letters",
        "state": WORKED,
        "questions": {
            "first": {
                "type": "choice",
                "instructions": CONFIDENT["question"],
                "criteria": {"A": "The letter A.", "B": "The letter B."},
            }
        },
    }
    response = post(adapter, body, path="/v1/systemone")
    assert response.status_code == 200, response.text
    answer = response.json()["answers"]["first"]
    assert answer["x_allowed_token_mass"] > 0.6 and answer["x_low_allowed_mass"] is False


def test_other_readouts_are_never_flagged(adapter):
    response = post(adapter, {"decision": {**UNSURE, "readout": "option_text"}})
    result = response.json()["result"]
    assert result["allowed_token_mass"] < 0.5 and result["low_allowed_mass"] is False
