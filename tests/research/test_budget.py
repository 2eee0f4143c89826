"""research.budget_worst_case's search for the heaviest request each readout admits, on the
real tokenizer: the request it finds fits the default budget and one word more does not."""

from __future__ import annotations

import pytest
from decision_adapter.formats.decision import DecisionRequest
from decision_adapter.model.tokenizer import TokenLimitExceeded
from decision_adapter.scoring.budget import TokenBudget
from decision_adapter.scoring.score import build_plan

from research.budget_worst_case.study import LIMIT, SHAPES, largest_admitted


def _cost(renderer, body: dict) -> int:
    item = DecisionRequest.model_validate(body).items[0]
    return build_plan(renderer, item.state, [item.as_question()], TokenBudget(LIMIT)).cost


@pytest.mark.parametrize("readout", SHAPES)
def test_the_largest_admitted_request_fits_and_one_word_more_is_refused(renderer, readout):
    shape = SHAPES[readout]
    n = largest_admitted(shape, renderer)
    assert LIMIT * 0.9 < _cost(renderer, shape(n)) <= LIMIT
    with pytest.raises(TokenLimitExceeded):
        _cost(renderer, shape(n + 1))
    assert DecisionRequest.model_validate(shape(n)).items[0].readout == readout
