"""Which page holds which generated block."""

from __future__ import annotations

from . import settings_page
from .blocks import Block

PAGES: dict[str, list[Block]] = {
    "docs/configuration.md": [Block("settings", settings_page.SOURCE, settings_page.render)],
}
