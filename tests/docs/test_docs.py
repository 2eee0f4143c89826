"""README.md and docs/ cannot rot: every shell block README shows is one a test runs as
written, the front page stays a front page, and the link check that `make test` runs
(md-dead-link-check, offline, configured in pyproject.toml) fails on a broken relative link or
anchor."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.readme_steps import (
    DEPLOY,
    DOCS,
    README,
    ROOT,
    all_sh_blocks,
    commands,
    sh_blocks,
)

LINK_CHECK = Path(sys.executable).parent / "md-dead-link-check"
# The deploy blocks the rehearsal (tests/deploy/test_rehearsal.py) runs on a moto server, found by
# these needles.
REHEARSED = (
    "make bootstrap",
    "deploy STACKS=DecisionModels-Stateful",
    "build model",
    "mark-released",
    "ops ARGS='measure ",
)


def test_every_readme_shell_block_is_one_a_test_runs():
    quick_start, try_it, *deploy = all_sh_blocks()
    # The two commands: `make run` is tests/launcher/test_make_run.py's, `make test` is what CI
    # runs.
    assert commands(quick_start) == ["make run", "make test"]
    assert "\nmake test\n" in (ROOT / ".ci" / "run").read_text()
    assert (
        '"make", "--no-print-directory", "run"'
        in (ROOT / "tests/launcher/test_make_run.py").read_text()
    )
    # The curl examples: tests/launcher/test_make_run.py runs this section's one block against
    # `make run`.
    assert sh_blocks("Try it") == [try_it]
    # The deploy steps: every block of that section, in README's order.
    assert deploy == sh_blocks(DEPLOY)
    rehearsal = (ROOT / "tests" / "deploy" / "test_rehearsal.py").read_text()
    assert 'block_with(DEPLOY, "make destroy")' in rehearsal
    for needle in REHEARSED:
        assert sum(needle in block for block in deploy) == 1, needle


def test_readme_is_a_front_page():
    text = README.read_text()
    assert text.count("\n") <= 250
    assert "```mermaid" in text
    # Every docs page is linked from it, and none speaks of the project's history.
    pages = sorted(path.name for path in DOCS.glob("*.md"))
    assert pages and all(f"](docs/{page})" in text for page in pages)
    for page in [README, *DOCS.glob("*.md")]:
        assert not re.search(r"\bissue \d+|#\d{2,}\b", page.read_text()), page


def link_check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINK_CHECK), "--no-color", "--config", str(ROOT / "pyproject.toml")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_link_check_passes_on_the_repository():
    done = link_check(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_link_check_fails_on_a_broken_link_and_a_broken_anchor(tmp_path):
    """A copy of README and docs/ in a repository of its own, with one link to a page that
    does not exist and one to a heading that does not."""
    shutil.copy(README, tmp_path / "README.md")
    shutil.copytree(DOCS, tmp_path / "docs")
    api = tmp_path / "docs" / "api.md"
    api.write_text(
        api.read_text()
        + "\nSee [gone](configurations.md) and [also gone](deploy.md#no-such-heading).\n"
    )
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    done = link_check(tmp_path)
    assert done.returncode != 0
    broken = re.findall(r"Link: (\S+) • Error: (.+)", done.stdout)
    # README's own links outside README and docs/ (bench/results, ...) are absent from the copy.
    ours = {link: error for link, error in broken if link.startswith(("configurations", "deploy"))}
    assert ours == {
        "configurations.md": "Path not found",
        "deploy.md#no-such-heading": "Fragment not found",
    }


def test_readmes_held_out_figures_are_the_committed_profiles():
    """README's decision-quality table, row by row, against each profile `python -m evaluation
    --choose-readout` wrote (its held-out metrics, readout and fitted temperature)."""
    rows = re.findall(
        r"^\| ([^|]+) \| `([a-z0-9.-]+\.json)` \| `(\w+)`, T = ([\d.]+) \| ([\d.]+) \| ([\d.]+) "
        r"\| ([\d.]+) \|$",
        README.read_text(),
        re.M,
    )
    assert len(rows) == 4
    for _, profile_name, readout, temperature, accuracy, ece, nll in rows:
        profile = json.loads((ROOT / "model_packaging" / "profiles" / profile_name).read_text())
        held_out = profile["held_out_metrics"]
        assert (readout, float(temperature)) == (profile["readout"], round(profile["temperature"]))
        assert [float(accuracy), float(ece), float(nll)] == [
            round(held_out[key], 3) for key in ("accuracy", "ece", "nll")
        ]
        assert held_out["n"] == 208


def test_readmes_figures_without_a_profile_are_the_committed_reports():
    """README's rows of a model served without a profile (the built-in readout), against the
    held-out report each links to."""
    from decision_adapter.calibration import BUILT_IN_TEMPERATURES, built_in_readout

    rows = re.findall(
        r"^\| ([^|]+) \| \[none\]\(([^)]+/report\.json)\) \| `(\w+)`, T = ([\d.]+) "
        r"\| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$",
        README.read_text(),
        re.M,
    )
    assert rows, "no row of a model without a profile"
    built_in = built_in_readout("chat-template")
    for _, report_path, readout, temperature, *figures in rows:
        report = held_out_report_of_row(report_path, figures)
        assert readout == report["served_readout"] == built_in
        assert float(temperature) == report["served_temperature"] == BUILT_IN_TEMPERATURES[built_in]


def held_out_report_of_row(report_path: str, figures: list[str]) -> dict:
    """The held-out report a README row links to, whose accuracy, ECE and NLL the row shows."""
    report = json.loads((ROOT / report_path).read_text())
    assert report["file"].endswith("readout_test.jsonl") and report["metrics"]["n"] == 208
    assert [float(figure) for figure in figures] == [
        round(report["metrics"][key], 3) for key in ("accuracy", "ece", "nll")
    ]
    return report


def test_readmes_quota_is_the_deploy_pages_table():
    quota = re.search(r"quota for the instance types: (\d+) `([^`]+)`", README.read_text())
    table = re.search(r"\| `([^`]+)` \| (\d+) \|", (DOCS / "deploy.md").read_text())
    assert quota and table and (quota[2], quota[1]) == (table[1], table[2])


COMPUTE_QUOTA = {
    "BUILD_GENERAL1_LARGE": "Concurrently running builds for Linux/Large environment",
    "BUILD_GENERAL1_MEDIUM": "Concurrently running builds for Linux/Medium environment",
}


def test_the_codebuild_quotas_are_those_of_the_build_projects_compute_types(tmp_path):
    """A new account may run no build at all: the page lists, and its check loop asks for, the
    concurrency quota of every compute type the synthesized build projects use."""
    from tests.support.cdk_templates import STATEFUL, resources, synthesize, template

    stateful = template(synthesize(tmp_path), STATEFUL)
    types = {
        project["Properties"]["Environment"]["ComputeType"]
        for project in resources(stateful, "AWS::CodeBuild::Project").values()
    }
    assert types == set(COMPUTE_QUOTA)
    page = (DOCS / "deploy.md").read_text()
    rows = dict(
        re.findall(r"^\| `(Concurrently running builds for [^`]+)` \| (\d+) \|$", page, re.M)
    )
    assert rows == {COMPUTE_QUOTA[t]: "1" for t in types}
    loop = next(block for block in all_sh_blocks(DOCS / "deploy.md") if "codebuild" in block)
    for name in rows:
        assert f'"{name}"' in loop
    assert "CodeBuild quota for one Linux/Large and one Linux/Medium build" in README.read_text()


def test_readmes_figures_of_the_peer_are_its_committed_reports():
    """README's rows of typed-gguf serving the same GGUF (python -m evaluation --peer), against the
    held-out report each links to."""
    rows = re.findall(
        r"^\| ([^|]+), served by typed-gguf 0\.3\.0 \| \[its defaults\]\(([^)]+/report\.json)\) "
        r"\| its JSON answer cue, T = 1 \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$",
        README.read_text(),
        re.M,
    )
    assert len(rows) == 2
    for _, report_path, *figures in rows:
        report = held_out_report_of_row(report_path, figures)
        assert report["target"].startswith("typed-gguf 0.3.0")


def test_the_pages_name_the_built_in_readout_and_temperature_the_adapter_serves():
    from decision_adapter.calibration import BUILT_IN_TEMPERATURES, built_in_readout

    readout = built_in_readout("chat-template")
    said = f"`{readout}` at its own T = {BUILT_IN_TEMPERATURES[readout]:g}"
    assert said in " ".join((DOCS / "api.md").read_text().split())
    said = f"`{readout}` at T = {BUILT_IN_TEMPERATURES[readout]:g}"
    assert said in " ".join((DOCS / "scoring.md").read_text().split())


def test_operate_says_the_text_generation_queue_has_no_bound():
    """llama-server queues a request past its `parallel` slots without a limit or deadline;
    the page says so, and that the decision endpoints bound theirs."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "operate.md").read_text()
    (bullet,) = [
        part
        for part in text.split("\n- ")
        if part.startswith("**The text-generation endpoint's queue")
    ]
    flat = " ".join(bullet.split())
    assert "queue has no bound" in flat and "no length limit and no deadline" in flat
    assert "nothing answers 503 there" in flat and "InvokeEndpoint's 60 s" in flat
    assert "`maxQueue`" in flat
