"""The answer-cue variants study (research/instruct_readouts/variants.py) against a served
instruct model: each variant's cases, read from the same answers the adapter gives."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evaluation import labelled, metrics
from evaluation.cli import Target
from evaluation.labelled import SystemOneItem
from launcher import running_adapter
from launcher.models import local_model
from research.instruct_readouts import held_out, variants

DEV = labelled.load(variants.Path("evaluation/data/readout_dev.jsonl"))


def test_a_score_question_is_asked_again_by_its_levels_words():
    item = next(i for i in DEV if isinstance(i, SystemOneItem) and "risk" in i.request["questions"])
    questions = variants.with_level_words(item.request["questions"])
    asked = questions["risk" + variants.WORDS_SUFFIX]
    levels = item.request["questions"]["risk"]["criteria"]
    assert asked["type"] == "choice" and list(asked["criteria"]) == levels
    assert set(questions) == {*item.request["questions"], "risk" + variants.WORDS_SUFFIX}


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    gguf = local_model("smollm2")
    with running_adapter(tmp_path_factory.mktemp("smollm2"), DECISION_MODEL_PATH=str(gguf)) as a:
        yield a


def test_every_variant_reads_the_same_questions_from_the_served_answers(smollm2):
    item = next(i for i in DEV if isinstance(i, SystemOneItem) and "risk" in i.request["questions"])
    cases = variants.measure([item], Target.url(smollm2.url, max_attempts=3, timeout_s=120))
    names = {
        f"{v}{s}{c}"
        for v in ("json_choice", "levels_by_words")
        for s in ("", "_sum")
        for c in ("", "+content_free")
    }
    assert set(cases) == names
    for group in cases.values():
        assert [c.item_id for c in group] == [f"{item.item_id}/{q}" for q in item.expected]
    by_id = {name: {c.item_id: c for c in group} for name, group in cases.items()}
    for case_id, case in by_id["json_choice"].items():
        words = by_id["levels_by_words"][case_id]
        # Only a score question is asked differently; the others are the very same answers.
        assert (words.logits == case.logits) == (case.option_ids[0] != "0"), case_id
        assert case.option_ids == words.option_ids
        for name in ("json_choice", "json_choice_sum", "levels_by_words"):
            calibrated = by_id[f"{name}+content_free"][case_id]
            raw = by_id[name][case_id]
            assert np.all(np.isfinite(calibrated.logits)) and calibrated.logits != raw.logits
            assert sum(calibrated.probabilities) == pytest.approx(1.0)
    report = variants.summarise(cases)
    assert report["json_choice"]["by_question_kind"].keys() == {"noul", "choice", "score"}


def test_cases_round_trip_through_the_results_file_and_are_held_out_at_a_dev_temperature(
    smollm2,
):
    items = [i for i in DEV if isinstance(i, SystemOneItem)][:2]
    cases = variants.measure(items, Target.url(smollm2.url, max_attempts=3, timeout_s=120))
    records = {v: [variants.case_record(c) for c in group] for v, group in cases.items()}
    back = {
        v: [variants.case_from_record(r) for r in json.loads(json.dumps(group))]
        for v, group in records.items()
    }
    for variant, group in cases.items():
        assert [(c.item_id, c.logits, c.expected) for c in back[variant]] == [
            (c.item_id, c.logits, c.expected) for c in group
        ]
        for restored, case in zip(back[variant], group, strict=True):
            assert restored.probabilities == pytest.approx(case.probabilities)
    # Dev is the first item, test the second: each variant's temperature comes from dev alone.
    first = {
        v: [c for c in g if c.item_id.startswith(items[0].item_id + "/")] for v, g in back.items()
    }
    second = {
        v: [c for c in g if c.item_id.startswith(items[1].item_id + "/")] for v, g in back.items()
    }
    report = held_out.hold_out(first, second)
    assert report.keys() == cases.keys()
    for variant, result in report.items():
        fitted = metrics.fit_temperature(
            [c.logits for c in first[variant]], [c.expected_index for c in first[variant]]
        )
        assert result["temperature"] == pytest.approx(fitted.temperature)
        assert result["test_at_t1"]["n"] == len(second[variant])
        if not result["temperature_by_kind"] and result["temperature"] != pytest.approx(1.0):
            assert result["test_at_fitted"]["nll"] != pytest.approx(result["test_at_t1"]["nll"])
