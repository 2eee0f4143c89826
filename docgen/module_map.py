"""The module maps on docs/architecture.md (the adapter, layer by layer) and tests/README.md (the
suite's shared helpers), each line the first sentence of the module's own docstring: a module
added without a docstring, or missing from a page, fails tests/docs/test_generated_docs.py until
`make docs` writes it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .blocks import ROOT

ADAPTER = ROOT / "container" / "decision_adapter"
SUPPORT = ROOT / "tests" / "support"
# The adapter's layers, bottom up (tests/docs/test_import_graph.py holds their rules).
LAYERS = ("", "model", "scoring", "service", "formats", "http")
MIN_WORDS = 4  # a shorter opening ("Calibration:") is a heading, not the sentence
_SENTENCE_END = re.compile(r"(?<![.][a-z])(?<!e\.g)(?<!i\.e)[.:;](\s|$)")


def summary(path: Path) -> str:
    """The first sentence of the module's docstring, on one line."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not docstring:
        raise ValueError(f"{path.relative_to(ROOT)} has no docstring: the module map needs one")
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    sentence = paragraph
    for end in _SENTENCE_END.finditer(paragraph):
        if len(paragraph[: end.start()].split()) >= MIN_WORDS:  # "SIGTERM: ..." goes on
            sentence = paragraph[: end.start()]
            break
    return sentence.replace("|", "\\|")


def _modules(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")


def render_adapter() -> str:
    rows = ["| layer | module | what it is |", "|---|---|---|"]
    for layer in LAYERS:
        for path in _modules(ADAPTER / layer):
            rows.append(f"| {layer or 'top'} | `{path.name}` | {summary(path)} |")
    return "\n".join(rows)


def render_support() -> str:
    rows = ["| module | what it gives the tests |", "|---|---|"]
    rows += [f"| `{path.name}` | {summary(path)} |" for path in _modules(SUPPORT)]
    return "\n".join(rows)
