"""README's first command, `make run`, as a user runs it: the bundled model (or SmolLM2 with
`MODEL=smollm2`), served with the readout and temperature its profile
(model_packaging/profiles/) names."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from decision_adapter.calibration import BUILT_IN_READOUTS, BUILT_IN_TEMPERATURES
from decision_adapter.contract import question_kind
from decision_adapter.http.openapi import DECISION_EXAMPLE

from launcher import free_port, wait_until_healthy
from tests.support.readme_steps import sh_blocks

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "model_packaging" / "profiles"
# make's MODEL, the GGUF it serves, its profile
MODELS = {
    "": ("gemma-3-270m-q4_k_m.gguf", "gemma3-270m.json"),
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct.json"),
    # Assembled from its chunk packages into the models cache, named by its checksum.
    "qwen2.5-coder-0.5b": (
        "1d9614638d18024d-Qwen2.5-Coder-0.5B-Instruct.gguf",
        "qwen2.5-coder-0.5b-instruct.json",
    ),
}


# The 1.1 GB 1.5B only in `make test-large`.
LARGE = {
    "qwen2.5-coder-1.5b": (
        "cc324af070c2ecbf-Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf",
        "qwen2.5-coder-1.5b-instruct.json",
    )
}


@pytest.fixture(
    scope="module",
    params=[*MODELS, *(pytest.param(name, marks=pytest.mark.large_model) for name in LARGE)],
    ids=lambda model: model or "bundled",
)
def make_run(request, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("make-run") / "make-run.log"
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DECISION_", "SM_LLAMA_CPP_"))
    }
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["make", "--no-print-directory", "run", f"PORT={port}", f"MODEL={request.param}"],
            cwd=ROOT,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # make, its shell and the adapter stop together
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, url + "/ping", log.read_text, 180, "make run")
        yield url, *{**MODELS, **LARGE}[request.param]
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def test_make_run_serves_the_model_with_its_profiles_readout(make_run):
    url, gguf, profile_name = make_run
    profile = json.loads((PROFILES / profile_name).read_text())
    response = httpx.post(url + "/invocations", json=DECISION_EXAMPLE, timeout=60)
    assert response.status_code == 200, response.text
    answer = response.json()["result"]
    assert answer["model"]["gguf_file"] == gguf
    assert answer["readout"] == profile["readout"]
    # A profile may fit a temperature per question kind; this decision's kind is read as served.
    kind = question_kind(answer["option_ids"])
    expected = profile.get("temperatures", {}).get(kind, profile["temperature"])
    assert answer["temperature"] == pytest.approx(expected)
    built_in = {(r, BUILT_IN_TEMPERATURES.get(r, 1.0)) for r in BUILT_IN_READOUTS.values()}
    assert (profile["readout"], profile["temperature"]) not in built_in  # not the default


def test_readmes_curl_examples_answer_as_written(make_run):
    """README's "Try it" block in bash against `make run` (its port in place of 8080): every
    request succeeds (curl --fail-with-body) and answers its kind of body."""
    url, gguf, _ = make_run
    (block,) = sh_blocks("Try it")
    port = url.rsplit(":", 1)[1]
    # Each curl's answer, then a record separator; a 4xx or 5xx stops the script.
    answers = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _SEPARATED_CURL + block.replace(":8080", f":{port}")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert answers.returncode == 0, answers.stdout + answers.stderr
    decision, systemone, chat = [json.loads(a) for a in answers.stdout.split("\x1e")[:-1]]
    assert decision["result"]["option_ids"] == ["account_access", "billing"]
    assert sum(decision["result"]["probabilities"]) == pytest.approx(1.0)
    assert decision["result"]["model"]["gguf_file"] == gguf
    assert set(systemone["answers"]) == {"refund", "team"}
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["content"]


_SEPARATED_CURL = 'curl() { command curl --fail-with-body "$@"; printf "\\x1e"; }\n'
