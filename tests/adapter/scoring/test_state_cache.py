"""The prefilled-state cache: bit-identical answers, LRU eviction within a byte budget."""

from __future__ import annotations

import numpy as np
import pytest
from decision_adapter.contract import Question
from decision_adapter.scoring.score import build_plan, score
from decision_adapter.scoring.state_cache import StateCache

STATE = "Order 1182 arrived damaged; the customer wants a replacement, not a refund. " * 6
QUESTIONS = [
    Question(
        "Which queue?", ["returns", "billing", "shipping"], ["Returns desk.", None, "Carriers."]
    ),
    Question("Is a refund wanted?", ["yes", "no"], [None, None]),
    Question("Priority?", ["low", "high"], [None, None]),
]


def test_a_cache_hit_gives_bit_identical_answers(engine, renderer):
    plan = build_plan(renderer, STATE, QUESTIONS)
    uncached, _ = score(engine, plan)
    cache = StateCache(256 << 20, model_id="gemma")
    first, first_timing = score(engine, plan, cache=cache)
    again, again_timing = score(engine, plan, cache=cache)
    assert (first_timing.state_cache, again_timing.state_cache) == ("miss", "hit")
    for a, b, c in zip(uncached, first, again, strict=False):
        assert np.array_equal(a.option_logits, b.option_logits)
        assert np.array_equal(a.option_logits, c.option_logits)
    assert cache.stats.hits == 1 and cache.stats.misses == 1 and cache.stats.entries == 1


def test_a_hit_decodes_only_the_questions(engine, renderer):
    cache = StateCache(256 << 20, model_id="gemma")
    score(engine, build_plan(renderer, STATE, QUESTIONS[:1]), cache=cache)
    plan = build_plan(renderer, STATE, QUESTIONS[1:2])  # a different question, same state
    before = engine.stats.tokens_decoded
    (single,), timing = score(engine, plan, cache=cache)
    assert timing.state_cache == "hit"
    assert engine.stats.tokens_decoded - before == len(plan.questions[0].suffix_tokens)
    (fresh,), _ = score(engine, plan)
    assert np.array_equal(single.option_logits, fresh.option_logits)


def test_the_key_is_the_exact_prefix_and_the_model():
    cache = StateCache(1 << 20, model_id="a")
    assert cache.key([1, 2, 3]) == cache.key([1, 2, 3]) != cache.key([1, 2, 4])
    assert cache.key([1, 2, 3]) != StateCache(1 << 20, model_id="b").key([1, 2, 3])


def test_lru_eviction_never_exceeds_the_budget():
    cache = StateCache(budget_bytes=250, model_id="m")
    for name in "abc":
        cache.put(name, bytes(100))
        assert cache.stats.size_bytes <= 250
    assert cache.get("a") is None  # evicted first
    assert cache.get("b") is not None  # now most recent
    cache.put("d", bytes(100))
    assert cache.get("c") is None and cache.get("b") is not None
    assert cache.stats.evictions == 2 and cache.stats.entries == 2
    cache.put("huge", bytes(1000))
    assert cache.stats.rejected_too_large == 1 and cache.stats.size_bytes == 200


def test_the_counters_count_every_lookup_and_the_budget_is_inclusive():
    cache = StateCache(budget_bytes=300, model_id="m")
    assert cache.get("a") is None and cache.get("b") is None
    cache.put("a", bytes(100))
    cache.put("b", bytes(200))  # fills the budget exactly: nothing evicted
    assert cache.get("a") == bytes(100) and cache.get("b") == bytes(200)
    assert cache.get("a") is not None
    cache.put("c", bytes(150))  # evicts b (least recent, 200), then fits beside a
    cache.put("d", bytes(301))
    cache.put("e", bytes(301))
    assert cache.stats.as_dict() == {
        "budget_bytes": 300,
        "size_bytes": 250,
        "entries": 2,
        "hits": 3,
        "misses": 2,
        "evictions": 1,
        "rejected_too_large": 2,
    }
    whole = StateCache(budget_bytes=100, model_id="m")
    whole.put("all", bytes(100))  # a state as large as the whole budget is kept
    assert whole.get("all") is not None and whole.stats.rejected_too_large == 0


def test_real_states_under_a_tiny_budget_evict_and_stay_exact(engine, renderer):
    plans = [build_plan(renderer, f"Ticket {i}: " + STATE, QUESTIONS[:1]) for i in range(3)]
    probe = StateCache(1 << 30, model_id="gemma")
    score(engine, plans[0], cache=probe)
    one_state = probe.stats.size_bytes
    cache = StateCache(budget_bytes=int(one_state * 1.5), model_id="gemma")
    outcomes = [score(engine, plan, cache=cache)[1].state_cache for plan in plans + plans[:1]]
    assert outcomes == ["miss", "miss", "miss", "miss"]  # room for one state: each evicts the last
    assert cache.stats.evictions == 3 and cache.stats.size_bytes <= cache.stats.budget_bytes
    (cached,), timing = score(engine, plans[0], cache=cache)
    assert timing.state_cache == "hit"
    (fresh,), _ = score(engine, plans[0])
    assert np.array_equal(cached.option_logits, fresh.option_logits)


def test_disabled_cache_stores_nothing(engine, renderer):
    cache = StateCache(0, model_id="gemma")
    _, timing = score(engine, build_plan(renderer, STATE, QUESTIONS[:1]), cache=cache)
    assert timing.state_cache == "off" and cache.stats.entries == 0


def test_a_failure_mid_request_leaves_no_entry(engine, renderer, monkeypatch):
    cache = StateCache(1 << 30, model_id="gemma")
    plan = build_plan(renderer, STATE + "unique", QUESTIONS[:1])

    def broken(*args, **kwargs):
        raise RuntimeError("decode failed")

    monkeypatch.setattr(engine, "save_sequence", broken)
    with pytest.raises(RuntimeError):
        score(engine, plan, cache=cache)
    assert cache.stats.entries == 0 and cache.stats.size_bytes == 0


def test_the_live_adapter_reports_hits_misses_and_bit_identical_answers(adapter):
    import httpx

    state = "Cache probe: the customer's parcel is stuck in customs for 9 days. " * 5

    def body(question):
        options = [{"id": "customs"}, {"id": "carrier"}]
        return {
            "decision": {"id": question, "state": state, "question": question, "options": options}
        }

    before = httpx.get(adapter.url + "/stats").json()["state_cache"]
    first = httpx.post(
        adapter.url + "/invocations", json=body("Who acts next?"), timeout=60
    ).json()["result"]
    second = httpx.post(adapter.url + "/invocations", json=body("Who pays?"), timeout=60).json()[
        "result"
    ]
    repeat = httpx.post(
        adapter.url + "/invocations", json=body("Who acts next?"), timeout=60
    ).json()["result"]
    assert [r["timing"]["state_cache"] for r in (first, second, repeat)] == ["miss", "hit", "hit"]
    assert repeat["probabilities"] == first["probabilities"]
    after = httpx.get(adapter.url + "/stats").json()["state_cache"]
    assert after["hits"] - before["hits"] == 2 and after["misses"] - before["misses"] == 1
    assert 0 < after["size_bytes"] <= after["budget_bytes"]


def test_system_one_and_decisions_share_cached_states(adapter):
    import httpx

    state = "Cross-format probe: a shared inbox receives 40 phishing reports an hour. " * 4
    decisions = {
        "decisions": [
            {
                "id": "team",
                "state": state,
                "question": "Which team?",
                "options": [{"id": "security"}, {"id": "it"}],
            },
            {
                "id": "urgent",
                "state": state,
                "question": "Urgent?",
                "options": [{"id": "yes"}, {"id": "no"}],
            },
        ]
    }
    shared = httpx.post(adapter.url + "/invocations", json=decisions, timeout=60).json()
    assert shared["timing"]["state_cache"] == "miss"
    system_one = {
        "model": "jev-latest",
        "state": state,
        "questions": {"phishing": {"type": "noul", "instructions": "Is this about phishing?"}},
    }
    first = httpx.post(adapter.url + "/v1/systemone", json=system_one, timeout=60).json()
    again = httpx.post(adapter.url + "/v1/systemone", json=system_one, timeout=60).json()
    assert first["x_timing"]["state_cache"] == again["x_timing"]["state_cache"] == "hit"
    assert first["answers"] == again["answers"]


def test_system_one_questions_from_the_cache_are_bit_identical(engine, renderer):
    from decision_adapter.formats.systemone import SystemOneRequest

    request = SystemOneRequest.model_validate(
        {
            "model": "jev-latest",
            "state": STATE,
            "questions": {
                "refund": {"type": "noul", "instructions": "Does the customer want a refund?"},
                "queue": {
                    "type": "choice",
                    "criteria": {"returns": "Returns desk.", "shipping": None},
                },
                "severity": {"type": "score", "criteria": ["minor", "major", "critical"]},
            },
        }
    )
    plan = build_plan(
        renderer, request.state, [q.as_question() for q in request.questions.values()]
    )
    cache = StateCache(256 << 20, model_id="gemma")
    fresh, _ = score(engine, plan)
    missed, miss = score(engine, plan, cache=cache)
    hit, hit_timing = score(engine, plan, cache=cache)
    assert (miss.state_cache, hit_timing.state_cache) == ("miss", "hit")
    for a, b, c in zip(fresh, missed, hit, strict=False):
        assert np.array_equal(a.option_logits, b.option_logits) and np.array_equal(
            a.option_logits, c.option_logits
        )


def _state_of_prefix_length(renderer, tokens: int) -> str:
    """A state whose rendered prefix is exactly `tokens` tokens long."""

    def length(state: str) -> int:
        prompt = renderer.decision(state, "q", [("A", "a", None)])
        return len(renderer.tokens(prompt.prefix, starts_prompt=True))

    words = (tokens - length("")) // 4
    state = " ".join(f"item{i % 97}" for i in range(words))
    while length(state) < tokens:
        state += " a"
    assert length(state) == tokens
    return state


# 43 options get two-letter labels, the last of them (BQ) two tokens in Gemma's vocabulary (a
# label-sequence readout), and a suffix of 250+ tokens; the long question gives a single-token
# readout with a suffix past llama.cpp's 64-token FA tile.
LONG_READOUT_QUESTIONS = [
    Question("Which item is meant?", [f"item{i}" for i in range(43)], [None] * 43),
    Question(
        "Is the list complete? " + "Check every entry against the order. " * 7,
        ["yes", "no"],
        [None, None],
    ),
    Question("Priority?", ["low", "high"], [None, None]),
]


@pytest.mark.parametrize("prefix_tokens", [511, 512, 513, 1025])
def test_cache_off_miss_and_hit_are_bit_identical_around_the_batch_size(
    engine, renderer, prefix_tokens
):
    plan = build_plan(
        renderer, _state_of_prefix_length(renderer, prefix_tokens), LONG_READOUT_QUESTIONS
    )
    assert len(plan.prefix_tokens) == prefix_tokens
    assert [len(q.suffix_tokens) >= 64 for q in plan.questions] == [True, True, False]
    assert [q.single_token_labels for q in plan.questions] == [False, True, True]
    cache = StateCache(1 << 30, model_id="gemma")
    missed, miss = score(engine, plan, cache=cache)
    hit, hit_timing = score(engine, plan, cache=cache)
    assert (miss.state_cache, hit_timing.state_cache) == ("miss", "hit")
    compared = [hit]
    # Cache off takes the miss's path but for storing the state (both restore the saved prefix),
    # so it is decoded once, at the length past both a batch and the window.
    if prefix_tokens > 2 * engine.n_batch:
        off, _ = score(engine, plan)
        compared.append(off)
    for answers in compared:
        for reference, other in zip(missed, answers, strict=False):
            assert np.array_equal(reference.option_logits, other.option_logits)


def test_a_system_one_choice_of_60_on_a_long_state_is_bit_identical_from_the_cache(adapter):
    import httpx

    bins = " ".join(f"bin{i} holds {i % 7} crates" for i in range(110))
    state = "Inventory audit, aisle by aisle: " + bins
    request = {
        "model": "jev-latest",
        "state": state,
        "questions": {
            "bin": {
                "type": "choice",
                "instructions": "Which bin holds the most crates?",
                "criteria": {f"bin{i}": None for i in range(60)},
            }
        },
    }
    first = httpx.post(adapter.url + "/v1/systemone", json=request, timeout=120).json()
    again = httpx.post(adapter.url + "/v1/systemone", json=request, timeout=120).json()
    assert first["x_timing"]["prefix_tokens"] > 512
    assert (first["x_timing"]["state_cache"], again["x_timing"]["state_cache"]) == ("miss", "hit")
    assert first["answers"] == again["answers"]
