"""The harness's exclusions ([tool.mutation.do_not_mutate]): the lines they name, and mutmut
leaving exactly those alone once the harness hands them over."""

from __future__ import annotations

import textwrap

from tests.mutation.harness import Exclusions, leave_alone, load_tool

SOURCE = textwrap.dedent(
    """\
    import argparse


    def build_parser():
        parser = argparse.ArgumentParser(
            prog="tool",
            description="what the tool does",
        )
        parser.add_argument(
            "--level",
            default=3,
            help="how far to go"
            " (default: 3)",
        )
        parser.add_argument("--quiet", action="store_true", help="say less")
        _stack_option(
            parser,
            "TOOL_STACK",
            "the stack to read",
        )
        return parser


    class Plan:
        def read(self, tokens):
            return tokens[1:] + [0]


    def kept(tokens):
        return tokens[1:] + [0]
    """
)
RULES = Exclusions(
    functions=frozenset({"tool.py::Plan.read", "tool.py::gone"}),
    arguments={
        "ArgumentParser": frozenset({"description"}),
        "add_argument": frozenset({"help"}),
        "_stack_option": frozenset({2}),
    },
)


def test_the_rules_name_the_lines_of_help_texts_and_whole_functions():
    texts, functions, notes = RULES.lines("tool.py", SOURCE)
    lines = SOURCE.splitlines()
    assert sorted(lines[n - 1].strip() for n in texts) == [
        '" (default: 3)",',
        '"the stack to read",',
        'description="what the tool does",',
        'help="how far to go"',
    ]
    # Plan.read, header and body (not `kept`, the same body in another function)
    assert [lines[n - 1].strip() for n in sorted(functions)] == [
        "def read(self, tokens):",
        "return tokens[1:] + [0]",
    ]
    assert lines[min(functions) - 2].strip() == "class Plan:"
    # On one line with the option's name a help text cannot be singled out: it stays mutated.
    assert notes == ["tool.py:15: shares its line with other code"]


def test_a_function_named_but_not_defined_is_reported(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tool.py").write_text(SOURCE)
    assert RULES.missing(["tool.py"]) == ["tool.py::gone"]
    assert RULES.names(["elsewhere"]) == []


def test_mutmut_leaves_alone_what_the_rules_name_and_mutates_the_rest(monkeypatch):
    import libcst as cst
    from mutmut.mutation import file_mutation

    def strings_mutated(result) -> set[str]:
        _, mutations, _, _ = result
        return {
            cst.Module([]).code_for_node(m.original_node)
            for m in mutations
            if isinstance(m.original_node, cst.SimpleString)
        }

    # leave_alone patches mutmut's module; monkeypatch puts the original back afterwards.
    monkeypatch.setattr(file_mutation, "get_ignored_lines", file_mutation.get_ignored_lines)
    before = file_mutation.create_mutations("tool.py", SOURCE)
    leave_alone(RULES)
    after = file_mutation.create_mutations("tool.py", SOURCE)

    assert strings_mutated(before) - strings_mutated(after) == {
        '"what the tool does"',
        '"how far to go"',
        '" (default: 3)"',
        '"the stack to read"',
    }
    # The option names and values still are, and the help text on a line with other code.
    assert {'"tool"', '"--level"', '"TOOL_STACK"', '"say less"'} <= strings_mutated(after)
    assert (before[3], after[3]) == (set(), {"read"})  # no mutant, no trampoline
    # `kept` has the same body as Plan.read and is still mutated.
    assert any(m.contained_by_top_level_function.name.value == "kept" for m in after[1])
    assert not any(m.contained_by_top_level_function.name.value == "read" for m in after[1])


def test_the_configured_rules_load_from_pyproject():
    rules = Exclusions.from_config(load_tool()["mutation"]["do_not_mutate"])
    assert "container/decision_adapter/scoring/score.py::score" in rules.functions
    assert rules.arguments["add_argument"] == {"help", "metavar"}
    assert rules.missing(["container/decision_adapter/scoring/score.py"]) == []
