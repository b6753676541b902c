"""The structure of the ``fairstream`` package, measured from its source (standard library only).

Three measures; only the first has a limit (no runtime cycle):

- import cycles between modules inside the package: strongly connected components of the
  module import graph, in two lists. *Runtime* cycles close through imports that run (at module
  level, or deferred inside a function body: both are a dependency at run time). *Type-only*
  cycles close only through imports under ``if TYPE_CHECKING:``;
- the largest modules, in lines of code: lines that are not blank and not only a comment;
  docstrings (of a module, class or function) are not counted, as cloc does not by default;
  other strings are;
- the longest functions and methods: physical lines from ``def`` to the last line of the body
  (decorators not counted; blank lines, comments and docstrings inside counted).

Sizes are listed to be read, not held under a number: a module or a function is as long as
its meaning. A limit on them was tried, and code was cut and moved to meet it.

``from X import Y`` counts as an import of ``X.Y`` when ``X.Y`` is a module, else of ``X``;
``import X.Y.Z`` as an import of ``X.Y.Z``. The parent packages Python runs on the way
(``X/__init__.py``) are not counted as imported, nor are modules imported by a computed name
(``importlib.import_module(name)``, as ``fairstream/__init__.py`` does for its lazy exports).

    .venv/bin/python -m fairstream_dev.structure            # the report; exits 0
    .venv/bin/python -m fairstream_dev.structure --check    # exit 1 on a runtime import cycle

Only the runtime cycles are enforced (``--check``, and tests/unit/test_import_cycles.py).
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fairstream"
LARGEST = 10  # modules and functions listed by size

HEADER = """\
Structure of {package}/ (python -m fairstream_dev.structure)
  lines of code: lines that are not blank and not only a comment; docstrings are NOT counted
    (as comments); other strings are.
  function length: lines from `def` to the end of its body, everything inside counted
    (decorators not).
  imports: `from X import Y` is an import of X.Y when that is a module; implied parent
    packages are not counted; imports inside functions are runtime imports (marked deferred),
    imports under `if TYPE_CHECKING:` are type-only."""


@dataclass(frozen=True)
class Module:
    name: str  # dotted: fairstream.scheduler.emitter.loop; a package is its __init__.py
    path: Path
    is_package: bool


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    type_only: bool = False  # under `if TYPE_CHECKING:`
    deferred: bool = False  # inside a function body: runs when called, not on import


@dataclass(frozen=True)
class Cycle:
    modules: tuple[str, ...]  # sorted
    imports: tuple[Import, ...]  # the imports between its modules that close it


@dataclass(frozen=True)
class Cycles:
    runtime: list[Cycle]
    type_only: list[Cycle]  # cycles of the whole graph that are not runtime cycles


@dataclass(frozen=True)
class Function:
    path: Path
    name: str  # qualified: Class.method, outer.inner
    line: int
    lines: int


@dataclass
class Report:
    package: Path
    modules: list[Module]
    imports: list[Import]
    cycles: Cycles
    loc: dict[Path, int] = field(default_factory=dict)
    functions: list[Function] = field(default_factory=list)

    def largest_modules(self, count: int = LARGEST) -> list[tuple[Path, int]]:
        ranked = sorted(self.loc.items(), key=lambda item: (-item[1], str(item[0])))
        return ranked[:count]

    def longest_functions(self, count: int = LARGEST) -> list[Function]:
        return sorted(self.functions, key=lambda f: (-f.lines, str(f.path), f.line))[:count]


# --- the import graph -------------------------------------------------------------------------


def modules(package: Path) -> list[Module]:
    """Every module of the package directory ``package`` (its name is the directory's)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = [package.name, *path.relative_to(package).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found.append(Module(".".join(parts), path, is_package))
    return found


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


class _Imports(ast.NodeVisitor):
    def __init__(self, module: Module, known: set[str]) -> None:
        self.module = module
        self.known = known
        self.type_only = False
        self.deferred = False
        self.found: list[Import] = []

    def add(self, target: str, line: int) -> None:
        if target in self.known and target != self.module.name:
            self.found.append(Import(self.module.name, target, line, self.type_only, self.deferred))

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        outer, self.type_only = self.type_only, True
        for statement in node.body:
            self.visit(statement)
        self.type_only = outer
        for statement in node.orelse:
            self.visit(statement)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, self.deferred = self.deferred, True
        self.generic_visit(node)
        self.deferred = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(self.longest_known(alias.name), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self.resolve(node.module, node.level)
        if base is None:
            return
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            self.add(submodule if submodule in self.known else base, node.lineno)

    def resolve(self, module: str | None, level: int) -> str | None:
        if level == 0:
            return module
        parts = self.module.name.split(".")
        if not self.module.is_package:
            parts.pop()
        if level - 1 > len(parts) - 1:
            return None
        parts = parts[: len(parts) - (level - 1)]
        return ".".join([*parts, module] if module else parts)

    def longest_known(self, name: str) -> str:
        parts = name.split(".")
        while len(parts) > 1 and ".".join(parts) not in self.known:
            parts.pop()
        return ".".join(parts)


def imports(found: Sequence[Module], trees: dict[Path, ast.Module] | None = None) -> list[Import]:
    """The imports between the modules ``found``: one per statement and module imported."""
    known = {module.name for module in found}
    edges: list[Import] = []
    for module in found:
        tree = (trees or {}).get(module.path) or ast.parse(
            module.path.read_text(), filename=str(module.path)
        )
        collector = _Imports(module, known)
        collector.visit(tree)
        edges.extend(dict.fromkeys(collector.found))
    return edges


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively; only those of two or more nodes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
    return components


def _cycles(edges: Iterable[Import], names: Iterable[str]) -> list[Cycle]:
    edges = list(edges)
    graph: dict[str, set[str]] = {name: set() for name in names}
    for edge in edges:
        graph[edge.source].add(edge.target)
    cycles = []
    for component in strongly_connected(graph):
        inside = [e for e in edges if e.source in component and e.target in component]
        inside.sort(key=lambda e: (e.source, e.line, e.target))
        cycles.append(Cycle(tuple(sorted(component)), tuple(inside)))
    return sorted(cycles, key=lambda cycle: cycle.modules)


def find_cycles(found: Sequence[Module], edges: Sequence[Import]) -> Cycles:
    names = [module.name for module in found]
    runtime = _cycles((e for e in edges if not e.type_only), names)
    every = _cycles(edges, names)
    runtime_sets = {cycle.modules for cycle in runtime}
    return Cycles(runtime, [cycle for cycle in every if cycle.modules not in runtime_sets])


def import_cycles(package: Path = PACKAGE) -> Cycles:
    """The import cycles inside the package directory ``package``."""
    found = modules(package)
    return find_cycles(found, imports(found))


# --- sizes ------------------------------------------------------------------------------------

_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.ENCODING,
}
_Scope = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def _docstrings(tree: ast.Module) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    spans = []
    for node in ast.walk(tree):
        if not isinstance(node, _Scope) or not node.body:
            continue
        first = node.body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            end = (first.end_lineno or first.lineno, first.end_col_offset or 0)
            spans.append(((first.lineno, first.col_offset), end))
    return spans


def lines_of_code(source: str, tree: ast.Module | None = None) -> int:
    """Lines that are not blank, not only a comment and not part of a docstring."""
    docstrings = _docstrings(tree or ast.parse(source))
    text = source.splitlines()
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in _NOT_CODE:
            continue
        if token.type == tokenize.STRING and any(
            start <= token.start and token.end <= end for start, end in docstrings
        ):
            continue
        code.update(range(token.start[0], token.end[0] + 1))
    return sum(1 for line in code if line <= len(text) and text[line - 1].strip())


def functions(path: Path, tree: ast.Module) -> list[Function]:
    """Every function and method, nested ones too, with its length from def to end."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                found.append(Function(path, name, child.lineno, lines))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


# --- the report -------------------------------------------------------------------------------


def measure(package: Path = PACKAGE) -> Report:
    found = modules(package)
    trees = {m.path: ast.parse(m.path.read_text(), filename=str(m.path)) for m in found}
    edges = imports(found, trees)
    report = Report(package, found, edges, find_cycles(found, edges))
    for module in found:
        tree = trees[module.path]
        report.loc[module.path] = lines_of_code(module.path.read_text(), tree)
        report.functions.extend(functions(module.path, tree))
    return report


def _where(path: Path, package: Path) -> str:
    return str(path.relative_to(package.parent))


def _render_cycles(title: str, cycles: list[Cycle], report: Report) -> list[str]:
    paths = {module.name: module.path for module in report.modules}
    lines = [f"{title}: {len(cycles)}"]
    for number, cycle in enumerate(cycles, 1):
        lines.append(f"  {number}. {len(cycle.modules)} modules: {', '.join(cycle.modules)}")
        for edge in cycle.imports:
            how = " (type-only)" if edge.type_only else " (deferred)" if edge.deferred else ""
            where = f"{_where(paths[edge.source], report.package)}:{edge.line}"
            lines.append(f"       {where}: {edge.source} -> {edge.target}{how}")
    return lines


def render(report: Report) -> str:
    runtime = sum(1 for e in report.imports if not e.type_only)
    deferred = sum(1 for e in report.imports if e.deferred and not e.type_only)
    lines = [
        HEADER.format(package=report.package.name),
        "",
        f"Modules: {len(report.modules)}; imports between them: {len(report.imports)}"
        f" ({runtime} at runtime, {deferred} of them deferred;"
        f" {len(report.imports) - runtime} type-only)",
        "",
        *_render_cycles("Runtime import cycles", report.cycles.runtime, report),
        "",
        *_render_cycles(
            "Type-only import cycles (closed only under TYPE_CHECKING)",
            report.cycles.type_only,
            report,
        ),
        "",
    ]
    total = sum(report.loc.values())
    lines.append(
        f"The largest modules, in lines of code (of {len(report.modules)};"
        f" {total} lines of code in all):"
    )
    lines += [f"  {n:5d}  {_where(path, report.package)}" for path, n in report.largest_modules()]
    lines += ["", f"The longest functions, in lines (of {len(report.functions)}):"]
    lines += [
        f"  {f.lines:5d}  {_where(f.path, report.package)}:{f.line}  {f.name}"
        for f in report.longest_functions()
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fairstream_dev.structure",
        description="Import cycles, and the largest modules and functions, of fairstream.",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when there is a runtime import cycle"
    )
    parser.add_argument(
        "--package",
        type=Path,
        default=PACKAGE,
        help="the package directory to measure (default: fairstream/)",
    )
    args = parser.parse_args(argv)
    report = measure(args.package.resolve())
    sys.stdout.write(render(report))
    if args.check:
        found = len(report.cycles.runtime)
        print(f"\ncheck: {found} runtime import cycle(s): {'FAIL' if found else 'ok'}")
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
