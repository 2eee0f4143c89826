"""Calibration temperature: the variable, the file beside the GGUF, and what is refused."""

from __future__ import annotations

import json

import pytest
from decision_adapter.calibration import (
    BUILT_IN_TEMPERATURES,
    READOUTS,
    Calibration,
    CalibrationError,
    load_calibration,
)
from decision_adapter.settings import Settings, SettingsError

from launcher import run_adapter_until_exit

SHA = "a" * 64


@pytest.fixture
def gguf(tmp_path):
    path = tmp_path / "model" / "m.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF")
    return path


def test_no_variable_and_no_file_means_raw_probabilities(gguf):
    assert load_calibration(None, gguf, SHA) == Calibration(1.0, "none")


def test_file_beside_the_gguf_or_one_directory_up(gguf):
    (gguf.parent / "calibration.json").write_text(json.dumps({"temperature": 1.7, "ece": 0.02}))
    # A file without a readout was fitted before readouts had names: on letters.
    assert load_calibration(None, gguf, SHA) == Calibration(
        1.7, str(gguf.parent / "calibration.json"), "letters"
    )
    (gguf.parent / "calibration.json").unlink()
    (gguf.parent.parent / "calibration.json").write_text(json.dumps({"temperature": 0.8}))
    assert load_calibration(None, gguf, SHA).temperature == 0.8


def test_the_variable_wins_over_the_file(gguf):
    (gguf.parent / "calibration.json").write_text(json.dumps({"temperature": 1.7}))
    assert load_calibration(2.5, gguf, SHA) == Calibration(2.5, "DECISION_CALIBRATION_TEMPERATURE")


def test_a_file_fitted_for_another_model_is_refused(gguf):
    (gguf.parent / "calibration.json").write_text(
        json.dumps({"temperature": 1.7, "gguf_sha256": "b" * 64})
    )
    with pytest.raises(CalibrationError, match="refusing to serve"):
        load_calibration(None, gguf, SHA)
    (gguf.parent / "calibration.json").write_text(
        json.dumps({"temperature": 1.7, "gguf_sha256": SHA})
    )
    assert load_calibration(None, gguf, SHA).temperature == 1.7


@pytest.mark.parametrize(
    "content",
    ['{"temperature": 0}', '{"temperature": -1}', "{}", "not json", '{"temperature": "hot"}'],
)
def test_an_unusable_file_stops_the_server_naming_it(gguf, content):
    (gguf.parent / "calibration.json").write_text(content)
    with pytest.raises(CalibrationError, match="calibration.json"):
        load_calibration(None, gguf, SHA)


@pytest.mark.parametrize(
    "content,detail",
    [
        ('{"temperature": 0}', "temperature: Input should be greater than 0"),
        ("[1.5]", "body: Input should be a valid dictionary or instance of CalibrationFile"),
        ("not json", "Expecting value: line 1 column 1 (char 0)"),
    ],
)
def test_the_refusal_says_which_file_and_what_is_wrong(gguf, content, detail):
    path = gguf.parent / "calibration.json"
    path.write_text(content)
    with pytest.raises(CalibrationError) as caught:
        load_calibration(None, gguf, SHA)
    assert str(caught.value) == f"{path}: {detail}"


def test_a_file_for_another_model_names_both_checksums(gguf):
    path = gguf.parent / "calibration.json"
    path.write_text(json.dumps({"temperature": 1.7, "gguf_sha256": "b" * 64}))
    with pytest.raises(CalibrationError) as caught:
        load_calibration(None, gguf, SHA)
    assert str(caught.value) == (
        f"{path} was fitted for the GGUF with sha256 {'b' * 64}, "
        f"but the served GGUF has {SHA}; refusing to serve"
    )


def test_a_file_with_text_beyond_ascii_is_read_as_utf8(gguf):
    path = gguf.parent / "calibration.json"
    text = json.dumps({"temperature": 1.25, "note": "fitted on café data"}, ensure_ascii=False)
    path.write_bytes(text.encode())
    assert load_calibration(None, gguf, SHA).temperature == 1.25


def test_settings_read_the_temperature_and_the_api_key():
    settings = Settings.from_environment(
        {"DECISION_CALIBRATION_TEMPERATURE": "1.5", "DECISION_API_KEY": "s3cret-key"}
    )
    assert settings.calibration_temperature == 1.5
    assert settings.api_key.get_secret_value() == "s3cret-key" and "s3cret" not in repr(settings)
    defaults = Settings.from_environment({})
    assert defaults.calibration_temperature is None and defaults.api_key is None
    with pytest.raises(SettingsError, match="DECISION_CALIBRATION_TEMPERATURE"):
        Settings.from_environment({"DECISION_CALIBRATION_TEMPERATURE": "0"})


def test_a_file_for_another_gguf_stops_the_server_at_start(tmp_path, gemma_gguf):
    (tmp_path / gemma_gguf.name).symlink_to(gemma_gguf)
    (tmp_path / "calibration.json").write_text(
        json.dumps({"temperature": 1.7, "gguf_sha256": "b" * 64})
    )
    finished = run_adapter_until_exit({"DECISION_MODEL_DIR": str(tmp_path)})
    assert finished.returncode == 1
    lines = [line for line in finished.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "calibration.json" in lines[0], finished.stderr
    assert "refusing to serve" in lines[0]


def test_the_file_names_the_readout_its_temperature_was_fitted_for(gguf):
    path = gguf.parent / "calibration.json"
    path.write_text(json.dumps({"temperature": 8.89, "readout": "calibrated"}))
    found = load_calibration(None, gguf, SHA)
    assert found == Calibration(8.89, str(path), "calibrated")
    # The adapter's default readout is the file's; its temperature applies to that readout
    # only, since other readouts' scores have other scales.
    assert found.temperature_for("calibrated") == 8.89
    assert found.temperature_for("letters") == 1.0
    assert found.as_extension() == {
        "temperature": 8.89,
        "source": str(path),
        "readout": "calibrated",
    }


def test_a_file_from_before_readouts_had_names_was_fitted_on_letters(gguf):
    (gguf.parent / "calibration.json").write_text(json.dumps({"temperature": 1.7}))
    found = load_calibration(None, gguf, SHA)
    assert found.readout == "letters" and found.temperature_for("letters") == 1.7
    assert found.temperature_for("option_text") == 1.0


def test_the_variable_applies_to_every_readout_and_no_file_means_the_built_in_readout(gguf):
    """Without a file the readout is the built-in one of the model's prompt mode: the JSON
    answer cue for an instruct model (a chat template), letters for a base model."""
    none = load_calibration(None, gguf, SHA)
    assert none.readout is None
    instruct = none.for_prompt_mode("chat-template")
    assert instruct.readout == "json_choice_sum"
    # Its own temperature, for it alone: a readout a request asks for reads raw.
    assert (instruct.source, instruct.temperature) == (
        "built-in",
        BUILT_IN_TEMPERATURES["json_choice_sum"],
    )
    assert instruct.temperature_for("json_choice_sum", "noul") == instruct.temperature
    assert all(instruct.temperature_for(r) == 1.0 for r in READOUTS if r != "json_choice_sum")
    assert instruct.as_extension()["source"] == "built-in"
    base = none.for_prompt_mode("completion")
    assert (base.readout, base.source, base.temperature) == ("letters", "none", 1.0)
    assert all(base.temperature_for(r) == 1.0 for r in READOUTS)
    # The variable's temperature is every readout's, the built-in one's too.
    variable = load_calibration(2.5, gguf, SHA).for_prompt_mode("chat-template")
    assert variable.readout == "json_choice_sum" and variable.temperature_for("letters") == 2.5
    fitted = Calibration(3.0, "calibration.json", "option_text_desc")
    assert fitted.for_prompt_mode("chat-template") == fitted  # a file's readout stays
    found = load_calibration(2.5, gguf, SHA)
    assert all(found.temperature_for(name) == 2.5 for name in READOUTS)


def test_an_unknown_readout_in_the_file_stops_the_server_naming_it(gguf):
    (gguf.parent / "calibration.json").write_text(
        json.dumps({"temperature": 1.0, "readout": "tea_leaves"})
    )
    with pytest.raises(CalibrationError, match="readout"):
        load_calibration(None, gguf, SHA)


def test_a_profile_bound_to_the_served_gguf_applies_when_none_lies_beside_it(gguf, tmp_path):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "other.json").write_text(
        json.dumps({"temperature": 3.0, "readout": "letters", "gguf_sha256": "b" * 64})
    )
    (profiles / "unbound.json").write_text(json.dumps({"temperature": 4.0}))
    assert load_calibration(None, gguf, SHA, profiles) == Calibration(1.0, "none")
    ours = profiles / "ours.json"
    ours.write_text(json.dumps({"temperature": 8.0, "readout": "calibrated", "gguf_sha256": SHA}))
    assert load_calibration(None, gguf, SHA, profiles) == Calibration(8.0, str(ours), "calibrated")
    # The model's own file wins over the catalogue, and the variable over both.
    beside = gguf.parent / "calibration.json"
    beside.write_text(json.dumps({"temperature": 1.7}))
    assert load_calibration(None, gguf, SHA, profiles) == Calibration(1.7, str(beside), "letters")
    assert load_calibration(2.5, gguf, SHA, profiles).source == "DECISION_CALIBRATION_TEMPERATURE"


def test_a_broken_profile_or_a_missing_folder_stops_the_server_naming_it(gguf, tmp_path):
    with pytest.raises(CalibrationError, match="DECISION_CALIBRATION_PROFILES"):
        load_calibration(None, gguf, SHA, tmp_path / "nowhere")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(CalibrationError, match="broken.json"):
        load_calibration(None, gguf, SHA, tmp_path)
    settings = Settings.from_environment({"DECISION_CALIBRATION_PROFILES": str(tmp_path)})
    assert settings.calibration_profiles == tmp_path


def test_a_file_may_fit_a_temperature_per_question_kind(gguf):
    path = gguf.parent / "calibration.json"
    path.write_text(
        json.dumps({"temperature": 1.2, "readout": "json_choice", "temperatures": {"noul": 0.7}})
    )
    found = load_calibration(None, gguf, SHA)
    assert found.temperature_for("json_choice", "noul") == 0.7
    # Kinds the file does not name keep its one temperature; other readouts stay raw.
    assert found.temperature_for("json_choice", "choice") == 1.2
    assert found.temperature_for("json_choice", "score") == 1.2
    assert found.temperature_for("letters", "noul") == 1.0
    assert found.as_extension()["temperatures"] == {"noul": 0.7}
    # The variable still applies to every readout and kind.
    assert load_calibration(2.5, gguf, SHA).temperature_for("json_choice", "noul") == 2.5


@pytest.mark.parametrize(
    "temperatures, detail",
    [({"yes_no": 0.7}, "temperatures.yes_no"), ({"noul": 0}, "noul"), ({"score": 101}, "score")],
)
def test_an_unknown_kind_or_a_bad_kind_temperature_stops_the_server_naming_it(
    gguf, temperatures, detail
):
    (gguf.parent / "calibration.json").write_text(
        json.dumps({"temperature": 1.0, "temperatures": temperatures})
    )
    with pytest.raises(CalibrationError, match=detail):
        load_calibration(None, gguf, SHA)


@pytest.mark.parametrize(
    "option_ids, kind",
    [
        (["true", "false"], "noul"),
        (["false", "true"], "noul"),
        (["0", "1", "2"], "score"),
        (["1", "2", "3"], "choice"),  # a scale starts at 0 in every wire format
        (["2", "1", "0"], "choice"),
        (["true", "false", "maybe"], "choice"),
        (["billing", "shipping"], "choice"),
    ],
)
def test_the_kind_of_a_question_is_read_from_its_options(option_ids, kind):
    from decision_adapter.contract import question_kind

    assert question_kind(option_ids) == kind
