"""fairstream.wire stays sans-IO: no Kafka client, no asyncio, no network or file writing,
and nothing from fairstream outside wire, errors and the core's TenantPolicy and the
admission and cost constants it defines."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import fairstream.wire

FORBIDDEN = ("faust", "confluent_kafka", "aiokafka", "asyncio", "socket", "threading")
ALLOWED_FAIRSTREAM = (
    "fairstream.wire",
    "fairstream.errors",
    "fairstream.core.tenant",
    "fairstream.core.admission",
    "fairstream.core.usage",
)
WIRE = Path(fairstream.wire.__file__).parent
MODULES = sorted(WIRE.glob("*.py"))


def imported_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or "")
    return names


def test_there_are_modules_to_check() -> None:
    assert {p.name for p in MODULES} >= {"__init__.py", "ingest.py", "feedback.py", "policy.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_io_imports(path: Path) -> None:
    for name in imported_names(path):
        assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_only_wire_and_its_few_dependencies_from_fairstream(path: Path) -> None:
    for name in imported_names(path):
        if name == "fairstream" or name.startswith("fairstream."):
            assert name.startswith(ALLOWED_FAIRSTREAM), f"{path.name} imports {name}"


def test_importing_wire_loads_no_kafka_client() -> None:
    code = (
        "import sys, fairstream.wire, fairstream.wire.feedback, fairstream.wire.policy; "
        "assert not {'confluent_kafka', 'aiokafka', 'asyncio'} & set(sys.modules), "
        "sorted({'confluent_kafka', 'aiokafka', 'asyncio'} & set(sys.modules))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
