"""fairstream.core stays pure: no Kafka client, no Faust, no asyncio, nothing from outside core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import fairstream.core
from tests.unit import purity

FORBIDDEN = ("faust", "confluent_kafka", "aiokafka", "asyncio")
CORE = Path(fairstream.core.__file__).parent
MODULES = sorted(CORE.rglob("*.py"))


def imported_names(path: Path) -> list[str]:
    return purity.imported_names(path, "fairstream.core", CORE)


def test_there_are_modules_to_check():
    assert {p.name for p in MODULES} >= {"__init__.py", "deficit.py", "ratelimit.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_forbidden_imports(path: Path):
    for name in imported_names(path):
        top = name.split(".")[0]
        assert top not in FORBIDDEN, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_only_core_from_fairstream(path: Path):
    for name in imported_names(path):
        if name == "fairstream" or name.startswith("fairstream."):
            assert name.startswith("fairstream.core"), f"{path.name} imports {name}"


def test_importing_core_loads_none_of_them():
    code = (
        "import sys, fairstream.core; "
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
