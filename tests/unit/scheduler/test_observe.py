"""Per-tenant emitted counts stay bounded under tenant churn, and every total stays right."""

from __future__ import annotations

from fairstream.adapters.tenant_series import OTHER
from fairstream.core import ManualClock
from fairstream.scheduler.observe import SHARE, Observed, Reused
from tests.unit.scheduler.parts import commit


def test_churning_tenants_fold_into_other_without_losing_counts() -> None:
    seen = Observed(emitted_tenants=100)
    commit(seen, {"big": 1000})
    for i in range(1000):
        commit(seen, {f"t{i}": 1 + i % 3})
    total = 1000 + sum(1 + i % 3 for i in range(1000))
    assert len(seen.emitted_by_tenant) <= 101
    assert sum(seen.emitted_by_tenant.values()) == total
    assert seen.emitted_by_tenant["big"] == 1000
    assert seen.emitted_by_tenant[OTHER] > 0


def test_a_read_over_every_tenant_is_reused_until_it_is_paid_for() -> None:
    clock = ManualClock()
    reads: list[float] = []

    def read() -> int:
        reads.append(clock.now())
        clock.advance(0.5)  # a read over a million tenants takes about this long
        return len(reads)

    reused = Reused(read, clock)
    assert reused() == 1
    clock.advance(5.0)  # 5.5 s after it began: not yet paid for (0.5 s / SHARE = 10 s)
    assert reused() == 1
    clock.advance(0.5 / SHARE - 5.0)
    assert reused() == 2
    assert len(reads) == 2


def test_a_cheap_read_is_made_at_every_ask() -> None:
    clock = ManualClock()
    count = iter(range(100))
    reused = Reused(lambda: next(count), clock)  # takes no time on the manual clock
    assert [reused() for _ in range(3)] == [0, 1, 2]
