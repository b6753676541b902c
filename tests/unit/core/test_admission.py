"""Admission decisions."""

from __future__ import annotations

from fairstream.core import (
    ACCEPT,
    BACKLOG_FULL,
    DEFAULT_POLICY,
    FairScheduler,
    GroupScheduler,
    ManualClock,
    TenantPolicy,
    admit,
)


def test_default_policy_accepts_anything():
    assert admit("t", DEFAULT_POLICY, 10**9, 10**12, cost=10**6) is ACCEPT


def test_max_backlog_records():
    policy = TenantPolicy(max_backlog=3)
    assert admit("acme", policy, 2, 2).accepted
    decision = admit("acme", policy, 3, 3)
    assert not decision.accepted
    assert decision.reason == BACKLOG_FULL == "backlog-full"
    assert decision.detail == (
        "tenant 'acme' already has 3 records waiting, the most its policy allows (max_backlog=3)"
    )


def test_max_backlog_cost():
    policy = TenantPolicy(max_backlog_cost=10)
    assert admit("acme", policy, 1, 7, cost=3)
    decision = admit("acme", policy, 1, 8, cost=3)
    assert decision.reason == BACKLOG_FULL
    assert "would exceed" in (decision.detail or "")
    never = admit("acme", policy, 0, 0, cost=11)
    assert never.reason == BACKLOG_FULL
    assert "can never fit" in (never.detail or "")


def test_paused_tenant_still_buffers():
    assert admit("acme", TenantPolicy(paused=True), 0, 0)


def test_room_is_what_each_core_would_still_admit():
    # The room a batch of records counts down (``FairScheduler.room``, ``GroupScheduler.room``):
    # the policy's limits less the backlog, inf where the policy sets none.
    inf = float("inf")
    for core in (FairScheduler(ManualClock()), GroupScheduler(ManualClock())):
        core.set_policy("capped", TenantPolicy(max_backlog=5, max_backlog_cost=20))
        assert core.room("idle") == [inf, inf]
        assert core.room("capped") == [5, 20]
        core.push("capped", "x", 3)
        core.push("capped", "y", 4)
        core.push("other", "z", 1)
        assert core.room("capped") == [3, 13]
        assert core.room("other") == [inf, inf]
        core.set_policy("other", TenantPolicy(max_backlog=1))
        assert core.room("other") == [0, inf]
