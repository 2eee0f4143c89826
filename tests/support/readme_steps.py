"""The shell steps of README.md and docs/ as a user copies them: the ```sh blocks of one
section, and the commands in a block (continuation lines joined)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
_BLOCK = re.compile(r"^( *)```sh\n(.*?)^\1```", re.S | re.M)
# README's steps; docs/deploy.md says what each does, the GPU step and the quotas.
DEPLOY = "Deploy to AWS"
FIRST_DEPLOYMENT = "First deployment in an account"
DEPLOY_PAGE = DOCS / "deploy.md"


def section(heading: str, page: Path = README) -> str:
    """The text under `## heading` (or `### heading`) of a page up to the next heading of that
    level or above (a level-one heading is only the page title)."""
    text = page.read_text()
    level = "##" if f"\n## {heading}\n" in text else "###"
    start = text.index(f"\n{level} {heading}\n")
    ends = [text.find(f"\n{marks} ", start + 1) for marks in ("##", level)]
    ends = [end for end in ends if end != -1]
    return text[start : min(ends) if ends else len(text)]


def sh_blocks(heading: str, page: Path = README) -> list[str]:
    """The section's ```sh blocks, each dedented to how a user pastes it."""
    return [textwrap.dedent(match[2]) for match in _BLOCK.finditer(section(heading, page))]


def all_sh_blocks(page: Path = README) -> list[str]:
    """Every ```sh block of a page, dedented."""
    return [textwrap.dedent(match[2]) for match in _BLOCK.finditer(page.read_text())]


def block_with(heading: str, needle: str, page: Path = README) -> str:
    """The one ```sh block of the section that contains `needle`."""
    (found,) = [block for block in sh_blocks(heading, page) if needle in block]
    return found


def commands(block: str) -> list[str]:
    """The block's commands, a line continued with a trailing backslash joined to the next;
    comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = [re.sub(r"(^|\s+)#(?![{\"']).*$", "", line).strip() for line in joined.splitlines()]
    return [line for line in lines if line]
