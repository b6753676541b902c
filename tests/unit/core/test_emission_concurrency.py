"""The emission rule's concurrency slots: the group limit, the per-tenant limit, fairness
over slots, leases, and their interplay with tenant pauses; all on a ManualClock."""

from __future__ import annotations

import math
import random
from collections import Counter

from fairstream.core import FairScheduler, ManualClock, Pick, TenantPolicy
from fairstream.core.emission import EmissionRule, Wait

Item = tuple[str, int | None]


def make(**kwargs: object) -> tuple[EmissionRule[Item], FairScheduler[Item], ManualClock]:
    clock = ManualClock()
    core: FairScheduler[Item] = FairScheduler(clock)
    rule: EmissionRule[Item] = EmissionRule(core, clock, **kwargs)  # type: ignore[arg-type]
    return rule, core, clock


def backlog(core: FairScheduler[Item], tenant: str, n: int) -> None:
    for i in range(n):
        core.push(tenant, (f"{tenant}{i}", None))


def release(rule: EmissionRule[Item]) -> Pick[Item] | Wait:
    """next(), and a Pick reported started with its item's name as request id."""
    step = rule.next()
    if isinstance(step, Pick):
        rule.started(step.tenant, step.item[0].encode())
        return step
    assert isinstance(step, Wait), step
    return step


def test_without_a_limit_nothing_is_tracked():
    rule, core, _ = make()
    backlog(core, "A", 3)
    assert not rule.tracking
    assert rule.direct()
    rule.set_policy("A", TenantPolicy(max_concurrency=1))
    assert rule.tracking
    assert not rule.direct()
    rule.set_policy("A", None)
    assert not rule.tracking
    core.set_default_policy(TenantPolicy(max_concurrency=4))
    assert rule.tracking


def test_the_group_limit_holds_and_completions_free_slots():
    rule, core, _ = make(max_concurrency=3, concurrency_lease=30)
    backlog(core, "A", 10)
    sent = [release(rule) for _ in range(3)]
    assert all(isinstance(s, Pick) for s in sent)
    step = rule.next()
    assert step == Wait(30.0)  # nothing until a completion, or the first lease at last
    assert len(core) == 7  # nothing was picked
    assert rule.settled([b"A0", b"unknown"]) == 1
    step = release(rule)
    assert isinstance(step, Pick)
    assert step.item[0] == "A3"
    assert isinstance(rule.next(), Wait)


def test_a_tenant_at_its_limit_leaves_the_pick_and_others_go():
    rule, core, _ = make(max_concurrency=10)
    rule.set_policy("A", TenantPolicy(max_concurrency=2))
    backlog(core, "A", 5)
    backlog(core, "B", 5)
    names = [step.item[0] for step in (release(rule) for _ in range(6)) if isinstance(step, Pick)]
    assert Counter(n[0] for n in names) == Counter({"A": 2, "B": 4})
    assert rule.inflight.of("A") == 2
    rule.settled([b"A0"])
    steps = [release(rule) for _ in range(2)]
    # Back in the pick with a free slot (at the tail of the ring, after B).
    assert [s.tenant for s in steps if isinstance(s, Pick)] == ["B", "A"]
    assert rule.inflight.of("A") == 2


def test_a_lone_tenant_at_its_limit_waits_for_a_lease_end_not_forever():
    rule, core, clock = make(concurrency_lease=5)
    rule.set_policy("A", TenantPolicy(max_concurrency=2))
    backlog(core, "A", 4)
    release(rule)
    clock.advance(1)
    release(rule)
    assert rule.next() == Wait(4.0)
    clock.advance(4)
    step = release(rule)  # A0's lease ran out: its slot is back
    assert isinstance(step, Pick)
    assert rule.inflight.expired == 1
    assert rule.inflight.of("A") == 2


def test_weights_3_to_1_hold_3_to_1_of_the_slots():
    rule, core, clock = make(max_concurrency=20, concurrency_lease=600)
    rule.set_policy("heavy", TenantPolicy(weight=3))
    backlog(core, "heavy", 2000)
    backlog(core, "light", 2000)
    rng = random.Random(3)
    held: list[bytes] = []
    shares = []
    for _ in range(1500):
        while True:
            step = release(rule)
            if not isinstance(step, Pick):
                break
            held.append(step.item[0].encode())
        shares.append(rule.inflight.of("heavy") / len(rule.inflight))
        # A random call completes (equal latencies on average).
        done = held.pop(rng.randrange(len(held)))
        rule.settled([done])
        clock.advance(0.01)
    mean = sum(shares[100:]) / len(shares[100:])
    assert 0.70 <= mean <= 0.80  # 3:1 is 0.75


def test_the_concurrency_share_splits_the_group_limit():
    rule, core, _ = make(max_concurrency=20)
    rule.set_concurrency_share(0.5)
    assert rule.inflight.limit == 10
    rule.set_concurrency_share(0.0)
    backlog(core, "A", 1)
    assert isinstance(rule.next(), Wait)
    assert len(core) == 1


def test_a_paused_tenant_at_its_limit_comes_back_only_when_both_end():
    rule, core, clock = make(concurrency_lease=100)
    rule.set_policy("A", TenantPolicy(max_concurrency=1))
    backlog(core, "A", 3)
    backlog(core, "B", 3)
    first = release(rule)
    assert isinstance(first, Pick)
    assert first.tenant == "A"
    assert rule.pause("A", 10)
    rule.settled([b"A0"])  # slot free, but still paused
    picks = [release(rule) for _ in range(3)]
    assert [p.tenant for p in picks if isinstance(p, Pick)] == ["B", "B", "B"]
    clock.advance(10)
    step = release(rule)
    assert isinstance(step, Pick)
    assert step.tenant == "A"
    # Full again, then the pause ends: still out of the pick until its slot is free.
    assert rule.pause("A", 1)
    clock.advance(1)
    assert isinstance(rule.next(), Wait)
    rule.settled([b"A1"])
    assert rule.core.own_policy("A") == TenantPolicy(max_concurrency=1)  # its own, unpaused
    step = release(rule)
    assert isinstance(step, Pick)
    assert step.tenant == "A"


def test_raising_a_tenants_limit_lets_it_back_at_once():
    rule, core, _ = make()
    rule.set_policy("A", TenantPolicy(max_concurrency=1))
    backlog(core, "A", 3)
    release(rule)
    assert rule.next() == Wait(60.0)
    rule.set_policy("A", TenantPolicy(max_concurrency=2))
    assert isinstance(release(rule), Pick)
    assert isinstance(rule.next(), Wait)
    rule.set_policy("A", None)  # unlimited: tracking stops, the held slots stay counted
    assert not rule.tracking
    step = rule.next()
    assert isinstance(step, Pick)


def test_renewed_slots_outlive_their_first_lease():
    rule, core, clock = make(max_concurrency=1, concurrency_lease=10)
    backlog(core, "A", 2)
    release(rule)
    clock.advance(9)
    rule.renew([b"A0"])
    clock.advance(9)
    assert rule.next() == Wait(1.0)
    clock.advance(1)
    assert isinstance(release(rule), Pick)
    assert rule.inflight.expired == 1
    assert math.isfinite(rule.inflight.next_expiry())


def test_the_default_policys_limit_applies_to_every_tenant_following_it():
    rule, core, _ = make()
    core.set_default_policy(TenantPolicy(max_concurrency=1))
    rule.set_policy("own", TenantPolicy(max_concurrency=3))
    for tenant in ("a", "b", "own"):
        backlog(core, tenant, 4)
    picks = []
    while isinstance(step := release(rule), Pick):
        picks.append(step.tenant)
    assert Counter(picks) == Counter({"a": 1, "b": 1, "own": 3})
    rule.settled([b"a0"])
    step = release(rule)
    assert isinstance(step, Pick)
    assert step.tenant == "a"
    assert core.own_policy("b") == TenantPolicy(max_concurrency=1, paused=True)  # held out
