"""Per-tenant emitted counts stay bounded under tenant churn, and every total stays right."""

from __future__ import annotations

from fairstream.adapters.tenant_series import OTHER
from fairstream.scheduler import observe
from fairstream.scheduler.observe import Observed


def test_churning_tenants_fold_into_other_without_losing_counts(monkeypatch) -> None:
    monkeypatch.setattr(observe, "EMITTED_TENANTS", 100)
    seen = Observed()
    seen.emitted({"big": 1000})
    for i in range(1000):
        seen.emitted({f"t{i}": 1 + i % 3})
    total = 1000 + sum(1 + i % 3 for i in range(1000))
    assert len(seen.emitted_by_tenant) <= 101
    assert sum(seen.emitted_by_tenant.values()) == total
    assert seen.emitted_by_tenant["big"] == 1000
    assert seen.emitted_by_tenant[OTHER] > 0
