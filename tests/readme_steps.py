"""README's shell steps as a user copies them: the ```sh blocks of one section, and the
commands in a block (continuation lines joined)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^( *)```sh\n(.*?)^\1```", re.S | re.M)


def section(heading: str) -> str:
    """The text under `### heading` (or `## heading`) up to the next heading of that level."""
    text = README.read_text()
    level = "##" if f"\n## {heading}\n" in text else "###"
    start = text.index(f"\n{level} {heading}\n")
    end = text.find(f"\n{level} ", start + 1)
    return text[start : end if end != -1 else len(text)]


def sh_blocks(heading: str) -> list[str]:
    """The section's ```sh blocks, each dedented to how a user pastes it."""
    return [textwrap.dedent(match[2]) for match in _BLOCK.finditer(section(heading))]


def block_with(heading: str, needle: str) -> str:
    """The one ```sh block of the section that contains `needle`."""
    (found,) = [block for block in sh_blocks(heading) if needle in block]
    return found


def commands(block: str) -> list[str]:
    """The block's commands, a line continued with a trailing backslash joined to the next;
    comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = [re.sub(r"(^|\s+)#(?![{\"']).*$", "", line).strip() for line in joined.splitlines()]
    return [line for line in lines if line]
