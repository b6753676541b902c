"""Dwell per tenant: its p99s and the table the demo and ``fairstream audit`` print."""

from __future__ import annotations

import pytest

from fairstream.analysis.dwell import by_noisy_first, p99_by_tenant, summary_table
from fairstream.analysis.reference import Arrival


def test_p99_by_tenant_skips_tenants_with_no_dwell() -> None:
    dwell = {"a": [(0.0, 1.0), (0.1, 2.0)], "b": []}
    assert p99_by_tenant(dwell) == {"a": pytest.approx(1.99)}


def test_the_noisy_tenant_comes_first() -> None:
    assert by_noisy_first(["quiet-2", "noisy", "quiet-1"]) == ["noisy", "quiet-1", "quiet-2"]


def test_summary_table_has_a_row_per_tenant_and_a_dash_where_a_side_has_none() -> None:
    arrivals = [Arrival(0.0, "quiet-1", "q0"), Arrival(0.0, "noisy", "n0")]
    table = summary_table(
        arrivals,
        fair={"noisy": [(0.0, 1.0)], "quiet-1": [(0.0, 0.25)]},
        fifo={"noisy": [(0.0, 0.5)]},
        gps={"noisy": [0.75], "quiet-1": [0.0]},
    ).splitlines()
    assert table[0].split()[:3] == ["tenant", "count", "fairstream"]
    assert table[1].split() == ["noisy", "1", "1.00s", "1.00s", "0.50s", "0.50s", "0.75s", "0.75s"]
    assert table[2].split() == ["quiet-1", "1", "0.25s", "0.25s", "-", "-", "0.00s", "0.00s"]
