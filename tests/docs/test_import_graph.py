"""The product's floor plan: no loops (no module imports, directly or through others, a module
that imports it back), the adapter's layers import only downwards, ops' subcommands import
none of one another, and the product never imports the lab (docs/architecture.md).
Read from the source with ast, so an import inside a function (the usual way a loop or a
crossing is hidden) counts as much as one at the top."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Package roots as Python sees them: the adapter lives under container/ (its PYTHONPATH entry).
PACKAGES = {
    "decision_adapter": ROOT / "container" / "decision_adapter",
    "model_manifest": ROOT / "model_manifest",
    "model_packaging": ROOT / "model_packaging",
    "ops": ROOT / "ops",
    "stacks": ROOT / "stacks",
    "bench": ROOT / "bench",
    "evaluation": ROOT / "evaluation",
    "research": ROOT / "research",
    "launcher": ROOT / "launcher",
    "docgen": ROOT / "docgen",
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


def _imported(name: str, path: Path, known: set[str] | None) -> set[str]:
    """The product modules `name` imports anywhere in its source (`known` None: every module
    it names, the third-party ones too)."""
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
        found |= {target for target in targets if known is None or target in known}
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
    # A subcommand imports the work it does lazily, inside its handler; the walk must see it.
    assert "ops.codebuild" in graph["ops.commands.build"]
    assert "decision_adapter.model.engine" in graph["decision_adapter.service.decision_service"]


# The adapter's layers (its subpackages), each with the layers it may import besides its own
# and the modules at the package's top (settings, errors, metrics, contract, ...), which import
# only one another. The HTTP layer reaches the model only through the service.
ADAPTER = "decision_adapter"
LAYERS: dict[str, set[str]] = {
    "model": set(),
    "scoring": {"model"},
    "service": {"scoring", "model"},
    "formats": set(),
    "http": {"formats", "service"},
    "__main__": {"http"},  # the entry point starts the server
}
# The wire formats depend on the contract alone: what the service takes and returns, the errors
# it raises, and the defaults it fills in; never the settings, logs or metrics.
FORMATS_TOP = {"contract", "errors", "sampling"}
# Only the model layer talks to llama.cpp.
NATIVE = {"llama_cpp": "model"}


def layer_of(module: str) -> str | None:
    """The adapter layer `module` is in, "top" for the modules at the package's top, None
    outside the adapter."""
    parts = module.split(".")
    if parts[0] != ADAPTER:
        return None
    if len(parts) == 1:
        return "top"
    return parts[1] if parts[1] in LAYERS else "top"


def crossings(graph: dict[str, set[str]]) -> list[str]:
    """Every import of the adapter's that crosses a layer rule, as "importer -> imported"."""
    found = []
    for module, imported in sorted(graph.items()):
        layer = layer_of(module)
        if layer is None:
            continue
        for target in sorted(imported):
            target_layer = layer_of(target)
            # the package itself holds only its version; `from .. import x` names it too
            if target_layer is None or target_layer == layer or target == ADAPTER:
                continue
            if target_layer == "top":
                allowed = layer != "formats" or target.split(".")[1] in FORMATS_TOP
            else:
                allowed = layer != "top" and target_layer in LAYERS[layer]
            if not allowed:
                found.append(f"{module} -> {target}")
    return found


def native_crossings() -> list[str]:
    found = []
    for name, path in _modules().items():
        if layer_of(name) is None:
            continue
        for target in _imported(name, path, None):
            owner = NATIVE.get(target.split(".")[0])
            if owner is not None and layer_of(name) != owner:
                found.append(f"{name} -> {target}")
    return sorted(found)


def test_the_adapter_imports_only_downwards():
    assert crossings(import_graph()) == []


def test_only_the_model_layer_imports_llama_cpp():
    assert native_crossings() == []
    # and it does: the rule is about a real import, read where it is
    graph = {name: _imported(name, path, None) for name, path in _modules().items()}
    assert "llama_cpp" in graph["decision_adapter.model.engine"]


def test_every_adapter_module_is_in_a_layer_or_at_the_top():
    root = PACKAGES[ADAPTER]
    folders = {path.parent.name for path in root.rglob("*.py") if path.parent != root}
    assert folders <= set(LAYERS), "a new subpackage needs its place in LAYERS"


# ops' subcommands live in ops/commands/, a module each (its parser and its handler), which
# ops.cli alone assembles. What two subcommands share lives outside that package (ops.common,
# or the module of the work they do): no module imports a subcommand's but cli, and a
# subcommand does not reach back into cli.
OPS_CLI = "ops.cli"
OPS_COMMANDS = "ops.commands."


def command_crossings(graph: dict[str, set[str]]) -> list[str]:
    """Every import that crosses the subcommands' rule, as "importer -> imported"."""
    found = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            into_a_command = target.startswith(OPS_COMMANDS) and module != OPS_CLI
            back_into_cli = module.startswith(OPS_COMMANDS) and target == OPS_CLI
            if into_a_command or back_into_cli:
                found.append(f"{module} -> {target}")
    return found


def test_ops_subcommands_share_only_through_modules_of_their_own():
    graph = import_graph()
    assert command_crossings(graph) == []
    # and cli does assemble them: the rule is about the real layout
    commands = {name for name in graph if name.startswith(OPS_COMMANDS)}
    assert len(commands) >= 10 and commands <= graph[OPS_CLI]


# What serves, deploys or packages a model never imports the lab or the tools beside it: the
# benchmark, the studies, the evaluation tool (which reads the product, never the reverse) and the
# tests. A shipped image or CDK app then carries none of them.
PRODUCT = ("decision_adapter", "ops", "stacks", "model_packaging", "model_manifest")
LAB = ("bench", "research", "evaluation", "tests")


def lab_crossings(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a product module's from the lab, as "importer -> imported"."""
    return [
        f"{module} -> {target}"
        for module, imported in sorted(graph.items())
        if module.split(".")[0] in PRODUCT
        for target in sorted(imported)
        if target.split(".")[0] in LAB
    ]


def test_the_product_never_imports_the_lab():
    # every module each names, so `tests`, outside PACKAGES, is seen too
    graph = {name: _imported(name, path, None) for name, path in _modules().items()}
    assert lab_crossings(graph) == []
    # and the lab does lean on the product: the rule is about the real layout
    assert "ops.workloads" in graph["bench.workloads"]
    assert "ops.transports" in graph["evaluation.cli"]


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"bench.workloads": {"ops.workloads"}}, []),
        ({"evaluation.cli": {"ops.retry"}}, []),
        ({"ops.measure": {"bench.workloads"}}, ["ops.measure -> bench.workloads"]),
        ({"stacks.app": {"evaluation"}}, ["stacks.app -> evaluation"]),
        (
            {"decision_adapter.calibration": {"research.readout_study.study"}},
            ["decision_adapter.calibration -> research.readout_study.study"],
        ),
        (
            {"model_packaging.spec": {"tests.support.bodies"}},
            ["model_packaging.spec -> tests.support.bodies"],
        ),
    ],
)
def test_lab_crossings_finds_the_product_importing_the_lab(graph, expected):
    assert lab_crossings(graph) == expected


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"ops.cli": {"ops.commands.build"}}, []),
        ({"ops.commands.build": {"ops.common", "ops.codebuild"}}, []),
        (
            {"ops.commands.submit": {"ops.commands.batch"}},
            ["ops.commands.submit -> ops.commands.batch"],
        ),
        (
            {"ops.background": {"ops.commands.submit"}},
            ["ops.background -> ops.commands.submit"],
        ),
        ({"ops.commands.load": {"ops.cli"}}, ["ops.commands.load -> ops.cli"]),
    ],
)
def test_command_crossings_finds_a_subcommand_imported_or_cli_reached_back(graph, expected):
    assert command_crossings(graph) == expected


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        # downwards: allowed
        ({"decision_adapter.http.app": {"decision_adapter.service.x"}}, []),
        ({"decision_adapter.scoring.s": {"decision_adapter.model.engine"}}, []),
        ({"decision_adapter.formats.f": {"decision_adapter.contract"}}, []),
        ({"decision_adapter.model.m": {"decision_adapter.errors"}}, []),
        # past the service, upwards, sideways, or from the top down: refused
        (
            {"decision_adapter.http.app": {"decision_adapter.model.engine"}},
            ["decision_adapter.http.app -> decision_adapter.model.engine"],
        ),
        (
            {"decision_adapter.model.m": {"decision_adapter.scoring.s"}},
            ["decision_adapter.model.m -> decision_adapter.scoring.s"],
        ),
        (
            {"decision_adapter.formats.f": {"decision_adapter.service.admission"}},
            ["decision_adapter.formats.f -> decision_adapter.service.admission"],
        ),
        (
            {"decision_adapter.formats.f": {"decision_adapter.settings"}},
            ["decision_adapter.formats.f -> decision_adapter.settings"],
        ),
        (
            {"decision_adapter.contract": {"decision_adapter.model.engine"}},
            ["decision_adapter.contract -> decision_adapter.model.engine"],
        ),
    ],
)
def test_crossings_finds_imports_across_a_rule(graph, expected):
    assert crossings(graph) == expected


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
