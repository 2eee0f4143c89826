"""The reference pages (README.md and docs/) say what is true now: no date outside a generated
block, no "(before: ...)" aside, and no talk of runs or of the issue that asked ("earlier run",
"this run", "the issue"). What changed, and what it measured then, goes to CHANGELOG.md; a
result's own file name may carry its date."""

from __future__ import annotations

import re

import pytest

from docgen.blocks import outside_blocks
from tests.support.readme_steps import DOCS, README

# A date standing alone, not part of a file name such as bench/results/2026-12-03-x86_64.json.
DATE = re.compile(r"(?<![\w/-])20\d\d-\d\d-\d\d(?![\w-])")
# Blocks other tools write between their own markers (research.builds --report).
TOOL_BLOCK = re.compile(r"<!-- ([\w. -]+): begin -->.*?<!-- \1: end -->", re.DOTALL)
PAGES = [README, *sorted(DOCS.glob("*.md"))]
# Words that tell a page's history or the session that wrote it, not what is true now.
HISTORY = re.compile(r"\b(?:earlier run|this run|the issue)\b", re.IGNORECASE)
# Pages still carrying such words while they are rewritten elsewhere: each is expected to fail
# the rule (strict: once a page passes, take it off this list).


def written(text: str) -> str:
    """What a person wrote on a page: the generated blocks left out."""
    return TOOL_BLOCK.sub("", outside_blocks(text))


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_a_reference_page_carries_no_dated_history(page):
    text = written(page.read_text(encoding="utf-8"))
    assert DATE.findall(text) == [], f"{page.name}: a date outside a generated block"
    assert "(before:" not in text, f"{page.name}: history belongs in CHANGELOG.md"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_a_reference_page_speaks_of_no_run_or_issue(page):
    # Whitespace flattened, so words broken across two lines are seen too.
    text = " ".join(written(page.read_text(encoding="utf-8")).split())
    found = [text[max(0, m.start() - 40) : m.end() + 40] for m in HISTORY.finditer(text)]
    assert found == [], f"{page.name}: say what is true now; history goes to CHANGELOG.md"


def test_the_run_rule_sees_the_words_in_any_case_but_not_in_a_generated_block():
    generated = "<!-- BEGIN GENERATED t: x -->\nAn earlier run\n<!-- END GENERATED t -->\n"
    assert not HISTORY.search(written(generated))
    for said in ("An Earlier Run measured", "in this run", "as THE ISSUE asked"):
        assert HISTORY.search(" ".join(written(said).split()))
    assert not HISTORY.search("a rerun this runner issues")


def test_the_rule_sees_a_date_in_prose_but_not_in_a_generated_block_or_a_file_name():
    generated = "<!-- BEGIN GENERATED t: x -->\nMeasured 2026-12-03\n<!-- END GENERATED t -->\n"
    tool = (
        "<!-- research.builds report: begin -->\n2026-12-03\n<!-- research.builds report: end -->\n"
    )
    path = "see bench/results/2026-12-03-x86_64-2cpu.json\n"
    assert DATE.findall(written(generated + tool + path)) == []
    assert DATE.findall(written("Measured on 2026-12-03 here.\n")) == ["2026-12-03"]
