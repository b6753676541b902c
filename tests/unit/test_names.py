"""One meaning per name: no class name is defined twice under ``fairstream/``.

Every ``class`` statement counts, at module level or nested in a class or a function. A name
kept for existing code (``fairstream.aio.Producer``, ``fairstream.faust.Ingest``) is an
alias, an assignment to the class under its new name, not a second definition.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fairstream"


def class_definitions(package: Path) -> dict[str, list[str]]:
    """Each class name defined under ``package``, with where (``path:line``) each time."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def test_no_class_name_is_defined_twice() -> None:
    twice = {name: where for name, where in class_definitions(PACKAGE).items() if len(where) > 1}
    assert twice == {}, "class names defined more than once under fairstream/:\n" + "\n".join(
        f"  {name}: {', '.join(where)}" for name, where in sorted(twice.items())
    )


def test_nested_classes_count(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("class Window:\n    pass\n")
    (package / "b.py").write_text(
        "class Agent:\n    class Window:\n        pass\n\n\n"
        "def build():\n    class Agent:\n        pass\n\n\n"
        "Alias = Agent\n"
    )
    found = class_definitions(package)
    assert found["Window"] == ["pkg/a.py:1", "pkg/b.py:2"]
    assert found["Agent"] == ["pkg/b.py:1", "pkg/b.py:7"]
    assert "Alias" not in found


def test_the_old_public_names_still_work() -> None:
    from fairstream import aio

    assert aio.Producer is aio.AsyncProducer
    assert {"AsyncProducer", "Producer"} <= set(aio.__all__)


def test_the_old_faust_name_still_works() -> None:
    pytest.importorskip("faust")
    import fairstream.faust

    assert fairstream.faust.Ingest is fairstream.faust.IngestWriter
    assert {"Ingest", "IngestWriter"} <= set(fairstream.faust.__all__)
