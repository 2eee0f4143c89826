"""Chat sampling with llama-server's defaults: the values and chain are those of the llama.cpp
the engine is compiled from (read from its source here, not restated), and a request that
leaves a sampler field out is sampled exactly as one that sends llama-server's value."""

from __future__ import annotations

import re

import openai
import pytest
from decision_adapter import sampling

from bench.llama_server_build import vendored_llama_cpp


@pytest.fixture(scope="module")
def common_sampling() -> str:
    """`struct common_params_sampling` of the engine's llama.cpp common/common.h."""
    header = (vendored_llama_cpp() / "common" / "common.h").read_text()
    return header[header.index("struct common_params_sampling {") :].split("\n};", 1)[0]


def default(struct: str, name: str) -> float:
    return float(re.search(rf"\b{name}\s*=\s*(-?[0-9.]+)f?;", struct).group(1))


def test_the_defaults_are_llama_servers(common_sampling):
    assert default(common_sampling, "top_k") == sampling.TOP_K
    assert default(common_sampling, "top_p") == pytest.approx(sampling.TOP_P)
    assert default(common_sampling, "min_p") == pytest.approx(sampling.MIN_P)
    assert default(common_sampling, "temp") == pytest.approx(sampling.TEMPERATURE)


def test_the_chain_is_llama_servers_less_the_samplers_its_defaults_leave_neutral(common_sampling):
    listed = re.search(r"samplers = \{(.*?)\};", common_sampling, re.S).group(1)
    chain = [name.lower() for name in re.findall(r"COMMON_SAMPLER_TYPE_(\w+)", listed)]
    assert [name for name in chain if name not in sampling.NEUTRAL_AT_DEFAULTS] == list(
        sampling.CHAIN
    )
    # ... and those left out are neutral at llama.cpp's defaults.
    assert default(common_sampling, "typ_p") == 1.0
    assert default(common_sampling, "xtc_probability") == 0.0
    assert default(common_sampling, "penalty_repeat") == 1.0
    assert default(common_sampling, "penalty_freq") == default(common_sampling, "penalty_present")
    assert default(common_sampling, "penalty_freq") == 0.0
    assert default(common_sampling, "dry_multiplier") == 0.0
    assert default(common_sampling, "top_n_sigma") == -1.0


# --- on the real model ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(adapter):
    return openai.OpenAI(base_url=adapter.url + "/v1", api_key="unused", max_retries=0)


def story(client, seed: int, **sampler) -> str:
    completion = client.chat.completions.create(
        model="gemma",
        messages=[{"role": "user", "content": "Tell me a story about a fox."}],
        max_tokens=12,
        seed=seed,
        stop=["@@@"],
        **{key: value for key, value in sampler.items() if key in ("temperature", "top_p")},
        extra_body={key: value for key, value in sampler.items() if key in ("top_k", "min_p")},
    )
    return completion.choices[0].message.content


LLAMA_SERVER = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
OPENAI = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
SEEDS = (1, 2, 3)


def test_a_chat_that_sends_no_sampler_field_samples_as_llama_server(client):
    left_out = [story(client, seed) for seed in SEEDS]
    assert left_out == [story(client, seed, **LLAMA_SERVER) for seed in SEEDS]
    assert left_out != [story(client, seed, **OPENAI) for seed in SEEDS]  # the defaults matter


def test_top_p_alone_is_cut_by_top_k_40_first(client):
    """What most OpenAI clients send: top_p only. The rest are llama-server's, top_k included;
    without top_k 40 a flat distribution's nucleus would be sorted over the whole vocabulary."""
    hot = {"temperature": 1.5, "min_p": 0.0, "top_p": 0.99}  # many candidates survive
    top_p_alone = [story(client, seed, **hot) for seed in SEEDS]
    assert top_p_alone == [story(client, seed, **hot, top_k=40) for seed in SEEDS]
    assert top_p_alone != [story(client, seed, **hot, top_k=0) for seed in SEEDS]
