"""Group demand across instances (fairstream.core.shares): the two-level water
fill, each instance's part of a tenant group's weight and rate cap, and that without groups
nothing changes (to the bit, against the one-level allocation of the release before)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairstream.core import FairScheduler, GroupScheduler, ManualClock, TenantPolicy
from fairstream.core.shares import (
    MAX_GROUPS,
    MAX_MEMBERS_CAPPED,
    WHOLE,
    ClassDemand,
    Demand,
    GroupDemand,
    _level,
    allocate,
    backlogged_demand,
    flatten,
    instance_rate,
    instance_share,
    summarize,
)


def released_allocate(demands: Mapping[str, Demand], rate: float) -> dict[str, float]:
    """``allocate`` as the release before tenant groups had it (one level), verbatim."""
    shares = dict.fromkeys(demands, 0.0)
    remaining = rate
    classes = sorted({c for d in demands.values() for c, cd in d.items() if not cd.empty})
    for priority in classes:
        if remaining <= 0:
            break
        members = {i: d[priority] for i, d in demands.items() if priority in d}
        uncapped = sum(cd.weight for cd in members.values())
        capped = [(w, cap) for cd in members.values() for w, cap in cd.capped]
        level = _level(uncapped, capped, remaining)
        for instance, cd in members.items():
            if level is None:
                take = sum(cap for _, cap in cd.capped)
            else:
                take = cd.weight * level + sum(min(w * level, cap) for w, cap in cd.capped)
            shares[instance] += min(take, remaining)
        if level is None:
            remaining -= sum(cap for _, cap in capped)
        else:
            remaining = 0.0
    return shares


def group(name: str, weight: float, cap: float | None, *members: float) -> GroupDemand:
    """A group with uncapped members of these weights, all in class 0 of the group."""
    return GroupDemand(name, weight, cap, {0: ClassDemand(sum(members))})


def test_a_group_cap_holds_over_two_instances_and_the_rest_goes_to_the_others() -> None:
    # G (cap 40) has a member on a and one on b; t, ungrouped, is on a. Rate 100.
    demands = {
        "a": {0: ClassDemand(1.0, (), (group("G", 1, 40, 1),))},
        "b": {0: ClassDemand(0.0, (), (group("G", 1, 40, 1),))},
    }
    assert allocate(demands, 100) == pytest.approx({"a": 20 + 60, "b": 20})
    a, b = (instance_share(demands, i, 100) for i in "ab")
    # Each takes half of G's weight and cap: 20/s each, 40 in all; t gets its 60 on a.
    assert a.parts.of("G") == pytest.approx((0.5, 0.5))
    assert b.parts.of("G") == pytest.approx((0.5, 0.5))


def test_groups_then_members_not_tenants() -> None:
    # G1 has one member on a and one on b; G2 two members on a. Equal group weights:
    # half each; one level (four tenants) would give a 3/4 and G1 half of it.
    demands = {
        "a": {0: ClassDemand(0, (), (group("G1", 1, None, 1), group("G2", 1, None, 1, 1)))},
        "b": {0: ClassDemand(0, (), (group("G1", 1, None, 1),))},
    }
    assert allocate(demands, 100) == pytest.approx({"a": 75, "b": 25})
    a = instance_share(demands, "a", 100)
    # On a, G1 weighs half its weight and G2 all of it: a's 75/s split 25:50 locally
    # (b, without G2's members, keeps the floor of a cap G2 would have: 0.05 / 2).
    assert a.parts.of("G1") == pytest.approx((0.5, 0.5))
    assert a.parts.of("G2") == pytest.approx((1.0, 0.975))
    assert instance_share(demands, "b", 100).parts.of("G2") == pytest.approx((1.0, 0.025))


def test_a_group_of_capped_members_takes_no_more_than_their_caps() -> None:
    capped = GroupDemand(
        "G", 5, None, {0: ClassDemand(0, ((1, 10),)), 1: ClassDemand(0, ((1, 5),))}
    )
    demands = {"a": {0: ClassDemand(0, (), (capped,))}, "b": {0: ClassDemand(1)}}
    assert allocate(demands, 100) == pytest.approx({"a": 15, "b": 85})


def test_inside_a_group_members_share_by_weight_and_class() -> None:
    g_a = GroupDemand("G", 1, None, {0: ClassDemand(3.0)})
    g_b = GroupDemand("G", 1, None, {0: ClassDemand(1.0), 1: ClassDemand(9.0)})
    demands = {"a": {0: ClassDemand(0, (), (g_a,))}, "b": {0: ClassDemand(0, (), (g_b,))}}
    # Class 1 of the group gets nothing while class 0 takes the group's whole part.
    assert allocate(demands, 100) == pytest.approx({"a": 75, "b": 25})


def test_an_instance_without_the_groups_members_keeps_the_floor_of_its_cap() -> None:
    demands = {
        "a": {0: ClassDemand(0, (), (group("G", 1, 40, 1),))},
        "b": {0: ClassDemand(1.0)},
        "c": {},
    }
    parts = {i: instance_share(demands, i, 100).parts for i in demands}
    floor = 0.05 / 3
    assert parts["b"].of("G") == pytest.approx((1.0, floor))
    assert parts["c"].of("G") == pytest.approx((1.0, floor))
    assert parts["a"].of("G") == pytest.approx((1.0, 1 - 2 * floor))
    assert sum(p.of("G")[1] for p in parts.values()) == pytest.approx(1.0)
    # A group nobody reports: each keeps the floor of its cap, at most the cap in all.
    assert parts["a"].of("other") == pytest.approx((1.0, floor))


def test_alone_every_group_is_whole() -> None:
    demands = {"a": {0: ClassDemand(0, (), (group("G", 1, 40, 1),))}}
    assert instance_share(demands, "a", 100).parts == WHOLE


def test_summarize_bounds_groups_and_their_members() -> None:
    members = [(0, 1.0, float(c)) for c in range(1, MAX_MEMBERS_CAPPED + 5)]
    groups = [(f"g{i}", 0, 1.0 + i, None, [(0, 1.0, None)]) for i in range(MAX_GROUPS + 3)]
    groups.append(("capped", 0, 0.5, 30.0, members))
    demand = summarize([(0, 2.0, None)], groups)
    kept = demand[0].groups
    assert len(kept) == MAX_GROUPS
    assert kept[0].group == "capped"  # a capped group is kept, its cap to share
    capped_members = kept[0].members[0].capped
    assert len(capped_members) == MAX_MEMBERS_CAPPED
    assert sum(c for _, c in capped_members) == pytest.approx(sum(c for _, _, c in members))
    # The lightest groups count as one tenant each, of their weight.
    assert {g.group for g in kept} == {"capped", *(f"g{i}" for i in range(4, MAX_GROUPS + 3))}
    assert demand[0].weight == pytest.approx(2.0 + 1 + 2 + 3 + 4)


def test_flatten_is_every_tenant_in_its_own_class() -> None:
    g = GroupDemand("G", 3, 40, {0: ClassDemand(2.0, ((1.0, 5.0),)), 2: ClassDemand(1.0)})
    demand = {1: ClassDemand(1.0, ((1.0, 7.0),), (g,))}
    assert flatten(demand) == {
        0: ClassDemand(2.0, ((1.0, 5.0),)),
        1: ClassDemand(1.0, ((1.0, 7.0),)),
        2: ClassDemand(1.0),
    }


def test_backlogged_demand_reports_groups_under_their_policies_as_set() -> None:
    core: GroupScheduler[str] = GroupScheduler(
        ManualClock(), group_of=lambda t: t.split("/")[0] if "/" in t else None
    )
    core.set_group_policy("acme", TenantPolicy(weight=0.5, rate_cap=20))  # this instance's part
    core.set_policy("acme/b", TenantPolicy(weight=2, rate_cap=7))
    for tenant in ("acme/a", "acme/b", "solo"):
        core.push(tenant, tenant)
    as_set = TenantPolicy(weight=1, rate_cap=40)
    demand = backlogged_demand(core, lambda g: as_set)
    assert demand == {
        0: ClassDemand(1.0, (), (GroupDemand("acme", 1, 40, {0: ClassDemand(1.0, ((2, 7),))}),))
    }
    assert backlogged_demand(core)[0].groups[0].cap == 20  # the core's, without the lookup
    core.set_group_policy("acme", TenantPolicy(paused=True))
    assert backlogged_demand(core) == {0: ClassDemand(1.0)}


def test_bad_group_demands_are_refused() -> None:
    with pytest.raises(ValueError, match="positive weight"):
        GroupDemand("G", 0, None, {0: ClassDemand(1)})
    with pytest.raises(ValueError, match="members"):
        GroupDemand("G", 1, None, {})
    with pytest.raises(ValueError, match="members"):
        GroupDemand("G", 1, None, {0: ClassDemand(0, (), (group("H", 1, None, 1),))})


class_demand = st.builds(
    ClassDemand,
    st.one_of(st.just(0.0), st.floats(1e-6, 10)),
    st.lists(st.tuples(st.floats(1e-6, 10), st.floats(1e-6, 500)), max_size=4).map(tuple),
)
flat_demands = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.dictionaries(st.integers(0, 2), class_demand, max_size=3),
    min_size=1,
)


@given(flat_demands, st.floats(1, 10_000, allow_nan=False))
def test_without_groups_the_allocation_is_the_released_one_to_the_bit(demands, rate) -> None:
    assert allocate(demands, rate) == released_allocate(demands, rate)
    for own in demands:
        assert instance_share(demands, own, rate).rate == instance_rate(demands, own, rate)


@given(flat_demands, st.floats(1, 10_000, allow_nan=False))
def test_tenants_as_groups_of_one_get_what_they_get_ungrouped(demands, rate) -> None:
    """Each tenant made a group of one (its weight, its cap): the same shares."""
    singletons: dict[str, dict[int, ClassDemand]] = {}
    for instance, demand in demands.items():
        singletons[instance] = {}
        for priority, cd in demand.items():
            groups = [
                GroupDemand(f"{instance}/{k}", w, cap, {0: ClassDemand(0, ((w, cap),))})
                for k, (w, cap) in enumerate(cd.capped)
            ]
            if cd.weight:
                groups.append(GroupDemand(f"{instance}/u", cd.weight, None, {0: ClassDemand(1.0)}))
            singletons[instance][priority] = ClassDemand(0, (), tuple(groups))
    flat, grouped = allocate(demands, rate), allocate(singletons, rate)
    assert grouped == pytest.approx(flat, rel=1e-9, abs=1e-9)


members = st.dictionaries(
    st.integers(0, 1), class_demand.filter(lambda cd: not cd.empty), min_size=1, max_size=2
)
group_demand = st.builds(
    GroupDemand,
    st.sampled_from(["G", "H", "K"]),
    st.floats(0.1, 5),
    st.one_of(st.none(), st.floats(1, 300)),
    members,
)
grouped_class = st.builds(
    lambda cd, groups: ClassDemand(
        cd.weight, cd.capped, tuple({g.group: g for g in groups}.values())
    ),
    class_demand,
    st.lists(group_demand, max_size=3),
)
grouped_demands = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.dictionaries(st.integers(0, 1), grouped_class, max_size=2),
    min_size=1,
)


@given(grouped_demands, st.floats(1, 10_000, allow_nan=False))
def test_instances_and_group_caps_never_add_up_to_more_than_theirs(demands, rate) -> None:
    shares = {own: instance_share(demands, own, rate) for own in demands}
    assert sum(s.rate for s in shares.values()) <= rate * (1 + 1e-9)
    assert all(s.rate >= 0 for s in shares.values())
    names = {g.group for d in demands.values() for cd in d.values() for g in cd.groups}
    for name in names:
        parts = [s.parts.of(name) for s in shares.values()]
        assert sum(cap for _, cap in parts) <= 1 + 1e-9
        assert all(0 <= w <= 1 + 1e-9 and cap >= 0 for w, cap in parts)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 40),
            st.sampled_from(
                [
                    None,
                    TenantPolicy(weight=2.5),
                    TenantPolicy(priority=1, weight=0.5),
                    TenantPolicy(paused=True),
                    TenantPolicy(rate_cap=3.0),
                    TenantPolicy(priority=1, rate_cap=7.0, weight=3.0),
                ]
            ),
        ),
        max_size=60,
    )
)
def test_a_flat_cores_demand_counted_by_policy_is_its_demand_tenant_by_tenant(
    tenants: list[tuple[int, TenantPolicy | None]],
) -> None:
    # A flat core's demand is read by policy (``FairScheduler.policy_counts``): the same
    # demand as its tenants' entries one by one (up to rounding in the weights' sums).
    core: FairScheduler[int] = FairScheduler(ManualClock())
    for n, (tenant, policy) in enumerate(tenants):
        core.set_policy(f"t{tenant}", policy)
        core.push(f"t{tenant}", n)
    entries = [
        (p.priority, p.weight, p.rate_cap)
        for p in (core.policy(t) for t in core.tenants())
        if not p.paused
    ]
    fast, slow = backlogged_demand(core), summarize(entries)
    assert fast.keys() == slow.keys()
    for priority, demand in slow.items():
        assert fast[priority].weight == pytest.approx(demand.weight)
        assert fast[priority].capped == demand.capped
        assert fast[priority].groups == demand.groups
