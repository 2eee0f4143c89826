"""How long a page's sentences are: the prose a person wrote on a Markdown page, cut into
sentences and counted in words, so a test can hold a page to a mean.

What counts as prose:

- Left out: generated blocks (between `<!-- BEGIN GENERATED` and `<!-- END GENERATED`
  markers) and other HTML comments, fenced code blocks, tables (lines that start with `|`)
  and headings (lines that start with `#`).
- Inline code counts as one word, whatever it holds; a link counts as its text; emphasis
  marks (`**`, `*`, `_` around words) are dropped.
- A paragraph ends at a blank line, and each list item (`- `, `* `, `1. `) is a paragraph of
  its own, so a sentence never runs from one item into the next.
- A sentence ends at `.`, `!` or `?` (a closing bracket or quote may follow) followed by
  space and then a capital letter or a backtick. So "e.g. nightly" and "0.7 x" do not end
  one; a paragraph's end always does.
- A word is a run of non-space characters holding a letter or a digit: a symbol standing
  alone (`=`, `-`, `/`) is not one.

`python -m docgen.prose PAGE...` prints each page's sentences, words and mean.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from docgen.blocks import outside_blocks

_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
# A line that opens or closes a fenced code block, indented or not.
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_INLINE_CODE = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_REFERENCE_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
_EMPHASIS = re.compile(r"(\*\*|__|(?<!\w)[*_]|[*_](?!\w))")
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])[ \t]+", re.M)
_SENTENCE_END = re.compile(r"(?<=[.!?])[)\]\"']*\s+(?=[A-Z`])")
_WORD = re.compile(r"\S*[A-Za-z0-9]\S*")
# What stands for an inline code span while sentences are cut: one word, starting with a
# backtick so that a sentence may begin with it.
CODE = "`code`"


def prose(markdown: str) -> list[str]:
    """The page's paragraphs as counted: prose only, each flattened to one line."""
    text = _COMMENT.sub("", outside_blocks(markdown))
    kept, fence = [], ""
    for line in text.split("\n"):
        opening = _FENCE.match(line)
        if fence:
            if opening and opening[1].startswith(fence):
                fence = ""
            kept.append("")
        elif opening:
            fence = opening[1]
            kept.append("")
        elif not line.lstrip().startswith(("|", "#")):
            kept.append(line)
    text = "\n".join(kept)
    text = _INLINE_CODE.sub(CODE, text)
    text = _IMAGE_OR_LINK.sub(r"\1", text)
    text = _REFERENCE_LINK.sub(r"\1", text)
    text = _EMPHASIS.sub("", text)
    text = _LIST_ITEM.sub("\n\n", text)
    paragraphs = (" ".join(block.split()) for block in re.split(r"\n[ \t]*\n", text))
    return [paragraph for paragraph in paragraphs if words(paragraph)]


def sentences(markdown: str) -> list[str]:
    """The page's sentences, in order."""
    found = []
    for paragraph in prose(markdown):
        found += [part for part in _SENTENCE_END.split(paragraph) if words(part)]
    return found


def words(sentence: str) -> int:
    """The words of a sentence: runs of non-space characters holding a letter or digit."""
    return len(_WORD.findall(sentence))


@dataclass(frozen=True)
class Count:
    sentences: int
    words: int

    @property
    def mean(self) -> float:
        """Words per sentence (0 for a page without prose)."""
        return self.words / self.sentences if self.sentences else 0.0


def count(markdown: str) -> Count:
    """Sentences and words of a page's prose."""
    found = sentences(markdown)
    return Count(len(found), sum(words(sentence) for sentence in found))


def main(paths: list[str]) -> int:
    for path in paths:
        counted = count(Path(path).read_text(encoding="utf-8"))
        print(f"{path}: {counted.sentences} sentences, {counted.words} words, {counted.mean:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
