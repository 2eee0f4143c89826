"""Readout strategies on the real Gemma 3 270M: what each reads, and that each is exact (alone,
in a shared request, from the state cache, and in another option order)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from decision_adapter.contract import READOUTS, Question
from decision_adapter.model.tokenizer import TokenLimitExceeded
from decision_adapter.scoring.budget import READ_TOKEN_COST, TokenBudget
from decision_adapter.scoring.score import ContentFreeScores, build_plan, score
from decision_adapter.scoring.state_cache import StateCache

from tests.support.bodies import decision
from tests.support.fake_service import FakeService, app_client

STATE = "I was charged twice for my March invoice and the refund never arrived."
ROUTE = Question(
    "Which queue should handle this request?",
    ["account_access", "billing", "shipping", "technical_support"],
    ["Logins and passwords.", "Charges, refunds and invoices.", "Deliveries.", None],
)
ANGRY = Question(
    "Is the customer angry?", ["true", "false"], [None, None], answer_words=["yes", "no"]
)
LEVEL = Question("How urgent is it?", ["0", "1", "2"], ["Not urgent.", "Soon.", "Now."])
# The readouts that read each option's own words, so an option's order cannot matter.
CLOZE = ("option_text", "option_text_desc", "calibrated", "json_choice", "json_choice_sum")


def _with(question: Question, readout: str, order: list[int] | None = None) -> Question:
    order = order if order is not None else list(range(len(question.option_ids)))
    words = question.answer_words
    return Question(
        question.question,
        [question.option_ids[i] for i in order],
        [question.descriptions[i] for i in order],
        readout=readout,
        answer_words=[words[i] for i in order] if words else None,
    )


def _score(engine, renderer, questions, *, cache=None, content_free=None, state=STATE):
    plan = build_plan(renderer, state, questions)
    results, _ = score(engine, plan, cache=cache, content_free=content_free)
    return results


@pytest.mark.parametrize("readout", READOUTS)
def test_every_readout_is_exact_alone_shared_and_from_the_state_cache(engine, renderer, readout):
    questions = [_with(q, readout) for q in (ROUTE, ANGRY, LEVEL)]
    alone = [_score(engine, renderer, [q])[0] for q in questions]
    # Shared with each other and with questions read another way, in another order.
    others = [_with(ROUTE, "letters"), _with(LEVEL, "calibrated")]
    shared = _score(engine, renderer, [others[0], *reversed(questions), others[1]])[1:4][::-1]
    cache = StateCache(1 << 30, model_id="m")
    _score(engine, renderer, questions, cache=cache)  # miss: the state is saved
    hit = _score(engine, renderer, questions, cache=cache)
    assert cache.stats.hits >= 1
    for single, together, cached in zip(alone, shared, hit, strict=False):
        assert single.strategy == readout
        assert np.array_equal(single.option_logits, together.option_logits)
        assert np.array_equal(single.option_logits, cached.option_logits)
        assert np.array_equal(single.probabilities(), cached.probabilities())


@pytest.mark.parametrize("readout", CLOZE)
def test_option_text_readouts_are_bit_identical_in_reversed_and_shuffled_order(
    engine, renderer, readout
):
    forward = _score(engine, renderer, [_with(ROUTE, readout)])[0]
    for order in ([3, 2, 1, 0], [2, 0, 3, 1]):
        moved = _score(engine, renderer, [_with(ROUTE, readout, order)])[0]
        assert np.array_equal(moved.option_logits, forward.option_logits[order])
        assert np.array_equal(moved.option_log_probs, forward.option_log_probs[order])


MANY = Question(
    "Which department should answer?",
    ["sales", "legal", "billing", "security", "hr", "shipping", "support", "research", "it"],
    [None] * 9,
)


@pytest.mark.parametrize("readout", [*CLOZE, "permuted_letters"])
def test_probabilities_are_bit_identical_in_any_option_order(engine, renderer, readout):
    """The softmax sums exactly (math.fsum), not in request order: summed in request order,
    probabilities moved by an ulp when the options were reordered, though option_logits did
    not."""
    n = len(MANY.option_ids)
    (forward,) = _score(engine, renderer, [_with(MANY, readout)])
    order = [(3 + i) % n for i in range(n)]  # a rotation: permuted_letters' promise
    if readout != "permuted_letters":
        order = [4, 8, 1, 6, 0, 3, 7, 2, 5]
    (moved,) = _score(engine, renderer, [_with(MANY, readout, order)])
    assert np.array_equal(moved.option_logits, forward.option_logits[order])
    for temperature in (1.0, 0.7):
        assert np.array_equal(
            moved.probabilities(temperature), forward.probabilities(temperature)[order]
        )
    assert moved.allowed_token_mass == forward.allowed_token_mass
    # The same numbers in any other order.
    for permutation in np.random.default_rng(11).permuted(np.tile(np.arange(n), (100, 1)), axis=1):
        shuffled = replace(
            forward,
            option_logits=forward.option_logits[permutation],
            option_log_probs=forward.option_log_probs[permutation],
        )
        assert np.array_equal(shuffled.probabilities(), forward.probabilities()[permutation])
        assert shuffled.allowed_token_mass == forward.allowed_token_mass


def test_permuted_letters_give_the_same_average_in_any_rotation(engine, renderer):
    forward = _score(engine, renderer, [_with(ROUTE, "permuted_letters")])[0]
    rotated_order = [2, 3, 0, 1]
    rotated = _score(engine, renderer, [_with(ROUTE, "permuted_letters", rotated_order)])[0]
    assert np.array_equal(rotated.option_logits, forward.option_logits[rotated_order])
    assert forward.readout == "rotation-mean"
    # An average of distributions over the options: the probabilities at T=1 sum to 1 and the
    # mean of log-distributions is at most 0 everywhere.
    assert np.all(forward.option_logits < 0)


def test_permuted_letters_pay_one_suffix_per_rotation_after_one_prefix(engine, renderer):
    plan = build_plan(renderer, STATE, [_with(ROUTE, "permuted_letters")])
    letters = build_plan(renderer, STATE, [_with(ROUTE, "letters")])
    assert len(plan.questions[0].readings) == 4
    assert plan.prefix_tokens == letters.prefix_tokens
    before = engine.stats.tokens_decoded
    score(engine, plan)
    assert engine.stats.tokens_decoded - before == plan.total_tokens
    assert plan.total_tokens - len(plan.prefix_tokens) == 4 * len(
        letters.questions[0].suffix_tokens
    )


def test_option_text_reads_each_options_words_as_the_mean_per_token(engine, renderer):
    plan = build_plan(renderer, STATE, [_with(ROUTE, "option_text"), _with(ANGRY, "option_text")])
    (route, angry), _ = score(engine, plan)
    assert plan.questions[0].labels == ROUTE.option_ids
    assert plan.questions[1].labels == ["yes", "no"]  # a yes/no question reads its words
    assert "The correct answer is" in renderer.cloze(STATE, ROUTE.question).text
    assert "billing" not in renderer.cloze(STATE, ROUTE.question).text  # options not listed
    lengths = np.array([len(t) for t in plan.questions[0].label_tokens])
    assert lengths.max() > 1, "the test needs multi-token option words"
    assert np.array_equal(route.option_log_probs, route.option_mean_log_probs * lengths)
    assert np.array_equal(route.option_logits, route.option_mean_log_probs)
    described = build_plan(renderer, STATE, [_with(ROUTE, "option_text_desc")])
    assert described.questions[0].labels[1] == "billing: Charges, refunds and invoices."
    assert described.questions[0].labels[3] == "technical_support"  # no description


def test_calibrated_subtracts_option_text_scores_against_the_content_free_state(engine, renderer):
    kept = ContentFreeScores()
    before = engine.stats.tokens_decoded
    (calibrated,) = _score(engine, renderer, [_with(ROUTE, "calibrated")], content_free=kept)
    # Both passes, as the budget counts them: the state and the question, then the
    # content-free state and the question again.
    plan = build_plan(renderer, STATE, [_with(ROUTE, "calibrated")])
    assert plan.content_free_tokens == len(plan.content_free_prefix) + plan.questions[0].tokens
    assert engine.stats.tokens_decoded - before == plan.total_tokens + plan.content_free_tokens
    (plain,) = _score(engine, renderer, [_with(ROUTE, "option_text")])
    (neutral,) = _score(engine, renderer, [_with(ROUTE, "option_text")], state="N/A")
    assert calibrated.readout == "text-mean-minus-content-free"
    assert np.array_equal(calibrated.content_free, neutral.option_logits)
    assert np.array_equal(calibrated.option_logits, plain.option_logits - neutral.option_logits)
    assert kept.as_dict() == {"entries": 1, "bytes": kept.nbytes, "hits": 0, "misses": 1}
    # Kept: a reordered question reuses them and costs no content-free pass, same bits.
    before = engine.stats.tokens_decoded
    order = [3, 2, 1, 0]
    (again,) = _score(engine, renderer, [_with(ROUTE, "calibrated", order)], content_free=kept)
    plan = build_plan(renderer, STATE, [_with(ROUTE, "calibrated", order)])
    assert engine.stats.tokens_decoded - before == plan.total_tokens
    assert kept.as_dict() == {"entries": 1, "bytes": kept.nbytes, "hits": 1, "misses": 1}
    assert np.array_equal(again.option_logits, calibrated.option_logits[order])


@pytest.mark.parametrize("readout", READOUTS)
def test_the_budget_spends_what_the_plan_costs_on_every_pass(engine, renderer, readout):
    budget = TokenBudget(1 << 20)
    plan = build_plan(renderer, STATE, [_with(ROUTE, readout), _with(LEVEL, readout)], budget)
    assert budget.spent == plan.cost
    branches = sum(q.branch_tokens for q in plan.questions)
    again = plan.content_free_tokens + (READ_TOKEN_COST - 1) * branches
    assert plan.cost == plan.total_tokens + (READ_TOKEN_COST - 1) * branches + (
        again if readout == "calibrated" else 0
    )
    # One token less than that is refused, before the plan is built.
    with pytest.raises(TokenLimitExceeded):
        build_plan(
            renderer,
            STATE,
            [_with(ROUTE, readout), _with(LEVEL, readout)],
            TokenBudget(plan.cost - 1),
        )


def test_calibrated_scores_do_not_need_the_content_free_scores_kept(engine, renderer):
    """DECISION_CONTENT_FREE_CACHE_BYTES=0 keeps none: each request computes its own."""
    questions = [_with(ROUTE, "calibrated"), _with(LEVEL, "calibrated")]
    kept = _score(engine, renderer, questions, content_free=ContentFreeScores())
    none_kept = ContentFreeScores(max_bytes=0)
    unkept = _score(engine, renderer, questions, content_free=none_kept)
    assert none_kept.as_dict()["entries"] == 0
    for with_lru, without in zip(kept, unkept, strict=True):
        assert np.array_equal(with_lru.option_logits, without.option_logits)


def test_content_free_scores_are_a_bounded_lru():
    probe = ContentFreeScores()
    probe.put(("a",), {(1,): 0.0})
    kept = ContentFreeScores(max_bytes=2 * probe.nbytes)
    for key in ("a", "b", "c"):
        kept.put((key,), {(1,): 0.0})
    assert kept.get(("a",)) is None and kept.get(("c",)) is not None


def test_a_request_names_its_readout_and_gets_it_back():
    service = FakeService()
    with app_client(lambda _: service) as client:
        body = decision(readout="calibrated")
        reply = client.post("/invocations", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["result"]["readout"] == "calibrated"
        systemone = {
            "model": "jev-latest",
            "state": "s",
            "questions": {"x": {"type": "noul"}},
            "x_readout": "option_text",
        }
        reply = client.post("/v1/systemone", json=systemone)
        assert reply.status_code == 200, reply.text
        assert reply.json()["answers"]["x"]["x_readout"] == "option_text"
    asked = [item.question for request in service.scored for item in request]
    assert [q.readout for q in asked] == ["calibrated", "option_text"]
    assert asked[1].answer_words == ["yes", "no"]


def test_an_unknown_readout_is_a_422_naming_the_field_and_the_known_ones():
    with app_client() as client:
        body = decision(readout="tea_leaves")
        reply = client.post("/invocations", json=body)
        assert reply.status_code == 422
        assert reply.json()["field"] == "decision.readout"
        assert all(name in reply.json()["error"] for name in READOUTS)
        systemone = {
            "model": "jev-latest",
            "state": "s",
            "questions": {"x": {"type": "noul"}},
            "x_readout": "tea_leaves",
        }
        reply = client.post("/v1/systemone", json=systemone)
        assert reply.status_code == 422
        (detail,) = reply.json()["detail"]
        assert detail["loc"] == ["body", "x_readout"]
        assert all(name in detail["msg"] for name in READOUTS)


@pytest.mark.parametrize("readout", ["json_choice", "json_choice_sum"])
def test_json_choice_reads_each_name_as_json_writes_it(renderer, readout):
    """Issue 69, finding 6: names were read raw, so `Billing"Shipping` was scored inside
    `Billing`'s mass (its closing quote came early), `Billing\\` read as an escaped quote and a
    literal `caf\\u00e9` as `café`. Each name is now listed and read as JSON writes it: every
    continuation is the name's JSON string body and its closing quote, none a prefix of
    another's."""
    names = ["Billing", 'Billing"Shipping', "Billing\\", "caf\\u00e9", "café"]
    question = Question("Which team?", names, [None] * len(names), readout=readout)
    plan = build_plan(renderer, "The invoice is wrong.", [question])
    (reading,) = plan.questions[0].readings
    engine = renderer.engine
    for name, tokens in zip(names, reading.continuations, strict=True):
        text = b"".join(engine.piece(token) for token in tokens).decode()
        assert json.loads('"' + text) == name, (name, text)
    for one in reading.continuations:
        for other in reading.continuations:
            assert one is other or one != other[: len(one)], (one, other)
    listed = b"".join(engine.piece(token) for token in reading.suffix_tokens).decode()
    assert '- Billing\\"Shipping\n' in listed and "- Billing\\\\\n" in listed, listed
