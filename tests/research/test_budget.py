"""research.budget_worst_case's search for the heaviest request each shape admits, on the
real tokenizer: the request it finds fits the default budget and one word more does not, one at
a time and with decisions batched (whose budget also charges restores)."""

from __future__ import annotations

import pytest
from decision_adapter.formats.decision import DecisionRequest
from decision_adapter.model.tokenizer import TokenLimitExceeded

from research.budget_worst_case.study import LIMIT, SHAPES, cost, largest_admitted


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("name", SHAPES)
def test_the_largest_admitted_request_fits_and_one_word_more_is_refused(renderer, name, batched):
    shape = SHAPES[name]
    n = largest_admitted(shape, renderer, batched=batched)
    assert LIMIT * 0.9 < cost(renderer, shape(n), batched=batched) <= LIMIT
    with pytest.raises(TokenLimitExceeded):
        cost(renderer, shape(n + 1), batched=batched)
    if name != "many_paths":
        assert DecisionRequest.model_validate(shape(n)).items[0].readout == name


def test_the_batched_search_charges_what_shared_rounds_restore(renderer):
    """The shape the rounds make heavy costs more batched than one at a time: the search admits
    less of it than the token count alone would."""
    shape = SHAPES["many_paths"]
    batched = largest_admitted(shape, renderer, batched=True)
    alone = largest_admitted(shape, renderer)
    assert cost(renderer, shape(batched), batched=True) > 1.1 * cost(renderer, shape(batched))
    assert batched < alone
