"""The PyPI conformance suite `jevcompat` (pinned in requirements-dev.txt) against live adapters:
its whole CLI run with auth off (the endpoints' default), and its auth case against an
adapter with a key (jevcompat's `run(..., only=...)`). Both serve the built-in `letters`
readout, what a GGUF without a profile gets; nothing jevcompat checks depends on the readout
but the numbers (the bundled model's profile readout, `option_text_desc`, passed the same run
by hand: 32/32 MUST and 13/13 SHOULD, in 75 s at 2 threads against letters' 46 s; again on
2026-12-01 with option texts read as a prefix tree, at 1 thread on a slower host: 106 s against
92 s, of which the 64-, 128- and 255-option requests took 69 s against 58 s).

Exactly one of the two auth MUSTs applies to a server (auth.ignored-when-off without a key,
auth.bearer with one), and the two auth SHOULDs need a key: the open run reports 32/32 MUST
and 13/13 SHOULD, the keyed auth case the other MUST and both SHOULDs, so together they pass
all 33 MUST and 15 SHOULD requirements of spec 0.1. The key changes nothing but the check in
front of the routes, so the keyed server does not repeat the other cases (about 40 s of model
work, most of it the 64- to 255-option requests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jevcompat import runner

from tests.conftest import API_KEY

pytestmark = pytest.mark.heavy  # tens of seconds: started first in a parallel run

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
def open_report(adapter, tmp_path_factory):
    return jevcompat(adapter.url, tmp_path_factory.mktemp("jevcompat") / "open.json")


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
