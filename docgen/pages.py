"""Which page holds which generated block."""

from __future__ import annotations

from . import api_page, bench_page, context_page, errors_page, module_map, settings_page
from .blocks import Block

PAGES: dict[str, list[Block]] = {
    "docs/configuration.md": [Block("settings", settings_page.SOURCE, settings_page.render)],
    "docs/architecture.md": [
        Block("module-map", "each adapter module's docstring", module_map.render_adapter)
    ],
    "tests/README.md": [
        Block("support-map", "each tests/support module's docstring", module_map.render_support)
    ],
    "docs/context.md": [Block("context", context_page.SOURCE, context_page.render)],
    "docs/benchmarks.md": [
        Block("bench", bench_page.SOURCE, bench_page.render),
        Block(
            "decision-concurrency",
            bench_page.CONCURRENCY_SOURCE,
            bench_page.render_decision_concurrency,
        ),
        Block(
            "chat-concurrency", bench_page.CONCURRENCY_SOURCE, bench_page.render_chat_concurrency
        ),
        Block(
            "decision-models",
            bench_page.DECISION_MODELS_SOURCE,
            bench_page.render_decision_models,
        ),
    ],
    "docs/api.md": [
        *api_page.BLOCKS,
        Block("errors", errors_page.SOURCE, errors_page.render),
    ],
}
