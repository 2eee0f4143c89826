"""The product's floor plan has no loops: no module imports, directly or through others, a
module that imports it back. Read from the source with ast, so an import inside a function
(the usual way a loop is hidden) counts as much as one at the top."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Package roots as Python sees them: the adapter lives under container/ (its PYTHONPATH entry).
PACKAGES = {
    "decision_adapter": ROOT / "container" / "decision_adapter",
    "model_manifest": ROOT / "model_manifest",
    "model_packaging": ROOT / "model_packaging",
    "ops": ROOT / "ops",
    "stacks": ROOT / "stacks",
    "bench": ROOT / "bench",
    "research": ROOT / "research",
    "launcher": ROOT / "launcher",
}


def _module_name(package: str, path: Path) -> str:
    parts = path.relative_to(PACKAGES[package]).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((package, *parts))


def _modules() -> dict[str, Path]:
    return {
        _module_name(package, path): path
        for package, root in PACKAGES.items()
        for path in sorted(root.rglob("*.py"))
    }


def _imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The product modules `name` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` imports the module pkg.mod where one exists.
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {target for target in targets if target in known}
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, set(modules)) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_product_code_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    # cli imports its subcommands lazily, inside functions; the walk must still see it.
    assert "ops.codebuild" in graph["ops.cli"]
    assert "decision_adapter.model.engine" in graph["decision_adapter.service.decision_service"]


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_cycles_finds_loops_of_any_length(graph, expected):
    assert cycles(graph) == expected
