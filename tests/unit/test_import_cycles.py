"""No import cycle inside ``fairstream/`` or ``benchmarks/`` at run time, and the cycle
finder itself.

The graph and its cycles are ``fairstream_dev.structure``'s (``make structure`` prints the whole
report). Imports under ``if TYPE_CHECKING:`` are type-only; a cycle through them fails too
(none is left since the emitter's parts stopped importing it). An import deferred into a
function body is a runtime import.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from fairstream_dev import structure


def describe(cycle: structure.Cycle) -> str:
    closing = "\n".join(
        f"    {edge.source} -> {edge.target} (line {edge.line}"
        f"{', deferred' if edge.deferred else ''})"
        for edge in cycle.imports
    )
    return f"  {' <-> '.join(cycle.modules)}, through:\n{closing}"


def test_fairstream_has_no_runtime_import_cycle() -> None:
    cycles = structure.import_cycles(structure.PACKAGE).runtime
    assert cycles == [], "runtime import cycles inside fairstream/:\n" + "\n".join(
        describe(cycle) for cycle in cycles
    )


def test_benchmarks_have_no_runtime_import_cycle() -> None:
    """Each benchmark phase owns its table and targets; the shared tables and the
    fairness workloads import downward only."""
    cycles = structure.import_cycles(structure.ROOT / "benchmarks").runtime
    assert cycles == [], "runtime import cycles inside benchmarks/:\n" + "\n".join(
        describe(cycle) for cycle in cycles
    )


def test_no_module_imports_the_emitter_back_not_even_for_types() -> None:
    """The emitter owns its parts (backlog, holding, send, checkpoint, pacing, policies):
    none imports it back; only the process that starts it does."""
    found = structure.modules(structure.PACKAGE)
    importers = {e.source for e in structure.imports(found) if e.target == EMITTER}
    assert importers == {"fairstream.scheduler.run", "fairstream.scheduler.service"}
    type_only = structure.import_cycles(structure.PACKAGE).type_only
    assert type_only == [], "type-only import cycles inside fairstream/:\n" + "\n".join(
        describe(cycle) for cycle in type_only
    )


EMITTER = "fairstream.scheduler.emitter.loop"
SCHEDULER = structure.PACKAGE / "scheduler"
# The rooms (one sub-package per thread) a room may import besides the floor, the
# scheduler's shared modules: the emitter applies the policies' rules.
ROOM_IMPORTS = {"emitter": {"policies"}}
# The floor modules that start the threads, and so import the rooms.
PROCESS = {"fairstream.scheduler.service", "fairstream.scheduler.run"}


def room_of(module: str) -> str | None:
    """The scheduler room ``module`` is in; "" for the floor; None outside the scheduler."""
    parts = module.split(".")
    if parts[:2] != ["fairstream", "scheduler"]:
        return None
    if len(parts) > 3 and (SCHEDULER / parts[2]).is_dir():
        return parts[2]
    return ""


def test_the_scheduler_rooms_import_only_the_floor_and_downward() -> None:
    """Each thread's room imports the floor (and the emitter the policies); the floor
    imports no room, except the process that starts the threads (and ``web``, which serves
    the process, is imported by ``run`` alone)."""
    found = structure.modules(structure.PACKAGE)
    wrong = []
    for edge in structure.imports(found):
        source, target = room_of(edge.source), room_of(edge.target)
        if source is None or target is None or target in (source, ""):
            continue
        if source == "":
            allowed = edge.source in PROCESS and (target != "web" or edge.source.endswith("run"))
        else:
            allowed = target in ROOM_IMPORTS.get(source, set())
        if not allowed:
            wrong.append(f"{edge.source} -> {edge.target} (line {edge.line})")
    assert wrong == [], "imports across the scheduler's rooms:\n" + "\n".join(wrong)


def package(root: Path, files: dict[str, str]) -> Path:
    directory = root / "pkg"
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return directory


SYNTHETIC = {
    "__init__.py": "VERSION = 1\n",
    # a -> b -> c -> a, spelled three ways: from-import of a submodule, relative, plain import.
    "a.py": "from pkg import b\n",
    "b.py": "from .c import thing\n",
    "c.py": "import pkg.a\n\nthing = 1\n",
    # d <-> e only through an annotation import: type-only.
    "d.py": """\
        from __future__ import annotations

        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from pkg.e import E


        class D:
            def use(self, e: E) -> None: ...
        """,
    "e.py": "from pkg.d import D\n\n\nclass E(D): ...\n",
    # f <-> g with g's import deferred into a function: still a runtime cycle.
    "f.py": "from pkg import g\n",
    "g.py": "def late() -> None:\n    from pkg.f import g\n",
    # A name (not a submodule) from the package: an import of pkg itself, no cycle.
    "sub/__init__.py": "from pkg import VERSION\n",
}


def test_the_finder_reports_runtime_and_type_only_cycles_apart(tmp_path: Path) -> None:
    directory = package(tmp_path, SYNTHETIC)
    found = structure.modules(directory)
    assert ("pkg.sub", "pkg") in {(e.source, e.target) for e in structure.imports(found)}
    cycles = structure.import_cycles(directory)
    assert [cycle.modules for cycle in cycles.runtime] == [
        ("pkg.a", "pkg.b", "pkg.c"),
        ("pkg.f", "pkg.g"),
    ]
    assert [cycle.modules for cycle in cycles.type_only] == [("pkg.d", "pkg.e")]
    deferred = cycles.runtime[1].imports
    assert [(e.source, e.target, e.deferred) for e in deferred] == [
        ("pkg.f", "pkg.g", False),
        ("pkg.g", "pkg.f", True),
    ]
    closing = [e for e in cycles.type_only[0].imports if e.type_only]
    assert [(e.source, e.target) for e in closing] == [("pkg.d", "pkg.e")]


def test_a_type_checking_import_alone_makes_no_runtime_cycle(tmp_path: Path) -> None:
    files = {k: v for k, v in SYNTHETIC.items() if k in {"__init__.py", "d.py", "e.py"}}
    directory = package(tmp_path, files)
    assert structure.import_cycles(directory).runtime == []
    assert structure.main(["--check", "--package", str(directory)]) == 0
    (directory / "d.py").write_text("from pkg.e import E\n")
    assert [c.modules for c in structure.import_cycles(directory).runtime] == [("pkg.d", "pkg.e")]
    assert structure.main(["--check", "--package", str(directory)]) == 1


def test_lines_of_code_leave_out_blanks_comments_and_docstrings() -> None:
    source = textwrap.dedent('''\
        """Module docstring,
        two lines."""

        # a comment
        X = """a string
        that is code"""


        def f() -> int:
            """Docstring."""
            return 1  # code with a comment
        ''')
    assert structure.lines_of_code(source) == 4


def test_the_client_side_imports_nothing_of_the_scheduler() -> None:
    """The SDK, its asyncio producer and the Faust integration run in users' processes: they
    share the wire contracts and the adapters with the scheduler, never its modules."""
    found = structure.modules(structure.PACKAGE)
    client = ("fairstream.sdk", "fairstream.aio", "fairstream.faust")
    crossing = sorted(
        f"{e.source} -> {e.target}"
        for e in structure.imports(found)
        if e.source.startswith(client) and e.target.startswith("fairstream.scheduler")
    )
    assert crossing == []
