from pathlib import Path

import pytest
from decision_adapter.settings import Settings, SettingsError, environment_names


def test_defaults_suit_a_local_run():
    settings = Settings.from_environment({})
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert settings.model_dir == Path("/opt/ml/model")
    assert settings.n_gpu_layers == 0 and settings.max_queue == 0


def test_dlc_spellings_are_accepted_and_ours_win():
    env = {
        "SM_LLAMA_CPP_THREADS": "3",
        "SM_LLAMA_CPP_CTX_SIZE": "4096",
        "SM_LLAMA_CPP_N_GPU_LAYERS": "-1",
        "SM_LLAMA_CPP_MODEL": "/m/x.gguf",
    }
    settings = Settings.from_environment(env)
    assert (settings.n_threads, settings.n_ctx, settings.n_gpu_layers) == (3, 4096, -1)
    assert settings.model_path == Path("/m/x.gguf")
    ours = Settings.from_environment(
        {**env, "DECISION_N_THREADS": "5", "DECISION_MODEL_PATH": "/a.gguf"}
    )
    assert ours.n_threads == 5 and ours.model_path == Path("/a.gguf")


def test_sagemaker_port_wins_over_port():
    assert (
        Settings.from_environment({"PORT": "9000", "SAGEMAKER_BIND_TO_PORT": "9100"}).port == 9100
    )


def test_request_budget_is_capped_by_the_context():
    settings = Settings.from_environment(
        {"DECISION_N_CTX": "2048", "DECISION_MAX_REQUEST_TOKENS": "9000"}
    )
    assert settings.request_token_limit == 2048


@pytest.mark.parametrize(
    "name,value",
    [
        ("DECISION_N_THREADS", "zero"),
        ("SM_LLAMA_CPP_CTX_SIZE", "12"),
        ("PORT", "70000"),
        ("DECISION_N_GPU_LAYERS", "-2"),
        ("DECISION_LOG_LEVEL", "chatty"),
        ("DECISION_METRICS_ENDPOINT", "has spaces"),
        ("DECISION_SLOT_GRACE_MS", "5001"),
    ],
)
def test_impossible_values_name_the_variable(name, value):
    with pytest.raises(SettingsError, match=name):
        Settings.from_environment({name: value})


def test_the_slot_grace_may_be_at_most_5_s():
    assert Settings.from_environment({"DECISION_SLOT_GRACE_MS": "5000"}).slot_grace_ms == 5000


@pytest.mark.parametrize("memory_gib,expected_gib", [(8, 1), (16, 2), (32, 4), (128, 4)])
def test_state_cache_default_is_an_eighth_of_memory_capped_at_4_gib(
    monkeypatch, memory_gib, expected_gib
):
    page = 4096
    pages = {"SC_PAGE_SIZE": page, "SC_PHYS_PAGES": memory_gib * (1 << 30) // page}
    monkeypatch.setattr("decision_adapter.settings.os.sysconf", pages.__getitem__)
    assert Settings.from_environment({}).state_cache_budget == expected_gib << 30


def test_state_cache_bytes_overrides_the_default_and_zero_disables():
    assert (
        Settings.from_environment({"DECISION_STATE_CACHE_BYTES": "12345"}).state_cache_budget
        == 12345
    )
    assert Settings.from_environment({"DECISION_STATE_CACHE_BYTES": "0"}).state_cache_budget == 0


def test_every_field_declares_its_variables_and_no_variable_sets_two_fields():
    names = [name for field in Settings.model_fields for name in environment_names(field)]
    assert len(names) == len(set(names))
    assert environment_names("port") == ("SAGEMAKER_BIND_TO_PORT", "PORT")
    # A field with no variable fails here, not silently at deploy time.
    assert all(environment_names(field) for field in Settings.model_fields)


def test_without_a_mapping_the_process_environment_is_read(monkeypatch):
    monkeypatch.setenv("DECISION_N_CTX", "4096")
    assert Settings.from_environment().n_ctx == 4096
    assert Settings.from_environment({}).n_ctx == 8192  # a mapping given is the only source


def test_blank_variables_are_unset_and_values_are_trimmed():
    settings = Settings.from_environment(
        {
            "DECISION_N_THREADS": "  ",  # blank: the DLC spelling after it still counts
            "SM_LLAMA_CPP_THREADS": "3",
            "DECISION_N_CTX": "",
            "DECISION_METRICS_ENDPOINT": " ep-1 ",
        }
    )
    assert (settings.n_threads, settings.n_ctx, settings.metrics_endpoint) == (3, 8192, "ep-1")


def test_the_error_names_the_variable_set_its_value_and_the_rule():
    with pytest.raises(SettingsError) as caught:
        Settings.from_environment({"SM_LLAMA_CPP_CTX_SIZE": " 12 ", "DECISION_N_BATCH": "64"})
    assert str(caught.value) == (
        "SM_LLAMA_CPP_CTX_SIZE='12': Input should be greater than or equal to 256"
    )
