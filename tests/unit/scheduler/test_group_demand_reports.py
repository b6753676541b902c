"""Tenant groups in the demand reports: the report's version 3 and the release
before's, each instance's part of a group's cap decided as its rate is (lower at once,
raise late, the safe share), and the emitter handing those parts to its core."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fairstream.core import GroupScheduler, ManualClock, TenantPolicy
from fairstream.core.shares import WHOLE, ClassDemand, GroupDemand, GroupParts, flatten
from fairstream.scheduler.coordination.view import RAISE_DELAY, VERSION, PeerView, Report
from fairstream.scheduler.emitter.loop import Emitter
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import AdaptiveChange, InstanceDemand, ShareChange
from fairstream.scheduler.policies.tenant_groups import (
    GroupDefaultPolicy,
    SetGroupPolicy,
    TenantGroups,
)
from fairstream.wire.policy import PolicyRecord, group_policy_key
from tests.unit.scheduler.test_emit_rule import make, push
from tests.unit.scheduler.test_group_view import Log, decide_all, group_shares
from tests.unit.scheduler.test_tenant_groups import policy

__all__ = ["make"]  # the fixture

RATE = 100.0

# What an instance of the release before groups wrote (its Report.encode, version 2).
RELEASED_V2 = (
    b'{"v":2,"instance":"s0-abc","sent_ms":1764600000000,"partitions":[0,2],"demand":'
    b'{"0":{"weight":2.0,"capped":[[1.0,40.0]]},"1":{"weight":1.0,"capped":[]}},'
    b'"coordinated":true,"run":"0f1e2d3c4b5a","seq":17}'
)


def released_v2_demand(raw: bytes) -> dict[int, ClassDemand]:
    """The demand as the release before groups decoded it (its Report.decode)."""
    doc = json.loads(raw)
    return {
        int(p): ClassDemand(float(d["weight"]), tuple((float(w), float(c)) for w, c in d["capped"]))
        for p, d in doc["demand"].items()
    }


def in_group(name: str, cap: float | None, weight: float = 1.0) -> dict[int, ClassDemand]:
    """One backlogged member of group ``name`` (weight 1, uncapped)."""
    return {0: ClassDemand(0, (), (GroupDemand(name, weight, cap, {0: ClassDemand(1.0)}),))}


def test_a_report_of_the_release_before_reads_as_one_level() -> None:
    report = Report.decode(RELEASED_V2)
    assert report.version == 2
    assert report.demand == {0: ClassDemand(2.0, ((1.0, 40.0),)), 1: ClassDemand(1.0)}
    assert (report.instance, report.partitions, report.run, report.seq) == (
        "s0-abc",
        (0, 2),
        "0f1e2d3c4b5a",
        17,
    )


def test_a_report_with_groups_round_trips_and_the_release_before_reads_its_tenants() -> None:
    member = GroupDemand(
        "acme", 2.0, 40.0, {0: ClassDemand(1.0, ((1.0, 5.0),)), 1: ClassDemand(3.0)}
    )
    demand = {0: ClassDemand(1.0, ((2.0, 7.0),), (member,))}
    raw = Report("a", 1, (0,), demand, True, "r", 3).encode()
    back = Report.decode(raw)
    assert (back.demand, back.version) == (demand, VERSION)
    # An instance of the release before sees every tenant, each in its own class.
    assert released_v2_demand(raw) == flatten(demand)
    assert released_v2_demand(raw) == {
        0: ClassDemand(2.0, ((2.0, 7.0), (1.0, 5.0))),
        1: ClassDemand(3.0),
    }
    # Without groups, the report is the release before's, but for its version.
    flat = json.loads(Report("a", 1, (0,), {0: ClassDemand(1.0)}, True, "r", 3).encode())
    assert "levels" not in flat
    assert flat["v"] == VERSION


def one_group(**fields: Any) -> dict[str, Any]:
    group = {"group": "g", "weight": 1, "cap": None, "members": {"0": {"weight": 1, "capped": []}}}
    return {"0": {"weight": 0, "capped": [], "groups": [{**group, **fields}]}}


@pytest.mark.parametrize(
    "levels", [one_group(group=3), one_group(cap=0), one_group(members={}), {"0": []}]
)
def test_a_malformed_group_is_not_a_report(levels: dict[str, Any]) -> None:
    doc = json.loads(RELEASED_V2)
    doc.update(v=3, levels=levels)
    with pytest.raises(ValueError, match="not a coordination report"):
        Report.decode(json.dumps(doc).encode())


def test_two_instances_split_a_groups_cap_and_a_raise_waits() -> None:
    clock, log = ManualClock(), Log()
    a, b = PeerView("a", 4, clock), PeerView("b", 4, clock)
    a_demand = {0: ClassDemand(1.0, (), in_group("G", 40)[0].groups)}  # G's member and t
    got = decide_all(clock, log, {a: (a_demand, (0, 1)), b: (in_group("G", 40), (2, 3))})
    assert got["a"].rate == pytest.approx(80)
    assert got["b"].rate == pytest.approx(20)
    assert got["a"].parts.of("G") == pytest.approx((0.5, 0.5))
    assert got["b"].parts.of("G") == pytest.approx((0.5, 0.5))
    # b's member leaves: b lowers its part at once, a raises its own only after the delay.
    log.publish(b, {}, (2, 3))
    log.publish(a, a_demand, (0, 1))
    log.read(a), log.read(b)
    assert b.decide({}, (2, 3), RATE).parts.of("G")[1] == pytest.approx(0.025)
    assert a.decide(a_demand, (0, 1), RATE).parts.of("G")[1] == pytest.approx(0.5)
    clock.advance(RAISE_DELAY)
    assert a.decide(a_demand, (0, 1), RATE).parts.of("G")[1] == pytest.approx(0.975)


def test_a_peer_of_the_release_before_shares_one_level_and_every_cap_whole() -> None:
    clock, log = ManualClock(), Log()
    a = PeerView("a", 4, clock)
    demand = {0: ClassDemand(0, (), (GroupDemand("G", 1, None, {0: ClassDemand(3.0)}),))}
    for _ in range(3):
        log.publish(a, demand, (1, 3))
        log.records.append(("old", RELEASED_V2.replace(b'"s0-abc"', b'"old"')))
        log.read(a)
        a.decide(demand, (1, 3), RATE)
        clock.advance(RAISE_DELAY + 0.01)
    decision = a.decide(demand, (1, 3), RATE)
    # One level, as the old instance computes it: a's three tenants of weight 1 against
    # the old one's 2 + 1 (capped at 40) in class 0, half each (two levels: G's 1 of 4).
    assert decision.rate == pytest.approx(RATE / 2)
    assert decision.parts == WHOLE


def test_the_safe_share_takes_each_groups_cap_by_partitions_owned() -> None:
    clock = ManualClock()
    view = PeerView("a", 4, clock)
    view.decide(in_group("G", 40), (0,), RATE)
    clock.advance(RAISE_DELAY)
    decision = view.decide(in_group("G", 40), (0,), RATE)
    assert not decision.coordinated
    assert decision.rate == pytest.approx(RATE / 4)
    assert decision.parts == GroupParts(0.25)


def test_the_emitter_gives_its_core_its_part_and_reports_the_policy_as_set(make) -> None:
    emitter: Emitter = make(tenant_group_separator="/")
    policy(emitter, group_policy_key("acme"), weight=2, rate_cap=40)
    policy(emitter, group_policy_key(None), rate_cap=10)  # every other group's
    push(emitter, "acme/a", 0)
    core = emitter.core
    assert isinstance(core, GroupScheduler)
    parts = GroupParts(0.5, {"acme": (0.25, 0.75)})
    emitter._control(ShareChange(RATE, 1.0, 10.0, parts))
    assert core.group_policy("acme") == TenantPolicy(weight=0.5, rate_cap=30)
    assert core.group_policy("other") == TenantPolicy(rate_cap=5)
    # The demand reported is of the policy as set, not of this instance's part.
    demand = emitter.demand().classes
    assert demand[0].groups == (GroupDemand("acme", 2, 40, {0: ClassDemand(1.0)}),)
    policy(emitter, group_policy_key("acme"), weight=2, rate_cap=60)  # the part stays
    assert core.group_policy("acme") == TenantPolicy(weight=0.5, rate_cap=45)
    emitter._control(ShareChange(RATE, 1.0, 10.0, WHOLE))
    assert core.own_group_policy("acme") == TenantPolicy(weight=2, rate_cap=60)
    assert core.group_policy("other") == TenantPolicy(rate_cap=10)


def test_set_parts_says_only_what_changed_and_a_rewind_keeps_the_parts() -> None:
    groups = TenantGroups("/")
    groups.group_record("", PolicyRecord(TenantPolicy(rate_cap=10), 1))
    groups.group_record("gold", PolicyRecord(TenantPolicy(weight=3, rate_cap=40), 1))
    parts = GroupParts(0.5, {"acme": (0.5, 0.5)})
    assert groups.set_parts(parts) == [
        GroupDefaultPolicy(TenantPolicy(rate_cap=5)),
        SetGroupPolicy("acme", TenantPolicy(weight=0.5, rate_cap=5)),
        SetGroupPolicy("gold", TenantPolicy(weight=3, rate_cap=20)),
    ]
    assert groups.set_parts(GroupParts(0.50000001, {"acme": (0.5, 0.5)})) == []  # the grain
    assert groups.policy("gold") == TenantPolicy(weight=3, rate_cap=40)
    core = groups.new_core(ManualClock(), 1, TenantPolicy())
    assert isinstance(core, GroupScheduler)
    assert core.group_policy("gold") == TenantPolicy(weight=3, rate_cap=20)
    assert core.group_policy("acme") == TenantPolicy(weight=0.5, rate_cap=5)
    assert core.group_policy("other") == TenantPolicy(rate_cap=5)
    # A part no caps need (a group without one), or nothing: the policies as set.
    assert groups.set_parts(WHOLE) == [
        GroupDefaultPolicy(TenantPolicy(rate_cap=10)),
        SetGroupPolicy("acme", None),
        SetGroupPolicy("gold", TenantPolicy(weight=3, rate_cap=40)),
    ]


def test_the_group_thread_hands_the_parts_over_and_counts_a_group_once() -> None:
    clock, log = ManualClock(50.0), Log()
    handoff = Handoff()
    shares = group_shares(
        handoff, lambda: InstanceDemand(in_group("G", None), (0,)), partitions=2, clock=clock
    )
    b = PeerView("b", 2, clock)
    try:
        for _ in range(3):
            log.publish(shares.view, in_group("G", None), (0,))
            log.publish(b, in_group("G", None), (1,))
            log.read(shares.view)
            log.read(b)  # b reads itself back: its next reports say coordinated
            shares._apply(in_group("G", None), (0,))
            clock.advance(RAISE_DELAY + 0.01)
        shares._apply(in_group("G", None), (0,))
    finally:
        shares._consumer.close()
    last = [c for c in handoff.controls if isinstance(c, ShareChange)][-1]
    assert last.rate == pytest.approx(RATE / 2)
    assert last.parts.of("G") == pytest.approx((0.5, 0.5))
    # G's members are on both instances: its weight counts once in the group's demand.
    weight = shares.metrics.registry.get_sample_value(
        "fairstream_group_demand_weight", {"priority": "0"}
    )
    assert weight == 1.0


def test_the_demand_carries_the_adapted_fraction_the_feedback_thread_handed_over(
    make,
) -> None:
    """The group thread learns the adapted rate from the emitter, with the demand."""
    emitter: Emitter = make()
    assert emitter.demand().rate_factor == 1.0
    emitter._control(AdaptiveChange(0.4, 0.0))
    assert emitter.demand().rate_factor == pytest.approx(0.4)


def test_a_cut_of_the_adapted_rate_applies_at_once_and_a_raise_waits_for_the_group(
    make,
) -> None:
    """Under group shares, the share the group thread computed carries the adapted fraction
    it read; a cut the feedback makes later lowers it at once, without waiting for the
    group's next read of the demand; a raise waits for the group's next share."""
    emitter: Emitter = make(share_by="demand", rate=200.0)

    def share() -> float | None:
        return emitter.metrics.registry.get_sample_value("fairstream_group_rate_share")

    emitter._control(ShareChange(100.0, 0.5, 1e9, WHOLE, 1.0))
    assert share() == pytest.approx(0.5)
    emitter._control(AdaptiveChange(0.4, 0.0))  # the API pushed back: 0.4 of --rate
    assert share() == pytest.approx(0.2)
    emitter._control(ShareChange(40.0, 0.2, 1e9, WHOLE, 0.4))  # the group caught up
    assert share() == pytest.approx(0.2)
    emitter._control(AdaptiveChange(0.8, 0.0))  # back up: the group's next share says
    assert share() == pytest.approx(0.2)
    emitter._control(ShareChange(80.0, 0.4, 1e9, WHOLE, 0.8))
    assert share() == pytest.approx(0.4)
