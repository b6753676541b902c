"""The tenant groups' tree of ``/tenants`` and the metrics (``scheduler.tenant_tree``): the
emitter's snapshot of a grouped core, joined with the auditor's rates."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest

from fairstream.adapters.tenant_series import OTHER
from fairstream.core import FairScheduler, GroupScheduler, ManualClock, TenantPolicy
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Observed, add_shares
from fairstream.scheduler.policies.tenant_groups import by_separator
from fairstream.scheduler.tenant_tree import (
    UNFILED,
    GroupCounts,
    TenantGroupCollector,
    add_tree,
    group_series,
)
from tests.unit.scheduler.parts import commit


def grouped_core() -> GroupScheduler[int]:
    """Group A: ten users of 100 records; group B (weight 1): one of 1,000; ungrouped solo."""
    core: GroupScheduler[int] = GroupScheduler(ManualClock(), group_of=by_separator("/"))
    for i in range(10):
        for n in range(100):
            core.push(f"A/u{i}", n)
    for n in range(1000):
        core.push("B/solo", n)
        core.push("solo", n)
    return core


def stats(observed: Observed, core: GroupScheduler[int], rates: dict[str, float], limit: int = 50):
    result = observed.tenant_stats(core, limit, ready=True, partitions=[0], rate_limit=None)
    total = sum(rates.values())
    add_shares(result["tenants"], rates, total)
    add_tree(result, rates, total, limit)
    return result


def test_tenants_gain_the_groups_each_level_against_its_entitlement():
    core = grouped_core()
    observed = Observed()
    commit(observed, {**{f"A/u{i}": 3 for i in range(10)}, "B/solo": 30, "solo": 30})
    rates = {**{f"A/u{i}": 2.0 for i in range(10)}, "B/solo": 20.0, "solo": 20.0}
    result = stats(observed, core, rates)
    json.dumps(result)  # the snapshot object is taken out
    groups = {g["group"]: g for g in result["groups"]}
    assert set(groups) == {"A", "B"}
    a, b = groups["A"], groups["B"]
    assert (a["backlog"], a["emitted"], a["rate"]) == (1000, 30, pytest.approx(20.0))
    assert a["share"] == pytest.approx(1 / 3)
    # Three outer entries waiting (A, B, solo), weight 1 each.
    assert a["entitlement"] == pytest.approx(1 / 3)
    assert b["entitlement"] == pytest.approx(1 / 3)
    assert len(a["members"]) == 10
    for m in a["members"]:
        assert m["share"] == pytest.approx(0.1)
        assert m["entitlement"] == pytest.approx(0.1)
        assert m["overall_entitlement"] == pytest.approx(1 / 30)
        assert m["emitted"] == 3
    rows = {r["tenant"]: r for r in result["tenants"]}
    assert rows["solo"]["group"] is None
    assert rows["solo"]["entitlement"] == pytest.approx(1 / 3)  # the outer level's
    assert rows["A/u1"]["entitlement"] == pytest.approx(1 / 30)  # overall
    assert rows["A/u1"]["entitlement_in_group"] == pytest.approx(0.1)
    assert rows["A/u1"]["share_in_group"] == pytest.approx(0.1)
    assert rows["B/solo"]["entitlement_in_group"] == 1.0


def test_group_weights_members_gone_quiet_and_the_limits():
    core = grouped_core()
    core.set_group_policy("A", TenantPolicy(weight=3))
    core.set_policy("A/u0", TenantPolicy(weight=2))
    observed = Observed()
    commit(observed, {"A/gone": 5})  # emitted, no backlog now: still A's member
    rates = {"A/gone": 4.0, "A/u0": 1.0}
    result = stats(observed, core, rates, limit=3)
    [a, b] = result["groups"]  # the busiest first
    assert a["group"] == "A"
    assert a["weight"] == 3
    assert a["entitlement"] == pytest.approx(3 / 5)  # A 3, B 1, solo 1
    assert a["members_listed"] == 11
    assert [m["tenant"] for m in a["members"]] == ["A/gone", "A/u0", "A/u1"]
    gone, u0, u1 = a["members"]
    assert (gone["backlog"], gone["entitlement"], gone["state"]) == (0, None, "idle")
    assert u0["entitlement"] == pytest.approx(2 / 11)
    assert u1["entitlement"] == pytest.approx(1 / 11)
    assert b["rate"] == 0.0
    assert b["share"] == 0.0


def test_a_flat_core_has_no_tree():
    flat: FairScheduler[int] = FairScheduler(ManualClock())
    flat.push("acme/alice", 1)
    observed = Observed()
    result = observed.tenant_stats(flat, 10, ready=True, partitions=[0], rate_limit=None)
    add_tree(result, {}, 0.0, 10)
    assert "groups" not in result
    assert observed.scrape(flat, 0, 0).tree is None
    assert group_series(None, {}, 0.0, 5) == []


def test_the_group_metrics_are_bounded_and_their_emitted_sum_only_grows():
    core: GroupScheduler[int] = GroupScheduler(ManualClock(), group_of=by_separator("/"))
    observed = Observed()
    for g in range(5):
        for n in range(10 * (g + 1)):
            core.push(f"g{g}/t", n)
    commit(observed, {f"g{g}/t": 1 for g in range(5)})
    commit(observed, {"old/t": 7})  # a group that went quiet
    rows = group_series(observed.scrape(core, 0, 0).tree, {"g4/t": 3.0, "g3/t": 1.0}, 4.0, 2)
    assert [r[0] for r in rows] == ["g4", "g3", OTHER]
    g4, _, other = rows
    assert g4[1:] == (50, 1, pytest.approx(0.75), pytest.approx(0.2))
    assert other[1] == 10 + 20 + 30
    assert other[2] == 3 + 7  # g0..g2, and the quiet group
    assert other[4] == pytest.approx(0.6)
    metrics = Metrics()
    tree = observed.scrape(core, 0, 0).tree
    metrics.registry.register(
        TenantGroupCollector(lambda top: group_series(tree, {"g4/t": 3.0}, 3.0, top))
    )
    text = generate_latest(metrics.registry).decode()
    assert 'fairstream_tenant_group_backlog_records{group="g4"} 50.0' in text
    assert 'fairstream_tenant_group_share{group="g4"} 1.0' in text
    assert 'fairstream_tenant_group_emitted_records_total{group="__other__"}' in text
    assert 'fairstream_tenant_group_entitlement{group="g0"} 0.2' in text


def test_the_auditors_probe_names_the_groups():
    core = grouped_core()
    core.set_group_policy("B", TenantPolicy(weight=2))
    observed = Observed()
    commit(observed, {"A/u1": 2, "A/u2": 3, "B/solo": 4, "solo": 5})
    probe = observed.probe(core, 8, backlogged=True)
    assert probe.group_counts == {"A": 5, "B": 4}
    assert probe.groups == {"A": (1000, 1.0, 0, False, None), "B": (1000, 2.0, 0, False, None)}
    assert probe.group_of is not None
    assert probe.group_of["A/u3"] == "A"
    assert "solo" not in probe.group_of
    flat: FairScheduler[int] = FairScheduler(ManualClock())
    assert observed.probe(flat, 8, backlogged=True).group_counts is None


def test_group_counts_kept_unread_are_added_up_and_filed_whole():
    # Transactions' counts wait as they came until a read files them under the groups; with
    # no read for more than UNFILED transactions they are added up, and nothing is lost.
    core: GroupScheduler[int] = GroupScheduler(ManualClock(), group_of=by_separator("/"))
    core.push("g/t", 1)
    counts = GroupCounts()
    for _ in range(UNFILED + 5):
        counts.emitted({"g/t": 2, "solo": 1})
    counts.file(core)
    assert counts.by_group == {"g": 2 * (UNFILED + 5)}
    counts.emitted({"g/t": 1})
    counts.file(FairScheduler(ManualClock()))  # a flat core: dropped, unfiled
    counts.file(core)
    assert counts.by_group == {"g": 2 * (UNFILED + 5)}


def test_group_counts_keep_nothing_while_the_core_is_flat():
    # A flat core's transactions are not held for a read that will drop them (their counts
    # would stay alive until then); once a read finds the core grouped, they are.
    core: GroupScheduler[int] = GroupScheduler(ManualClock(), group_of=by_separator("/"))
    core.push("g/t", 1)
    counts = GroupCounts()
    counts.file(FairScheduler(ManualClock()))
    counts.emitted({"g/t": 2})
    assert counts._unfiled == []
    counts.file(core)  # grouped since: what was committed meanwhile is not filed
    assert counts.by_group == {}
    counts.emitted({"g/t": 2, "solo": 1})
    counts.emitted({"g/t": 1})
    counts.file(core)
    assert counts.by_group == {"g": 3}
