"""make mutation: run mutmut over chosen module groups and record what the tests kill.

    python -m tests.mutation.harness [GROUP ...] [--max-children N]

Groups and their test files live in pyproject.toml ([tool.mutation.groups.*]); without
arguments every group runs. mutants/ is rebuilt from scratch (mutmut keeps old verdicts
otherwise, even after tests changed), only the chosen groups' tests run, mutmut's own output
goes to mutants/mutmut.log, and the counts, score and survivors per group are merged into
tests/mutation/results.json. Survivors that tests/mutation/SURVIVORS.md does not name are
printed: each needs a test, or a line there saying why it is equivalent. What is never mutated
(whole functions, the texts of --help) is a rule in pyproject.toml ([tool.mutation.do_not_mutate],
`Exclusions` below), handed to mutmut beside its `# pragma: no mutate` comments.

After a run, `mutmut show NAME` prints one mutant's diff; `mutmut run NAME` reruns it.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import sys
import threading
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RESULTS = HERE / "results.json"
SURVIVORS = HERE / "SURVIVORS.md"
KILLED = {"killed", "timeout", "caught by type check"}
STALL_SECONDS = 300  # far past any mutant's tests here; a worker still running is deadlocked


def load_tool() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]


def load_groups() -> dict[str, dict]:
    tool = load_tool()
    groups = tool["mutation"]["groups"]
    # A bare `mutmut run` / `mutmut show` reads [tool.mutmut]: keep it the union of the groups.
    union = (
        [s for g in groups.values() for s in g["sources"]],
        [t for g in groups.values() for t in g["tests"]],
    )
    plain = (tool["mutmut"]["source_paths"], tool["mutmut"]["pytest_add_cli_args_test_selection"])
    if plain != union:
        print("note: [tool.mutmut] is not the union of [tool.mutation.groups]", file=sys.stderr)
    return groups


def import_from(roots: list[str]) -> None:
    """Let mutants live under a folder that is not their import root (container/decision_adapter
    is imported as decision_adapter): mutmut names a mutant by its path, the trampoline by the
    module it runs in, and the two must agree; the mutated copy must also shadow the original."""
    import mutmut.__main__ as mutmut_main
    from mutmut.utils import file_utils, format_utils

    strip_prefix = format_utils.strip_prefix

    def strip_roots(name: str, prefix: str) -> str:
        name = strip_prefix(name, prefix=prefix)
        for root in roots:
            name = strip_prefix(name, prefix=root + ".")
        return name

    format_utils.strip_prefix = strip_roots
    setup_source_paths = file_utils.setup_source_paths

    def mutated_first() -> None:
        setup_source_paths()
        originals = {(ROOT / root).resolve() for root in roots}
        sys.path[:] = [p for p in sys.path if Path(p).resolve() not in originals]
        for root in roots:
            sys.path.insert(0, str(ROOT / "mutants" / root))

    mutmut_main.setup_source_paths = mutated_first


def configure(groups: dict[str, dict], rules: Exclusions) -> None:
    """Point mutmut at the chosen groups' sources and tests (its config has no CLI flags)."""
    from mutmut import configuration
    from mutmut.configuration import ProcessIsolation

    import_from(sorted({g["import_root"] for g in groups.values() if "import_root" in g}))
    leave_alone(rules)

    base = configuration._load_config()
    sources = [Path(s) for g in groups.values() for s in g["sources"]]
    # A group whose tests start threads that a plain fork cannot copy (llama.cpp's thread pool)
    # asks for "forkserver": workers then fork from a process that never ran a test.
    isolation = {g.get("process_isolation", "fork") for g in groups.values()}
    tests = [t for g in groups.values() for t in g["tests"]]
    configuration._config = dataclasses.replace(
        base,
        source_paths=sources,
        resolved_mutated_source_paths=[ROOT / "mutants" / s for s in sources],
        pytest_add_cli_args_test_selection=tests,
        # One pytest command line serves the whole run: a group's pytest_args (the adapter's
        # `-m "not real_model"`) apply to the other groups run with it, whose tests use no model.
        pytest_add_cli_args=[
            *base.pytest_add_cli_args,
            *(a for g in groups.values() for a in g.get("pytest_args", [])),
        ],
        process_isolation=ProcessIsolation(
            "forkserver" if "forkserver" in isolation else base.process_isolation
        ),
        # The rest of a package whose modules are mutated one by one must import beside them.
        also_copy=[
            *base.also_copy,
            *(Path(c) for g in groups.values() for c in g.get("also_copy", [])),
        ],
    )


@dataclasses.dataclass(frozen=True)
class Exclusions:
    """What mutmut leaves alone ([tool.mutation.do_not_mutate]), by rule rather than by a
    `# pragma: no mutate` on each line: whole functions, by `path::qualified.name`, and the
    arguments of calls by the called name, a keyword by its name or a positional by its index."""

    functions: frozenset[str] = frozenset()
    arguments: dict[str, frozenset[str | int]] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_config(cls, table: dict) -> Exclusions:
        return cls(
            functions=frozenset(table.get("functions", [])),
            arguments={call: frozenset(args) for call, args in table.get("arguments", {}).items()},
        )

    def lines(self, path: str, source: str) -> tuple[set[int], set[int], list[str]]:
        """For one source file: the lines not to mutate (as a bare pragma on each would), the
        lines of the functions to leave out whole (as `# pragma: no mutate block` on their
        header would: no mutant, no trampoline), and a note for each text left mutated because
        it shares a line with other code (a line is all mutmut can leave alone)."""
        path = Path(path).as_posix()
        tree = ast.parse(source)
        texts: set[int] = set()
        functions: set[int] = set()
        notes: list[str] = []
        for qualname, node in _definitions(tree):
            if f"{path}::{qualname}" in self.functions:
                functions.update(range(node.lineno, node.end_lineno + 1))
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            wanted = self.arguments.get(_called_name(call.func), frozenset())
            chosen = [kw.value for kw in call.keywords if kw.arg in wanted]
            chosen += [arg for index, arg in enumerate(call.args) if index in wanted]
            for value in chosen:
                span = set(range(value.lineno, value.end_lineno + 1))
                others = [n for n in [call.func, *call.args, *call.keywords] if n is not value]
                shared = {call.lineno} | {
                    line
                    for n in others
                    if not (isinstance(n, ast.keyword) and n.value is value)
                    for line in (n.lineno, n.end_lineno)
                }
                if span & shared:
                    notes.append(f"{path}:{value.lineno}: shares its line with other code")
                    continue
                texts |= span
        return texts, functions, notes

    def missing(self, sources: list[str]) -> list[str]:
        """The functions named under `sources` that their file does not define (renamed?)."""
        defined = {
            f"{path.as_posix()}::{qualname}"
            for path in python_files(sources)
            for qualname, _ in _definitions(ast.parse(path.read_text("utf-8")))
        }
        return [name for name in self.names(sources) if name not in defined]

    def names(self, sources: list[str]) -> list[str]:
        """The functions left out whose file is under one of `sources`."""
        return sorted(
            name
            for name in self.functions
            if any(Path(name.partition("::")[0]).is_relative_to(s) for s in sources)
        )


def python_files(sources: list[str]) -> list[Path]:
    """The Python files of `sources` (folders and files), as mutmut walks them."""
    return [
        path
        for source in sources
        for path in (
            sorted(Path(source).rglob("*.py")) if Path(source).is_dir() else [Path(source)]
        )
    ]


def _definitions(tree: ast.Module):
    """(qualified name, node) of every function and method, nested ones too."""
    todo: list[tuple[str, ast.AST]] = [("", tree)]
    while todo:
        prefix, parent = todo.pop()
        for node in ast.iter_child_nodes(parent):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{node.name}"
                if not isinstance(node, ast.ClassDef):
                    yield name, node
                todo.append((f"{name}.", node))


def _called_name(func: ast.expr) -> str:
    """`parser.add_argument` -> add_argument, `argparse.ArgumentParser` -> ArgumentParser."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def leave_alone(rules: Exclusions) -> None:
    """Hand the rules to mutmut where it reads the pragmas: every file it mutates gets the
    lines the rules name added to the ones its comments name."""
    from mutmut.mutation import file_mutation

    from_pragmas = file_mutation.get_ignored_lines

    def ignored_lines(filename, source, metadata_wrapper, coverage_excluded_lines=None):
        ignored = from_pragmas(filename, source, metadata_wrapper, coverage_excluded_lines)
        texts, functions, _ = rules.lines(filename, source)
        return dataclasses.replace(
            ignored,
            no_mutate_lines=ignored.no_mutate_lines | texts,
            ignore_node_lines=ignored.ignore_node_lines | functions,
        )

    file_mutation.get_ignored_lines = ignored_lines


@contextlib.contextmanager
def output_to(log: Path):
    """mutmut draws a spinner on stdout/stderr; send both, and its workers', to a file."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "w") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def end_stalled_mutants(stall_seconds: float, stop: threading.Event) -> None:
    """A mutant that deadlocks uses no CPU, so mutmut's CPU-time limit never ends it: after
    `stall_seconds`, send its worker the signal that limit sends (SIGXCPU), which mutmut
    records as a timeout, i.e. the tests noticed."""
    ticks = os.sysconf("SC_CLK_TCK")
    while not stop.wait(5):
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if not (proc / "cmdline").read_bytes().startswith(b"mutmut: "):
                    continue
                started = int((proc / "stat").read_text().rpartition(")")[2].split()[19]) / ticks
                if uptime - started > stall_seconds:
                    os.kill(int(proc.name), signal.SIGXCPU)
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile


def run_mutmut(max_children: int, log: Path) -> None:
    from mutmut.__main__ import cli

    stop = threading.Event()
    threading.Thread(target=end_stalled_mutants, args=(STALL_SECONDS, stop), daemon=True).start()
    with output_to(log):
        try:
            cli.main(["run", "--max-children", str(max_children)], standalone_mode=False)
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
    stop.set()
    if code:
        tail = log.read_text("utf-8", "replace")[-3000:]
        sys.exit(f"mutmut failed ({code}); end of {log}:\n{tail}")


def changed_lines(name: str, path: Path) -> list[str]:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    diff = get_diff_for_mutant(name, path=path).splitlines()[2:]
    return [line for line in diff if line[:1] in "+-"]


def collect(group: dict, rules: Exclusions) -> dict:
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files

    counts: dict[str, int] = {}
    survivors = {}
    for path in walk_mutatable_files():
        if not any(path.is_relative_to(s) for s in group["sources"]):
            continue
        data = SourceFileMutationData(path=path)
        data.load()
        for name, code in sorted(data.exit_code_by_key.items()):
            status = status_by_exit_code[code]
            counts[status] = counts.get(status, 0) + 1
            if status not in KILLED:
                survivors[name] = {"status": status, "change": changed_lines(name, path)}
    total = sum(counts.values())
    killed = sum(n for status, n in counts.items() if status in KILLED)
    return {
        "mutants": total,
        "killed": killed,
        "score": round(100 * killed / total, 1) if total else None,
        "counts": dict(sorted(counts.items())),
        # Every other status, "no tests" included (no selected test reached the mutant), counts
        # against the score and is listed under survivors.
        "counted_as_killed": sorted(KILLED),
        "excluded_functions": rules.names(group["sources"]),
        "survivors": survivors,
    }


def unexplained(results: dict) -> list[str]:
    explained = SURVIVORS.read_text("utf-8") if SURVIVORS.exists() else ""
    return [
        name
        for group in results.values()
        for name in group["survivors"]
        if f"`{name}`" not in explained
    ]


def main(argv: list[str] | None = None) -> int:
    groups = load_groups()
    parser = argparse.ArgumentParser(prog="python -m tests.mutation.harness")
    parser.add_argument("groups", nargs="*", metavar="GROUP", help=", ".join(groups))
    parser.add_argument("--max-children", type=int, default=2)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.groups) - set(groups))
    if unknown:
        parser.error(f"unknown group {', '.join(unknown)}; known: {', '.join(groups)}")
    chosen = {name: groups[name] for name in args.groups or groups}

    os.chdir(ROOT)
    shutil.rmtree("mutants", ignore_errors=True)
    Path("mutants").mkdir()
    rules = Exclusions.from_config(load_tool()["mutation"].get("do_not_mutate", {}))
    sources = [s for g in chosen.values() for s in g["sources"]]
    for path in python_files(sources):
        for note in rules.lines(str(path), path.read_text("utf-8"))[2]:
            print(f"note: {note}, so its mutants are kept", file=sys.stderr)
    for name in rules.missing(sources):
        print(f"note: {name} is not defined: nothing left out for it", file=sys.stderr)
    configure(chosen, rules)
    started = time.monotonic()
    run_mutmut(args.max_children, Path("mutants/mutmut.log"))
    seconds = round(time.monotonic() - started)

    results = json.loads(RESULTS.read_text("utf-8")) if RESULTS.exists() else {}
    for name, group in chosen.items():
        results[name] = {
            "run_seconds": seconds,
            "groups_in_run": sorted(chosen),
            **collect(group, rules),
        }
    RESULTS.write_text(json.dumps(dict(sorted(results.items())), indent=2) + "\n", "utf-8")

    for name in chosen:
        r = results[name]
        print(f"{name}: {r['killed']}/{r['mutants']} killed ({r['score']}%), {seconds} s")
    missing = unexplained({name: results[name] for name in chosen})
    if missing:
        print(f"{len(missing)} survivors not explained in {SURVIVORS.relative_to(ROOT)}:")
        print("\n".join(f"  {name}" for name in missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
