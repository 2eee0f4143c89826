"""The generated reference blocks (docgen) equal what their sources render now: a setting or a
context key changed without `python -m docgen` fails here, naming the page."""

from __future__ import annotations

import pytest
from decision_adapter.settings import Settings

from docgen.__main__ import main, rendered
from docgen.blocks import ROOT, Block, MissingBlock, outside_blocks, with_block
from docgen.pages import PAGES
from docgen.tables import constraints


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_page_equals_what_its_sources_render(page):
    assert rendered(page) == (ROOT / page).read_text(
        encoding="utf-8"
    ), f"{page} differs from its sources: run `python -m docgen`"


def test_check_mode_reports_a_stale_page_and_changes_nothing(monkeypatch, tmp_path, capsys):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    stale = "# Page\n\n<!-- BEGIN GENERATED t: old -->\nold\n<!-- END GENERATED t -->\n"
    page.write_text(stale)
    monkeypatch.setattr("docgen.__main__.ROOT", tmp_path)
    monkeypatch.setattr(
        "docgen.__main__.PAGES", {"docs/page.md": [Block("t", "s.py", lambda: "new")]}
    )
    assert main(["--check"]) == 1
    assert page.read_text() == stale
    assert "docs/page.md: differs from its sources" in capsys.readouterr().out
    assert main([]) == 0
    assert "\nnew\n<!-- END GENERATED t -->" in page.read_text()
    assert main(["--check"]) == 0


def test_a_page_without_its_markers_is_refused():
    with pytest.raises(MissingBlock):
        with_block("# no markers\n", Block("t", "s.py", lambda: "x"))


def test_outside_blocks_keeps_only_what_a_person_wrote():
    text = "a\n" + with_block(
        "<!-- BEGIN GENERATED t: x -->\n<!-- END GENERATED t -->\n",
        Block("t", "s", lambda: "2026-01-01"),
    )
    assert outside_blocks(text) == "a\n\n"


def test_every_setting_has_a_description_and_its_range_is_shown():
    assert all(field.description for field in Settings.model_fields.values())
    port = Settings.model_fields["port"]
    assert constraints(port.metadata) == ["1 to 65,535"]
    deadline = Settings.model_fields["chat_deadline_s"]
    assert constraints(deadline.metadata) == ["over 0, at most 3600"]
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert "| `DECISION_CHAT_DEADLINE_S` | `50` | number; over 0, at most 3600 |" in page


def test_the_context_page_has_a_table_per_section_and_the_keys_no_page_had():
    page = (ROOT / "docs" / "context.md").read_text()
    for section in ("Top level", "`dlc`", "`builds`", "`decisionGpuEndpoint.autoscaling`"):
        assert f"\n## {section}\n" in page
    for key in ("stackPrefix", "timeoutMinutes", "logRetentionDays", "repository", "cpuDigest"):
        assert f"\n| `{key}` |" in page


def test_the_error_table_names_every_error_type_the_adapter_answers_with():
    import re

    from docgen.errors_page import ERRORS

    source = "\n".join(
        path.read_text(encoding="utf-8")
        for path in (ROOT / "container" / "decision_adapter").rglob("*.py")
    )
    # error_type="x", error_type: str = "x", error_type = "x" (a class's), "error_type": "x"
    named = set(re.findall(r'(?<![\w])"?error_type"?(?::\s*str)?\s*[=:]\s*"([a-z_]+)"', source))
    assert {"invalid_json", "jsonlines_timeout", "invalid_request", "validation_error"} <= named
    listed = {kind.error_type for kind in ERRORS}
    assert named - listed == set(), "an error type the table lacks"
    # and none the adapter no longer answers with: each is a string in its source
    assert {kind for kind in listed if f'"{kind}"' not in source} == set()


def test_the_api_page_has_a_section_per_route():
    from decision_adapter.http.app import ROUTES

    page = (ROOT / "docs" / "api.md").read_text()
    for route in ROUTES:
        for method in sorted((route.methods or set()) - {"HEAD"}):
            assert f"\n## `{method} {route.path}`\n" in page, (method, route.path)
    # A request field's row: its type, default, constraints (a validator's rule) and meaning.
    assert (
        "| `id` | text | required | not blank, and one line: no control or line-separator "
        "characters | The option's name:" in page
    )
    assert "| `temperature` | number | `0.8` | 0 to 2 | The sampling temperature;" in page


def test_a_response_body_holds_exactly_its_models_fields():
    from decision_adapter.formats.base import response_body
    from pydantic import BaseModel, Field

    class Body(BaseModel):
        a: int = Field(description="always sent")
        b: int | None = Field(None, description="sent where it applies")

    assert list(response_body(Body, b=2, a=1).items()) == [("a", 1), ("b", 2)]
    assert response_body(Body, a=1) == {"a": 1}
    with pytest.raises(TypeError, match="undeclared"):
        response_body(Body, a=1, c=3)
    with pytest.raises(TypeError, match="missing"):
        response_body(Body, b=2)
