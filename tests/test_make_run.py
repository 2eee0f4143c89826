"""README's first command, `make run`, as a user runs it: the bundled model, served with the
readout and temperature its profile (model_packaging/profiles/) names."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from decision_adapter.openapi import DECISION_EXAMPLE

from launcher import free_port, wait_until_healthy

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "model_packaging" / "profiles" / "gemma3-270m.json"


@pytest.fixture(scope="module")
def make_run(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("make-run") / "make-run.log"
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DECISION_", "SM_LLAMA_CPP_"))
    }
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["make", "--no-print-directory", "run", f"PORT={port}"],
            cwd=ROOT,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # make, its shell and the adapter stop together
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, url + "/ping", log.read_text, 180, "make run")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def test_make_run_serves_the_bundled_model_with_its_profiles_readout(make_run):
    profile = json.loads(PROFILE.read_text())
    response = httpx.post(make_run + "/invocations", json=DECISION_EXAMPLE, timeout=60)
    assert response.status_code == 200, response.text
    answer = response.json()["result"]
    assert answer["readout"] == profile["readout"] != "letters"
    assert answer["temperature"] == pytest.approx(profile["temperature"])
