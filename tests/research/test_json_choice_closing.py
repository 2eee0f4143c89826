"""The JSON-closing study (research/json_choice_closing) on the bundled model: Gemma 3's
vocabulary holds `"}` as one token, the study's `quote` closing is the product's json_choice and
json_choice_sum numbers bit for bit, and the other closings only add disjoint mass to them."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from decision_adapter.formats.systemone import SystemOneRequest
from decision_adapter.scoring.score import build_plan, score

from evaluation import labelled
from research.json_choice_closing import study

DEV = labelled.load(study.SPLITS["dev"])


@pytest.fixture(scope="module")
def closing(engine):
    return study.closings(engine)


def test_gemma_writes_the_closing_quote_and_brace_as_one_token(engine, closing):
    (quote,) = engine.tokenize('"', special=False)
    assert closing.tokens[0] == quote
    assert closing.brace and closing.pieces[1] == '"}'
    assert engine.tokenize('{"choice": "yes"}', special=False)[-1] == closing.tokens[1]
    assert all(piece.startswith('"') for piece in closing.pieces)
    assert len(set(closing.tokens)) == len(closing.tokens) > 2


def test_the_quote_closing_is_the_products_reading_and_the_others_only_add(
    engine, renderer, closing
):
    (item,) = DEV[:1]
    read_all = study.read_items([item], engine, renderer, closing)
    request = SystemOneRequest.model_validate(item.body())
    for readout in study.READOUTS:
        questions = [request.questions[qid].as_question(readout) for qid in item.expected]
        product, _ = score(engine, build_plan(renderer, request.state, questions))
        for read, served in zip(read_all, product, strict=True):
            # The same decoded branches: the product's numbers exactly.
            assert np.array_equal(read.logits(readout, [0]), served.option_logits)
    without_brace = replace(closing, brace=False)  # a vocabulary without `"}`
    for read in read_all:
        assert all(read.closable)
        quote, brace, every = (read.log_probs(closing.columns(c)) for c in study.CLOSINGS)
        assert np.all(quote < brace) and np.all(brace <= every) and np.all(every < 0)
        # Each name then one closing token: disjoint continuations, at most all of the mass.
        assert math.fsum(np.exp(every)) <= 1
        no_brace = read.log_probs(without_brace.columns("quote_brace"))
        assert np.array_equal(no_brace, quote)


def test_the_study_runs_as_committed(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert study.main(["--model", "gemma3", "--limit", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == result
    committed = json.loads((study.RESULTS / "json-choice-closing.json").read_text())
    gemma = result["models"]["gemma3"]
    assert set(gemma) == set(committed["models"]["gemma3"])
    assert set(gemma["readouts"]) == set(study.READOUTS)
    for rows in gemma["readouts"].values():
        assert set(rows["quote_brace"]["against_quote"]) == {"dev", "test"}
        assert rows["quote"]["dev_at_1"]["n"] == len(gemma["questions"]["dev"])
