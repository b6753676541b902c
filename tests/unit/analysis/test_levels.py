"""Fairness at each level of tenant groups (``fairstream.analysis.levels``), on schedules
built record by record: a two-level fair one, and a flat one that key-splitting games."""

from __future__ import annotations

import pytest

from fairstream.analysis.levels import GROUP_MARK, level_table, level_windows
from fairstream.scheduler.policies.tenant_groups import by_separator

T0 = 1_700_000_000.0
RATE = 100.0  # records/s


def schedule(order: list[str], arrival: float = T0) -> dict[str, list[tuple[float, float]]]:
    """Every tenant's records enqueued at ``arrival`` and sent in ``order`` at ``RATE``."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for i, tenant in enumerate(order):
        spans.setdefault(tenant, []).append((arrival, T0 + i / RATE))
    return spans


def judge(spans, **kw):
    return level_windows(
        spans,
        by_separator("/"),
        start=T0,
        end=T0 + 10,
        window=2.0,
        weights=kw.get("weights", {}),
        group_weights=kw.get("group_weights", {}),
    )


def test_a_two_level_schedule_is_fair_at_both_levels():
    users = [f"A/u{i}" for i in range(10)]
    # A and B alternate; A's turns go round its ten users. 1,200 records: 12 s of backlog.
    order = [t for i in range(600) for t in (users[i % 10], "B/solo")]
    windows = judge(schedule(order))
    assert len(windows) == 5
    for w in windows:
        assert w.outer.tenants == 2
        assert w.outer.jain == pytest.approx(1.0)
        assert w.inner["A"].tenants == 10
        assert w.inner["A"].jain == pytest.approx(1.0, abs=1e-3)
        assert "B" not in w.inner  # one member: nothing to compare
    text = level_table(windows, lambda t: f"{t - T0:05.1f}")
    assert text.splitlines()[1].split()[1:3] == ["2", "1.000"]


def test_key_splitting_shows_as_the_other_groups_shortfall():
    """A flat round robin over A's ten ids and B's one gives A 10/11 of the egress: the outer
    level sees B short of its half by 9/11 of it."""
    order = [t for _ in range(110) for t in (*(f"A/u{i}" for i in range(10)), "B/solo")]
    [first, *_] = judge(schedule(order))
    assert first.outer.worst == GROUP_MARK + "B"
    assert first.outer.shortfall == pytest.approx(1 - 2 / 11, abs=0.01)
    assert first.outer.jain < 0.7
    assert first.inner["A"].jain == pytest.approx(1.0, abs=1e-3)  # A's users split evenly


def test_group_and_member_weights_and_ungrouped_tenants():
    """gold (weight 3) against the ungrouped solo; gold's g/a weighs 2 against g/b."""
    order = [t for _ in range(200) for t in ("g/a", "g/b", "g/a", "solo")]
    w = judge(schedule(order), weights={"g/a": 2}, group_weights={"g": 3})[0]
    assert w.outer.jain == pytest.approx(1.0)
    assert w.inner["g"].jain == pytest.approx(1.0)
    unweighted = judge(schedule(order))[0]
    assert unweighted.outer.worst == "solo"
    assert unweighted.inner["g"].worst == "g/b"
    assert unweighted.worst_group == ("g", unweighted.inner["g"])
