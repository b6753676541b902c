"""Automatic demotion (``fairstream.core.demotion``): a flooding tenant is demoted one class,
quiet tenants arriving meanwhile are served ahead of it, and it is promoted back once quiet;
hysteresis, the sliding window, the metrics. Then the same applied to a ``FairScheduler``
and, inside and between groups, a ``GroupScheduler``."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from fairstream.core import FairScheduler, GroupScheduler, ManualClock, TenantPolicy
from fairstream.core.demotion import Change, Demotion, DemotionPolicy, demoted


def tracker(**kwargs: object) -> tuple[Demotion, ManualClock]:
    clock = ManualClock()
    return Demotion(DemotionPolicy(**kwargs), clock), clock  # type: ignore[arg-type]


# -- the policy -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"share": None},
        {"share": 0},
        {"share": 1.5},
        {"share": math.nan},
        {"share": 0.5, "quiet_share": 0.6},
        {"share": None, "backlog": 10, "quiet_share": 0.1},
        {"backlog": 0},
        {"backlog": 10, "quiet_backlog": 11},
        {"quiet_backlog": 1},
        {"backlog": 2.5},
        {"window": 0},
        {"window": math.inf},
        {"quiet": -1},
        {"min_egress": -1},
        {"buckets": 0},
        {"share": True},
    ],
)
def test_policies_that_make_no_sense_are_refused(kwargs):
    with pytest.raises(ValueError):  # noqa: PT011 (one reason per case, each named)
        DemotionPolicy(**kwargs)


def test_the_quiet_thresholds_default_to_half():
    policy = DemotionPolicy(share=0.4, backlog=100)
    assert policy.quiet_share_in_force == pytest.approx(0.2)
    assert policy.quiet_backlog_in_force == 50
    assert DemotionPolicy(share=None, backlog=3).quiet_share_in_force is None
    assert DemotionPolicy(share=0.4).quiet_backlog_in_force is None
    with pytest.raises(TypeError):
        Demotion("share=0.5", ManualClock())  # type: ignore[arg-type]


def test_demoted_is_one_class_down():
    assert demoted(TenantPolicy(weight=3, priority=1)) == TenantPolicy(weight=3, priority=2)


# -- decisions ----------------------------------------------------------------------------------


def test_a_tenant_over_the_share_is_demoted_and_promoted_after_the_quiet_period():
    d, clock = tracker(share=0.5, quiet_share=0.2, window=10, quiet=5)
    for _ in range(8):
        d.sent("flood")
    d.sent("a")
    d.sent("b")
    assert d.share("flood") == pytest.approx(0.8)
    assert d.review({}) == [Change("flood", True)]
    assert "flood" in d
    assert d.noisy_count == 1
    assert d.review({}) == []  # already noisy: no second change
    # The flood stops; the others go on. Its share falls as the window slides.
    promoted_at = None
    for step in range(1, 400):
        clock.advance(0.1)
        d.sent("a")
        d.sent("b")
        if Change("flood", False) in d.review({}):
            promoted_at = step / 10
            break
    assert promoted_at is not None
    # Quiet once the flood's 8 fall to 20% of the window, then 5 s more; within the window.
    assert 5 <= promoted_at <= 10 + 5 + 0.2
    assert "flood" not in d
    assert d.noisy_count == 0


def test_between_the_two_shares_a_noisy_tenant_stays_noisy():
    d, clock = tracker(share=0.5, quiet_share=0.2, window=100, quiet=1)
    d.sent("x", 6)
    d.sent("y", 2)
    d.sent("z", 2)
    assert d.review({}) == [Change("x", True)]
    for _ in range(10):  # x falls to 40%: below share, still above quiet_share
        clock.advance(1)
        for tenant in "xyz":
            d.sent(tenant)
        assert d.review({}) == []
    assert 0.2 < d.share("x") < 0.5
    assert "x" in d
    assert d.quiet_since("x") is None


def test_quiet_time_starts_over_when_noisy_again():
    d, clock = tracker(share=0.5, quiet_share=0.3, window=1, buckets=10, quiet=2)
    for _ in range(10):
        d.sent("x")
    assert d.review({}) == [Change("x", True)]
    others = ("y", "z", "w")  # a third of the egress each: none of them noisy
    clock.advance(1.05)  # the window moved past x's egress
    for tenant in others:
        d.sent(tenant)
    assert d.review({}) == []
    assert d.quiet_since("x") == pytest.approx(1.05)
    clock.advance(1)
    for _ in range(10):
        d.sent("x")  # floods again before its 2 s of quiet
    assert d.review({}) == []
    assert d.quiet_since("x") is None
    clock.advance(1.05)
    for tenant in others:
        d.sent(tenant)
    assert d.review({}) == []
    clock.advance(2)
    for tenant in others:
        d.sent(tenant)
    assert d.review({}) == [Change("x", False)]


def test_a_backlog_over_the_threshold_demotes():
    d, clock = tracker(share=None, backlog=100, quiet=3)
    assert d.review({"big": 101, "small": 100}) == [Change("big", True)]
    clock.advance(1)
    assert d.review({"big": 80}) == []  # above quiet_backlog (50)
    assert d.quiet_since("big") is None
    assert d.review({"big": 50}) == []
    assert d.quiet_since("big") == 1
    clock.advance(3)
    assert d.review({"big": 10}) == [Change("big", False)]


def test_noisy_by_backlog_stays_noisy_while_the_backlog_stays():
    d, clock = tracker(share=0.5, backlog=10, quiet=1)
    assert d.review({"x": 11}) == [Change("x", True)]
    clock.advance(5)
    assert d.review({"x": 11}) == []  # no egress at all (share 0), but still a backlog
    assert "x" in d


def test_min_egress_keeps_a_lone_trickle_quiet():
    d, _ = tracker(share=0.5, min_egress=50)
    for _ in range(49):
        d.sent("trickle")
    assert d.share("trickle") == 1.0
    assert d.review({}) == []
    d.sent("trickle")
    assert d.review({}) == [Change("trickle", True)]


def test_quiet_zero_promotes_at_the_first_quiet_review():
    d, clock = tracker(share=0.5, window=1, quiet=0)
    d.sent("x")
    assert d.review({}) == [Change("x", True)]
    clock.advance(2)
    assert d.review({}) == [Change("x", False)]


def test_the_window_slides_and_forgets_old_egress():
    d, clock = tracker(window=10, buckets=10)
    d.sent("a", 5)
    clock.advance(5)
    d.sent("b", 5)
    assert d.share("a") == pytest.approx(0.5)
    clock.advance(5.5)  # a's bucket left the window
    assert d.share("a") == 0
    assert d.share("b") == 1
    assert d.total == 5
    clock.advance(100)  # everything left
    assert d.share("b") == 0
    assert d.total == 0
    d.sent("c", 2, now=clock.now())
    assert d.share("c") == 1


def test_forget_and_the_noisy_set():
    d, _ = tracker(share=0.3)
    d.sent("x", 2)
    d.sent("y", 2)
    d.sent("z", 1)
    assert {c.tenant for c in d.review({})} == {"x", "y"}
    assert d.noisy == frozenset({"x", "y"})
    assert d.forget("x") is True
    assert d.forget("x") is False
    assert d.noisy == frozenset({"y"})
    assert "Demotion" in repr(d)


def test_the_oldest_quiet_record_ignores_noisy_tenants():
    d, _ = tracker(share=0.5)
    d.sent("flood", 10)
    d.review({})
    heads = [("flood", 1.0), ("q1", 5.0), ("q2", 7.0)]
    assert d.oldest_quiet_age(heads, now=10.0) == 5.0
    assert d.oldest_quiet_age([("flood", 1.0)], now=10.0) is None
    assert d.oldest_quiet_age([], now=10.0) is None


# -- the must-show, applied to a scheduler -------------------------------------------------------

POLICY = DemotionPolicy(share=0.5, quiet_share=0.25, window=2, quiet=3, min_egress=50)
TICK = 0.01  # one pick each 10 ms
REVIEW_EVERY = 10  # ticks


class Run:
    """A scheduler sending one record per tick, a ``Demotion`` reviewed every 0.1 s and its
    changes applied (one class down, then the tenant's own policy back)."""

    def __init__(self, core: FairScheduler[str] | GroupScheduler[str], clock: ManualClock):
        self.core, self.clock = core, clock
        self.demotion = Demotion(POLICY, clock)
        self.own: dict[str, TenantPolicy | None] = {}
        self.demoted_at: dict[str, float] = {}
        self.promoted_at: dict[str, float] = {}
        self.ticks = 0
        self.sent: list[str] = []

    def tick(self) -> str | None:
        core, demotion = self.core, self.demotion
        picked = core.pick()
        if picked is not None:
            demotion.sent(picked.tenant)
            self.sent.append(picked.item)
        self.ticks += 1
        if self.ticks % REVIEW_EVERY == 0:
            backlogs = {t: core.backlog(t)[0] for t in core.tenants()}
            for change in demotion.review(backlogs):
                self.apply(change)
        self.clock.advance(TICK)
        return None if picked is None else picked.item

    def apply(self, change: Change) -> None:
        core, tenant = self.core, change.tenant
        if change.demote:
            own = self.own[tenant] = core.own_policy(tenant)
            core.set_policy(tenant, demoted(own or core.default_policy))
            self.demoted_at[tenant] = self.clock.now()
        else:
            core.set_policy(tenant, self.own.pop(tenant))
            self.promoted_at[tenant] = self.clock.now()


def flood_then_quiet(run: Run) -> dict[str, int]:
    """The flooder pushes 1,500 records at once (15 s of egress); a quiet tenant sends one
    record every 0.5 s for 25 s. Returns, per quiet record, the ticks it waited."""
    for i in range(1500):
        run.core.push("flood", f"flood-{i}")
    waited: dict[str, int] = {}
    arrived: dict[str, int] = {}
    for step in range(2500):
        if step % 50 == 25:
            name = f"quiet-{step}"
            run.core.push("quiet", name)
            arrived[name] = run.ticks
        item = run.tick()
        if item is not None and item in arrived:
            waited[item] = run.ticks - 1 - arrived[item]
    return waited


def test_a_flooding_tenant_is_demoted_quiet_records_go_first_and_it_comes_back():
    clock = ManualClock()
    core: FairScheduler[str] = FairScheduler(clock)
    core.set_policy("flood", TenantPolicy(weight=20))  # a heavy tenant: 20 records a round
    run = Run(core, clock)
    waited = flood_then_quiet(run)
    # Demoted at the first review with min_egress in the window (0.5 s of egress).
    assert run.demoted_at["flood"] == pytest.approx(0.5, abs=0.11)
    # While demoted, every quiet record is the very next one sent.
    while_demoted = [
        ticks
        for name, ticks in waited.items()
        if run.demoted_at["flood"] < int(name.split("-")[1]) * TICK < 15
    ]
    assert while_demoted
    assert set(while_demoted) == {0}
    # Before demotion a quiet record could wait for the heavy tenant's visit.
    assert max(waited.values()) > 0
    # Promoted back once quiet: the flood drained at about 15 s, its share fell below 25%
    # within the 2 s window, then 3 s of quiet.
    assert 15 + 3 <= run.promoted_at["flood"] <= 15 + 2 + 3 + 0.2
    assert core.own_policy("flood") == TenantPolicy(weight=20)
    assert run.demotion.noisy_count == 0
    assert [i for i in run.sent if i.startswith("flood")] == [f"flood-{i}" for i in range(1500)]


def test_inside_a_group_the_flooder_yields_to_its_group_mates_and_the_group_keeps_its_share():
    clock = ManualClock()
    core: GroupScheduler[str] = GroupScheduler(clock)
    for tenant, group in (("flood", "A"), ("quiet", "A"), ("other", "B")):
        core.set_group(tenant, group)
    core.set_group_policy("A", TenantPolicy(weight=3))  # A 75% of the egress, B 25%
    core.set_policy("flood", TenantPolicy(weight=20))
    for i in range(3000):
        core.push("other", f"other-{i}")
    run = Run(core, clock)
    waited = flood_then_quiet(run)
    assert "flood" in run.demoted_at
    # B's tenant is noisy only once A has drained (about 20 s) and it takes everything.
    assert run.demoted_at.get("other", math.inf) > 20
    late = [
        ticks
        for name, ticks in waited.items()
        if run.demoted_at["flood"] + 0.2 < int(name.split("-")[1]) * TICK < 15
    ]
    assert late
    assert max(late) <= 1  # next in its group: at most B's turn first
    groups = Counter(core.group_of(i.split("-")[0]) for i in run.sent[:2000])
    assert groups["A"] == pytest.approx(3 * groups["B"], rel=0.05)


def test_a_demotion_over_groups_demotes_a_group_at_the_outer_level():
    clock = ManualClock()
    core: GroupScheduler[str] = GroupScheduler(clock)
    for tenant, group in (("f1", "noisy"), ("f2", "noisy"), ("q", "calm")):
        core.set_group(tenant, group)
    core.set_group_policy("noisy", TenantPolicy(weight=20))
    groups = Demotion(POLICY, clock)
    for i in range(500):
        core.push("f1", f"f1-{i}")
        core.push("f2", f"f2-{i}")
    for _ in range(60):
        picked = core.pick()
        assert picked is not None
        groups.sent(str(core.group_of(picked.tenant)))
        clock.advance(TICK)
    backlogs = {g: core.group_backlog(g)[0] for g in core.groups()}
    assert groups.review(backlogs) == [Change("noisy", True)]
    own = core.group_policy("noisy")
    core.set_group_policy("noisy", demoted(own))
    core.push("q", "q-0")
    assert core.pick().item == "q-0"  # type: ignore[union-attr]
    assert core.group_policy("noisy").priority == 1
