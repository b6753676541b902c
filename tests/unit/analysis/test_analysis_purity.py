"""fairstream.analysis stays pure, as its docstring says: no Kafka client, no network, no
threads, and from fairstream only itself and the core."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import fairstream.analysis
from tests.unit import purity

NEVER_LOADED = ("faust", "confluent_kafka", "aiokafka", "asyncio", "click")
# Imported by no module of fairstream.analysis; the standard library may load the last two
# itself, so only the others are checked in a fresh interpreter.
FORBIDDEN = (*NEVER_LOADED, "socket", "threading")
ANALYSIS = Path(fairstream.analysis.__file__).parent
MODULES = sorted(ANALYSIS.glob("*.py"))


def imported_names(path: Path) -> list[str]:
    return purity.imported_names(path, "fairstream.analysis", ANALYSIS)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_relative_imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    relative = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
    assert not relative, f"{path.name}: relative import"


def test_there_are_modules_to_check():
    assert {p.name for p in MODULES} >= {"__init__.py", "reference.py", "verdict.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_forbidden_imports(path: Path):
    for name in imported_names(path):
        assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_only_analysis_and_core_from_fairstream(path: Path):
    for name in imported_names(path):
        if name == "fairstream" or name.startswith("fairstream."):
            assert name.startswith(("fairstream.analysis", "fairstream.core")), (
                f"{path.name} imports {name}"
            )


def test_importing_analysis_loads_none_of_them():
    modules = ", ".join(f"fairstream.analysis.{p.stem}" for p in MODULES if p.stem != "__init__")
    loaded = f"','.join(m for m in {NEVER_LOADED!r} if m in sys.modules)"
    code = f"import sys, {modules}; print({loaded})"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
