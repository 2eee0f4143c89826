"""The letters-spellings study (research/letter_spellings) runs as committed: on the bundled
model and a few held-out items, both readings of the same logits, the summed one never below
the single spelling's mass."""

import json


def test_the_study_compares_one_spelling_with_all_on_the_bundled_model(tmp_path, capsys):
    from research.letter_spellings import study

    out = tmp_path / "result.json"
    assert study.main(["--model", "gemma3", "--limit", "3", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == result
    (gemma,) = result["models"].values()
    assert gemma["items"] == 3
    committed = json.loads((study.RESULTS / "letters-spellings.json").read_text())
    assert set(gemma) == set(committed["models"]["gemma3"])
    single, summed = gemma["single_spelling"], gemma["all_spellings"]
    assert single["n"] == summed["n"] >= 3  # the items' questions, read both ways
    for figure in ("mean", "min", "max"):
        assert summed["allowed_token_mass"][figure] >= single["allowed_token_mass"][figure] > 0
