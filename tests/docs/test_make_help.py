"""`make` alone is harmless: its default goal, `help`, lists every documented target with its
one-line description (the `## ` comment on its rule line) and runs nothing else."""

from __future__ import annotations

import re

from tests.support.make_dry_run import ROOT, make_output, printed_lines


def test_make_alone_lists_the_targets_with_their_descriptions():
    listed = dict(re.findall(r"^  ([a-z][a-z-]*) +(\S.*)$", make_output(), re.M))
    assert {"run", "test", "quick", "lint", "deploy", "help"} <= set(listed)
    assert listed["run"].startswith("Serve the adapter locally")
    assert listed["test"].startswith("The whole suite")


def test_every_target_with_a_description_is_listed_once():
    text = (ROOT / "Makefile").read_text()
    described = re.findall(r"^([a-z][a-z-]*):[^=\n]*## ", text, re.M)
    listed = re.findall(r"^  ([a-z][a-z-]*) ", make_output(), re.M)
    assert listed == described
    assert len(set(described)) == len(described)


def test_make_alone_runs_nothing_but_the_listing():
    # `make -n -B`: what `make` would run, every prerequisite taken as out of date. Only the
    # help recipe's two lines: no venv, no install, no build.
    printed = printed_lines()
    assert len(printed) == 2
    assert printed[0].startswith("echo ") and printed[1].startswith("awk ")
