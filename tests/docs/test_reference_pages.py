"""The reference pages (README.md and docs/) say what is true now: no date outside a generated
block and no "(before: ...)" aside. What changed, and what it measured then, goes to
CHANGELOG.md; a result's own file name may carry its date."""

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


def written(text: str) -> str:
    """What a person wrote on a page: the generated blocks left out."""
    return TOOL_BLOCK.sub("", outside_blocks(text))


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_a_reference_page_carries_no_dated_history(page):
    text = written(page.read_text(encoding="utf-8"))
    assert DATE.findall(text) == [], f"{page.name}: a date outside a generated block"
    assert "(before:" not in text, f"{page.name}: history belongs in CHANGELOG.md"


def test_the_rule_sees_a_date_in_prose_but_not_in_a_generated_block_or_a_file_name():
    generated = "<!-- BEGIN GENERATED t: x -->\nMeasured 2026-12-03\n<!-- END GENERATED t -->\n"
    tool = (
        "<!-- research.builds report: begin -->\n2026-12-03\n<!-- research.builds report: end -->\n"
    )
    path = "see bench/results/2026-12-03-x86_64-2cpu.json\n"
    assert DATE.findall(written(generated + tool + path)) == []
    assert DATE.findall(written("Measured on 2026-12-03 here.\n")) == ["2026-12-03"]
