"""The readout study (research/readout_study) reads the labelled splits as the adapter would
and divides out a position prior measured on rotations (PriDe), with no model."""


def test_readout_study_reads_the_splits_as_the_adapter_would():
    from research.readout_study import study as readout_study

    items = readout_study.load_items(readout_study.DATA / "readout_dev.jsonl")
    kept = readout_study.take_per_source(items, 2)
    assert len(kept) == 10  # five generators
    guard = kept[0].questions
    assert [q.kind for q in guard] == ["choice", "noul", "score"]
    assert guard[1].option_ids == ["true", "false"] and guard[2].option_ids == ["0", "1", "2", "3"]
    assert readout_study.option_text(guard[1], 0, "id_desc") == "yes"
    assert (
        readout_study.option_text(guard[0], 0, "id_desc") == "benign: An ordinary request for help."
    )
    flipped = guard[0].reordered([3, 2, 1, 0])
    assert flipped.option_ids[flipped.expected] == guard[0].option_ids[guard[0].expected]
    assert readout_study.cost_key("cloze.answer.id.mean") == "cloze.answer.id"
    assert readout_study.cost_key("cloze.answer.id.mean.cal") == "cloze.answer.id.mean.cal"


def test_pride_divides_out_the_position_prior_measured_on_rotations():
    import numpy as np

    from research.readout_study import study as readout_study

    prior = np.log([0.7, 0.2, 0.1])
    rotated = [{"n_options": 3, "original": {"_position_log_prior": (prior + 1.5).tolist()}}]
    # the model prefers position 0 by the prior alone, but option 1 by content
    row = {
        "n_options": 3,
        "original": {"letters": (prior + np.log([1, 3, 1])).tolist()},
        "reversed": {"letters": (prior[::-1] + np.log([1, 3, 1])).tolist()},
        "cost": {"letters": [1, 0.1]},
    }
    priors = readout_study.add_pride(rotated, [row])
    assert np.allclose(np.exp(priors["3"]), [0.7, 0.2, 0.1])
    for name in ("original", "reversed"):
        debiased = readout_study.renormalised(np.array(row[name]["letters.pride"]))
        assert np.allclose(np.exp(debiased), [0.2, 0.6, 0.2])
