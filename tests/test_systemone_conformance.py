"""The PyPI conformance suite `jevcompat` (pinned in requirements-dev.txt) against live adapters:
once with auth off and once with a key (`--key-env`).

Exactly one of the two auth MUSTs applies to a run (auth.ignored-when-off without a key,
auth.bearer with one), and the two auth SHOULDs need a key, so a run reports 32/32 MUST with
13/13 (auth off) or 15/15 (auth on) SHOULD; together the two runs pass all 33 MUST and
15 SHOULD requirements of spec 0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import API_KEY

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
def keyed_report(secured_adapter, tmp_path_factory):
    return jevcompat(
        secured_adapter.url,
        tmp_path_factory.mktemp("jevcompat") / "keyed.json",
        "--key-env",
        "JEVCOMPAT_KEY",
        env={"JEVCOMPAT_KEY": API_KEY},
    )


def test_conformant_with_auth_off(open_report):
    summary = open_report["summary"]
    assert summary["verdict"] == "conformant", summary
    assert summary["MUST"] == {"passed": 32, "failed": 0, "skipped": 1, "tested": 32}
    assert summary["SHOULD"] == {"passed": 13, "failed": 0, "skipped": 2, "tested": 13}
    skipped = {rid for rid, (_, status) in statuses(open_report).items() if status != "pass"}
    assert skipped == ONLY_WITH_A_KEY
    assert not open_report["inconclusive"] and not open_report["case_errors"]


def test_conformant_with_auth_on(keyed_report):
    summary = keyed_report["summary"]
    assert summary["verdict"] == "conformant", summary
    assert summary["MUST"] == {"passed": 32, "failed": 0, "skipped": 1, "tested": 32}
    assert summary["SHOULD"] == {"passed": 15, "failed": 0, "skipped": 0, "tested": 15}
    skipped = {rid for rid, (_, status) in statuses(keyed_report).items() if status != "pass"}
    assert skipped == ONLY_WITHOUT_A_KEY
    assert not keyed_report["inconclusive"] and not keyed_report["case_errors"]


def test_every_must_and_should_passes_across_both_runs(open_report, keyed_report):
    passed = {level: set() for level in ("MUST", "SHOULD")}
    for report in (open_report, keyed_report):
        for rid, (level, status) in statuses(report).items():
            assert status != "fail", (rid, report["url"])
            if status == "pass":
                passed[level].add(rid)
    assert open_report["tool_version"] == "0.1.1" and open_report["spec_version"] == "0.1"
    assert (len(passed["MUST"]), len(passed["SHOULD"])) == (33, 15)
