"""`python -m docgen`: rewrite every generated block; `--check`: list the pages whose blocks
differ from their sources, and exit 1 if any does."""

from __future__ import annotations

import argparse
import sys

from .blocks import ROOT, with_block
from .pages import PAGES


def rendered(page: str) -> str:
    text = (ROOT / page).read_text(encoding="utf-8")
    for block in PAGES[page]:
        text = with_block(text, block)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        text = rendered(page)
        if text != (ROOT / page).read_text(encoding="utf-8"):
            stale.append(page)
            if not args.check:
                (ROOT / page).write_text(text, encoding="utf-8")
    for page in stale:
        print(f"{page}: {'differs from its sources' if args.check else 'rewritten'}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
