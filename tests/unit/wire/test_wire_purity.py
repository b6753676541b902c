"""fairstream.wire stays sans-IO: no Kafka client, no asyncio, no network or file writing,
and nothing from fairstream outside wire, errors and the core's TenantPolicy (which the
policy codec encodes). The contract's constants are wire's own; the core, which imports
nothing outside itself, keeps copies of the two it uses, and they must stay equal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import fairstream.wire
from tests.unit import purity

FORBIDDEN = ("faust", "confluent_kafka", "aiokafka", "asyncio", "socket", "threading")
ALLOWED_FAIRSTREAM = (
    "fairstream.wire",
    "fairstream.errors",
    "fairstream.core.tenant",
    "fairstream.core.budget",  # a policy's budgets: values of core.tenant's TenantPolicy
)
WIRE = Path(fairstream.wire.__file__).parent
MODULES = sorted(WIRE.glob("*.py"))


def imported_names(path: Path) -> list[str]:
    return purity.imported_names(path, "fairstream.wire", WIRE)


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


def test_the_cores_copies_of_contract_constants_equal_wires() -> None:
    from fairstream.core import admission, budget, usage
    from fairstream.wire import records

    assert admission.BACKLOG_FULL == records.BACKLOG_FULL
    assert budget.BUDGET_EXHAUSTED == records.BUDGET_EXHAUSTED
    assert usage.MAX_COST == records.MAX_COST
