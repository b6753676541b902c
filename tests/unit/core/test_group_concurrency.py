"""A tenant group's ``max_concurrency`` in the emission rule (``fairstream.core.groupslots``):
the group's slots are counted over its members, the group leaves the pick at its limit and
comes back when a slot is settled or its lease ends, policy changes apply at once, a tenant
moving between groups neither leaks nor underflows a count; groups without a limit and the
flat core behave as before. All on a ManualClock."""

from __future__ import annotations

import random
from collections import Counter, deque

import pytest

from fairstream.core import FairScheduler, GroupScheduler, ManualClock, Pick, TenantPolicy
from fairstream.core.emission import EmissionRule, Wait

Item = tuple[str, int | None]


def make(**kwargs: object) -> tuple[EmissionRule[Item], GroupScheduler[Item], ManualClock]:
    clock = ManualClock()
    core: GroupScheduler[Item] = GroupScheduler(clock)
    rule: EmissionRule[Item] = EmissionRule(core, clock, **kwargs)  # type: ignore[arg-type]
    return rule, core, clock


def backlog(core: GroupScheduler[Item] | FairScheduler[Item], tenant: str, n: int) -> None:
    for i in range(n):
        core.push(tenant, (f"{tenant}#{i}", None))


def release(rule: EmissionRule[Item]) -> Pick[Item] | Wait:
    """next(), and a Pick reported started with its item's name as request id."""
    step = rule.next()
    if isinstance(step, Pick):
        rule.started(step.tenant, step.item[0])
        return step
    assert isinstance(step, Wait), step
    return step


def drain(rule: EmissionRule[Item], most: int = 100) -> list[str]:
    """Release until the rule says wait; the tenants released, in order."""
    out = []
    for _ in range(most):
        step = release(rule)
        if not isinstance(step, Pick):
            break
        out.append(step.tenant)
    return out


def grouped(core: GroupScheduler[Item], group: str, *tenants: str) -> None:
    for tenant in tenants:
        core.set_group(tenant, group)


def test_a_group_limit_of_3_is_never_exceeded_by_its_backlogged_members():
    rule, core, _ = make()
    grouped(core, "acme", "acme/a", "acme/b")
    core.set_group_policy("acme", TenantPolicy(max_concurrency=3))
    assert rule.tracking
    assert not rule.direct()
    backlog(core, "acme/a", 200)
    backlog(core, "acme/b", 200)
    rng = random.Random(7)
    running: list[str] = []  # request ids released and not settled
    most = sent = 0
    while sent < 300:
        step = release(rule)
        while isinstance(step, Pick):
            running.append(step.item[0])
            sent += 1
            step = release(rule)
        assert step == Wait(pytest.approx(60.0))  # held until a slot is freed
        in_group = rule.inflight.of_group("acme")
        assert in_group == len(running) <= 3
        most = max(most, in_group)
        # Settle a random one of the running requests (completions come in any order).
        assert rule.settled([running.pop(rng.randrange(len(running)))]) == 1
    assert most == 3


def test_the_members_share_the_group_slots_by_weight_and_others_use_the_rest():
    rule, core, _ = make(max_concurrency=10)
    grouped(core, "acme", "acme/a", "acme/b")
    core.set_group_policy("acme", TenantPolicy(max_concurrency=3))
    core.set_policy("acme/a", TenantPolicy(weight=2))
    for tenant in ("acme/a", "acme/b", "solo"):
        backlog(core, tenant, 1000)
    running: deque[str] = deque()
    sent: Counter[str] = Counter()
    most = 0
    for _ in range(600):
        for step in (release(rule) for _ in range(20)):
            if not isinstance(step, Pick):
                break
            running.append(step.item[0])
            sent[step.tenant] += 1
        most = max(most, rule.inflight.of_group("acme"))
        assert most <= 3
        assert len(rule.inflight) == 10  # every slot busy: the others use the rest
        rule.settled([running.popleft()])  # the oldest completes first
    assert most == 3
    group = sent["acme/a"] + sent["acme/b"]
    assert sent["acme/a"] / group == pytest.approx(2 / 3, rel=0.05)
    assert sent["solo"] / (group + sent["solo"]) == pytest.approx(7 / 10, rel=0.05)


def test_a_settled_slot_lets_the_group_back_and_lease_expiry_frees_lost_ones():
    rule, core, clock = make(concurrency_lease=10)
    grouped(core, "acme", "acme/a", "acme/b")
    core.set_group_policy("acme", TenantPolicy(max_concurrency=3))
    backlog(core, "acme/a", 10)
    backlog(core, "acme/b", 10)
    assert len(drain(rule)) == 3
    assert rule.next() == Wait(10.0)  # nothing else to pick: until the first lease ends
    assert core.held_back("acme/a")
    assert core.held_back("acme/b")
    assert core.group_policy("acme").paused is False  # held, not paused by policy
    clock.advance(5.0)
    assert rule.settled(["acme/a#0"]) == 1
    assert drain(rule) == ["acme/b"]
    assert rule.inflight.of_group("acme") == 3
    # The completions are lost: the leases give the slots back, one lease later.
    clock.advance(4.9)
    assert rule.next() == Wait(pytest.approx(0.1))
    clock.advance(0.1)
    assert len(drain(rule)) == 2  # the 2 slots taken at t=0 and still held expired
    assert rule.inflight.expired == 2
    assert rule.inflight.of_group("acme") == 3
    clock.advance(5.0)
    assert len(drain(rule)) == 1  # the one taken at t=5
    assert rule.inflight.expired == 3


def test_a_group_policy_change_holds_or_lets_the_group_back_at_once():
    rule, core, _ = make()
    grouped(core, "acme", "acme/a")
    backlog(core, "acme/a", 20)
    core.set_group_policy("acme", TenantPolicy(max_concurrency=2))
    assert len(drain(rule)) == 2
    core.set_group_policy("acme", TenantPolicy(max_concurrency=5, weight=2))  # raised
    assert len(drain(rule)) == 3
    core.set_group_policy("acme", TenantPolicy(max_concurrency=2))  # lowered below 5 held
    rule.settled(["acme/a#0", "acme/a#1"])
    assert drain(rule) == []  # 3 held, the limit 2: still out of the pick
    rule.settled(["acme/a#2"])
    assert drain(rule) == []  # 2 held: at the limit
    rule.settled(["acme/a#3"])
    assert drain(rule) == ["acme/a"]
    core.set_group_policy("acme", None)  # no limit any more
    assert not core.held_back("acme/a")
    assert not rule.tracking
    assert len(drain(rule)) == 14  # the rest of the backlog
    assert rule.inflight.of_group("acme") == 16  # still counted while tracked
    # The groups' default limits every group without its own policy.
    backlog(core, "acme/a", 5)
    core.set_group_default_policy(TenantPolicy(max_concurrency=1))
    assert rule.tracking
    assert drain(rule) == []  # its slots still held count against the new limit
    rule.settled([f"acme/a#{i}" for i in range(20)])
    assert drain(rule) == ["acme/a"]


def test_a_group_without_a_limit_and_ungrouped_tenants_are_not_held():
    limited, lcore, _ = make()
    plain, pcore, _ = make()
    for core in (lcore, pcore):
        grouped(core, "acme", "acme/a")
        grouped(core, "beta", "beta/a", "beta/b")
        for tenant in ("acme/a", "beta/a", "beta/b", "solo"):
            backlog(core, tenant, 30)
    lcore.set_group_policy("acme", TenantPolicy(max_concurrency=1))
    assert not plain.tracking
    assert plain.direct()
    sent = drain(limited, 60)
    assert sent.count("acme/a") == 1
    # Without acme, the others go in the order they go without any group limit.
    picks = [pcore.pick() for _ in range(100)]
    others = [p.tenant for p in picks if p is not None and p.tenant != "acme/a"]
    assert [t for t in sent if t != "acme/a"] == others[:59]
    assert Counter(others[:59]) == Counter({"solo": 29, "beta/a": 16, "beta/b": 14})


def test_a_tenant_moving_between_groups_counts_its_slots_where_they_were_taken():
    rule, core, _ = make()
    grouped(core, "acme", "x")
    core.set_group_policy("acme", TenantPolicy(max_concurrency=2))
    core.set_group_policy("beta", TenantPolicy(max_concurrency=2))
    backlog(core, "x", 10)
    assert drain(rule) == ["x", "x"]
    core.set_group("x", "beta")  # moves with its backlog; its 2 slots stay acme's
    assert rule.inflight.by_group() == {"acme": 2}
    assert core.held_back("x") is False
    assert drain(rule) == ["x", "x"]
    assert rule.inflight.by_group() == {"acme": 2, "beta": 2}
    core.set_group("x", None)  # ungrouped now: its new slots count for no group
    rule.settled(["x#0", "x#1", "x#0"])  # acme's two, one reported twice
    assert rule.inflight.by_group() == {"beta": 2}
    assert len(drain(rule)) == 6
    rule.settled(["x#2", "x#3"])
    assert rule.inflight.by_group() == {}
    assert rule.groups.full == set()


def test_each_instance_applies_its_part_of_a_group_limit():
    rule, core, _ = make(max_concurrency=12)
    grouped(core, "acme", "acme/a")
    core.set_group_policy("acme", TenantPolicy(max_concurrency=4))
    backlog(core, "acme/a", 20)
    rule.set_concurrency_share(0.5)  # half the partitions: 6 slots here, 2 of the group's
    assert len(drain(rule)) == 2
    rule.set_concurrency_share(1.0)
    assert len(drain(rule)) == 2


def test_a_rebuilt_core_keeps_the_group_held():
    rule, core, clock = make()
    grouped(core, "acme", "acme/a")
    core.set_group_policy("acme", TenantPolicy(max_concurrency=2))
    backlog(core, "acme/a", 10)
    assert len(drain(rule)) == 2
    new: GroupScheduler[Item] = GroupScheduler(clock)
    new.set_group("acme/a", "acme")
    new.set_group_policy("acme", TenantPolicy(max_concurrency=2))
    for pick in core.take_backlog("acme/a"):
        new.push(pick.tenant, pick.item, pick.cost)
    rule.replace_core(new)
    assert drain(rule) == []
    core.set_group_policy("acme", None)  # the old core no longer speaks to the rule
    assert rule.groups.full == {"acme"}
    rule.settled(["acme/a#0"])
    assert drain(rule) == ["acme/a"]


def test_the_flat_core_counts_no_groups():
    clock = ManualClock()
    core: FairScheduler[Item] = FairScheduler(clock)
    rule: EmissionRule[Item] = EmissionRule(core, clock, max_concurrency=2)
    backlog(core, "A", 5)
    assert drain(rule) == ["A", "A"]
    assert rule.inflight.by_group() == {}
    assert rule.groups.full == set()
    assert not rule.groups.limited
    rule.settled(["A#0"])
    assert drain(rule) == ["A"]
