"""FairScheduler behaviour: round robin, weights, classes, caps, pause, live policy, state."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairstream.core import (
    BACKLOG_FULL,
    DEFAULT_POLICY,
    FairScheduler,
    ManualClock,
    Pick,
    TenantPolicy,
)
from fairstream.core.admission import ADMITTED, NO_COST_ROOM, NO_ROOM


def drain(scheduler: FairScheduler[str], now: float | None = None) -> list[str]:
    out = []
    while (picked := scheduler.pick(now)) is not None:
        out.append(picked.item)
    return out


def make(**kwargs: object) -> tuple[FairScheduler[str], ManualClock]:
    clock = ManualClock()
    return FairScheduler(clock, **kwargs), clock  # type: ignore[arg-type]


def test_reference_example_quiet_tenants_go_within_first_four():
    """A sends 100, then B and C send one each while A is backlogged."""
    scheduler, _ = make()
    for i in range(100):
        scheduler.push("A", f"A{i}")
    first = scheduler.pick()
    assert first == Pick("A", "A0", 1)
    scheduler.push("B", "B1")
    scheduler.push("C", "C1")
    order = ["A0", *drain(scheduler)]
    assert "B1" in order[:4]
    assert "C1" in order[:4]
    assert [x for x in order if x.startswith("A")] == [f"A{i}" for i in range(100)]


def test_equal_weights_unit_costs_is_plain_round_robin():
    scheduler, _ = make()
    for i in range(3):
        for tenant in "XYZ":
            scheduler.push(tenant, f"{tenant}{i}")
    assert drain(scheduler) == ["X0", "Y0", "Z0", "X1", "Y1", "Z1", "X2", "Y2", "Z2"]


def test_new_tenant_joins_at_the_tail():
    scheduler, _ = make()
    for tenant in "XY":
        for i in range(3):
            scheduler.push(tenant, f"{tenant}{i}")
    assert scheduler.pick().item == "X0"  # type: ignore[union-attr]
    scheduler.push("Z", "Z0")  # the ring is now Y, X, Z
    assert drain(scheduler)[:4] == ["Y0", "X1", "Z0", "Y1"]


def test_weights_share_in_proportion():
    scheduler, _ = make()
    scheduler.set_policy("heavy", TenantPolicy(weight=3))
    for i in range(30):
        scheduler.push("heavy", f"h{i}")
        scheduler.push("light", f"l{i}")
    first = drain(scheduler)[:20]
    assert sum(x.startswith("h") for x in first) == 15
    assert first[:4] == ["h0", "h1", "h2", "l0"]


def test_cost_larger_than_quantum_waits_rounds_without_looping():
    scheduler, _ = make(quantum=1)
    scheduler.push("big", "big0", cost=5)
    for i in range(10):
        scheduler.push("small", f"s{i}")
    order = drain(scheduler)
    # big is credited 1 per round: it sends its cost-5 record in round 5, ahead of small
    # as in round 1 (textbook DRR order), after small sent once in each of rounds 1-4.
    assert order == ["s0", "s1", "s2", "s3", "big0", "s4", "s5", "s6", "s7", "s8", "s9"]


def test_lone_costly_tenant_jumps_rounds():
    scheduler, _ = make(quantum=2)
    scheduler.push("big", "b0", cost=1001)
    scheduler.push("big", "b1", cost=1)
    assert scheduler.pick() == Pick("big", "b0", 1001)
    assert scheduler.current_round() == 501  # jumped, did not loop 501 times
    assert drain(scheduler) == ["b1"]


def test_priority_classes_are_strict():
    scheduler, _ = make()
    scheduler.set_policy("gold", TenantPolicy(priority=0))
    scheduler.set_policy("bronze", TenantPolicy(priority=2))
    scheduler.set_policy("silver", TenantPolicy(priority=1))
    for i in range(3):
        scheduler.push("bronze", f"b{i}")
        scheduler.push("silver", f"s{i}")
    scheduler.push("gold", "g0")
    assert drain(scheduler) == ["g0", "s0", "s1", "s2", "b0", "b1", "b2"]


def test_drr_within_each_class():
    scheduler, _ = make()
    for tenant in ("p", "q"):
        scheduler.set_policy(tenant, TenantPolicy(priority=1))
    for i in range(2):
        scheduler.push("p", f"p{i}")
        scheduler.push("q", f"q{i}")
    assert drain(scheduler) == ["p0", "q0", "p1", "q1"]


def test_rate_capped_tenant_is_skipped_then_not_penalised():
    scheduler, clock = make()
    scheduler.set_policy("capped", TenantPolicy(rate_cap=1, cap_burst=1))
    for i in range(3):
        scheduler.push("capped", f"c{i}")
    for i in range(20):
        scheduler.push("free", f"f{i}")
    got = [scheduler.pick().item for _ in range(4)]  # type: ignore[union-attr]
    # c0 spends the token; at c1's turn the bucket is empty: skipped, others go on.
    assert got == ["c0", "f0", "f1", "f2"]
    assert scheduler.backlog("capped") == (2, 2)
    clock.advance(1.0)
    # The token is back: capped goes at once, ahead of the ring, with the deficit it had.
    assert scheduler.pick().item == "c1"  # type: ignore[union-attr]
    assert scheduler.pick().item == "f3"  # type: ignore[union-attr]


def test_next_eligible_in_reports_cap_wait():
    scheduler, clock = make()
    assert scheduler.next_eligible_in() is None
    scheduler.set_policy("capped", TenantPolicy(rate_cap=4, cap_burst=1))
    scheduler.push("capped", "c0")
    scheduler.push("capped", "c1")
    assert scheduler.next_eligible_in() == 0.0
    assert scheduler.pick().item == "c0"  # type: ignore[union-attr]
    assert scheduler.pick() is None
    assert scheduler.next_eligible_in() == pytest.approx(0.25)
    clock.advance(0.1)
    assert scheduler.next_eligible_in() == pytest.approx(0.15)
    clock.advance(0.15)
    assert scheduler.pick().item == "c1"  # type: ignore[union-attr]
    assert scheduler.next_eligible_in() is None


def test_cap_does_not_refill_by_going_idle():
    scheduler, clock = make()
    scheduler.set_policy("capped", TenantPolicy(rate_cap=1, cap_burst=2))
    sent = 0
    for _ in range(5):  # push one, drain, repeat: the bucket must persist across idleness
        scheduler.push("capped", "x")
        sent += len(drain(scheduler))
    assert sent == 2
    clock.advance(1)
    assert len(drain(scheduler)) == 1


def test_pause_keeps_backlog_and_resume_puts_back():
    scheduler, _ = make()
    for i in range(3):
        scheduler.push("A", f"a{i}")
        scheduler.push("B", f"b{i}")
    assert scheduler.pick().item == "a0"  # type: ignore[union-attr]
    scheduler.set_policy("A", TenantPolicy(paused=True))
    assert drain(scheduler) == ["b0", "b1", "b2"]
    assert scheduler.backlog("A") == (2, 2)
    assert len(scheduler) == 2
    assert list(scheduler.tenants()) == ["A"]
    assert scheduler.next_eligible_in() is None
    scheduler.push("A", "a3")  # a paused tenant still buffers
    scheduler.set_policy("A", None)
    assert drain(scheduler) == ["a1", "a2", "a3"]


def test_paused_tenant_pushes_do_not_join_ring():
    scheduler, _ = make()
    scheduler.set_policy("A", TenantPolicy(paused=True))
    scheduler.push("A", "a0")
    scheduler.push("A", "a1")
    assert scheduler.pick() is None
    scheduler.set_policy("A", TenantPolicy())
    assert drain(scheduler) == ["a0", "a1"]


def test_live_weight_change_applies_to_existing_backlog():
    scheduler, _ = make()
    for i in range(20):
        scheduler.push("A", f"a{i}")
        scheduler.push("B", f"b{i}")
    assert [scheduler.pick().item for _ in range(2)] == ["a0", "b0"]  # type: ignore[union-attr]
    scheduler.set_policy("A", TenantPolicy(weight=3))
    assert drain(scheduler)[:8] == ["a1", "a2", "a3", "b1", "a4", "a5", "a6", "b2"]


def test_live_weight_change_refiles_a_tenant_waiting_rounds():
    scheduler, _ = make()
    scheduler.push("big", "big0", cost=100)
    for i in range(10):
        scheduler.push("small", f"s{i}")
    assert scheduler.pick().item == "s0"  # type: ignore[union-attr]
    # big was visited in round 1 and filed for round 100; with weight 50 it needs round 3.
    scheduler.set_policy("big", TenantPolicy(weight=50))
    assert drain(scheduler)[:3] == ["s1", "big0", "s2"]


def test_live_class_change_moves_existing_backlog():
    scheduler, _ = make()
    for i in range(3):
        scheduler.push("A", f"a{i}")
        scheduler.push("B", f"b{i}")
    assert scheduler.pick().item == "a0"  # type: ignore[union-attr]
    scheduler.set_policy("A", TenantPolicy(priority=1))
    assert drain(scheduler) == ["b0", "b1", "b2", "a1", "a2"]


def test_cap_added_and_removed_live():
    scheduler, clock = make()
    for i in range(4):
        scheduler.push("A", f"a{i}")
    scheduler.set_policy("A", TenantPolicy(rate_cap=1))
    assert drain(scheduler) == ["a0"]
    scheduler.set_policy("A", TenantPolicy(rate_cap=1, paused=True))
    scheduler.set_policy("A", TenantPolicy(rate_cap=1))
    assert drain(scheduler) == []
    scheduler.set_policy("A", None)  # cap lifted while parked: eligible at once
    assert drain(scheduler) == ["a1", "a2", "a3"]
    assert clock.now() == 0


def test_remove_tenant_returns_items_and_forgets_backlog():
    scheduler, _ = make()
    for i in range(3):
        scheduler.push("A", f"a{i}")
        scheduler.push("B", f"b{i}")
    scheduler.pick()
    assert scheduler.remove_tenant("A") == ["a1", "a2"]
    assert scheduler.remove_tenant("A") == []
    assert len(scheduler) == 3
    assert drain(scheduler) == ["b0", "b1", "b2"]
    scheduler.push("A", "again")  # a removed tenant can come back cleanly
    assert drain(scheduler) == ["again"]


def test_idle_tenants_leave_no_state():
    scheduler, _ = make()
    for n in range(1000):
        scheduler.push(f"t{n}", "x", cost=1 + n % 3)
    scheduler.set_policy("t1", TenantPolicy(priority=3))
    scheduler.set_policy("t1", None)
    scheduler.set_policy("t2", TenantPolicy(paused=True))
    scheduler.set_policy("t2", None)
    scheduler.remove_tenant("t3")
    assert len(drain(scheduler)) == 999
    assert len(scheduler) == 0
    assert scheduler._tenants == {}
    assert scheduler._policies == {}
    assert scheduler._buckets == {}
    assert scheduler._classes == {}
    assert scheduler._order == []
    assert scheduler._parked == []


def test_idle_tenant_under_capped_default_drops_bucket_once_full():
    scheduler, clock = make(default_policy=TenantPolicy(rate_cap=10, cap_burst=1))
    for n in range(100):
        scheduler.push(f"t{n}", "x")
    assert len(drain(scheduler)) == 100
    assert len(scheduler._buckets) == 100  # just spent: a fresh bucket would be wrong
    clock.advance(0.1)
    assert scheduler.pick() is None
    assert scheduler._buckets == {}
    assert scheduler._tenants == {}


def test_set_default_policy_applies_to_followers_only():
    scheduler, _ = make()
    scheduler.set_policy("own", TenantPolicy(weight=1))
    for i in range(4):
        scheduler.push("own", f"o{i}")
        scheduler.push("follower", f"f{i}")
    scheduler.set_default_policy(TenantPolicy(paused=True))
    assert scheduler.policy("follower").paused
    assert not scheduler.policy("own").paused
    assert drain(scheduler) == ["o0", "o1", "o2", "o3"]
    scheduler.set_default_policy(DEFAULT_POLICY)
    assert drain(scheduler) == ["f0", "f1", "f2", "f3"]


def test_admission_uses_policy_and_backlog():
    scheduler, _ = make()
    scheduler.set_policy("A", TenantPolicy(max_backlog=2, max_backlog_cost=5))
    assert scheduler.admit("A", cost=3)
    scheduler.push("A", "a0", cost=3)
    decision = scheduler.admit("A", cost=3)
    assert not decision
    assert decision.reason == BACKLOG_FULL
    assert "max_backlog_cost=5" in (decision.detail or "")
    scheduler.push("A", "a1", cost=2)
    decision = scheduler.admit("A", cost=1)
    assert decision.reason == BACKLOG_FULL
    assert "2 records" in (decision.detail or "")
    assert scheduler.admit("other", cost=100)


@pytest.mark.parametrize("cost", [0, -1, 1.5, True, "1"])
def test_push_rejects_bad_costs(cost):
    scheduler, _ = make()
    with pytest.raises(ValueError, match="cost must be a positive integer"):
        scheduler.push("A", "x", cost=cost)


@pytest.mark.parametrize("quantum", [0, -1, float("inf"), True])
def test_bad_quantum(quantum):
    with pytest.raises(ValueError, match="quantum"):
        FairScheduler(ManualClock(), quantum=quantum)


def test_set_policy_type_checked():
    scheduler, _ = make()
    with pytest.raises(TypeError):
        scheduler.set_policy("A", {"weight": 2})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        scheduler.set_default_policy(None)  # type: ignore[arg-type]


def test_len_contains_backlog_repr():
    scheduler, _ = make()
    scheduler.push("A", "a", cost=4)
    scheduler.push("A", "b", cost=2)
    assert len(scheduler) == 2
    assert "A" in scheduler
    assert scheduler.backlog("A") == (2, 6)
    assert scheduler.backlog("nobody") == (0, 0)
    assert "records=2" in repr(scheduler)


def test_pick_reads_clock_only_when_capped():
    class CountingClock(ManualClock):
        reads = 0

        def now(self) -> float:
            CountingClock.reads += 1
            return super().now()

    scheduler: FairScheduler[str] = FairScheduler(CountingClock())
    scheduler.push("A", "a")
    scheduler.pick()
    assert CountingClock.reads == 0


def test_peek_shows_the_oldest_item_and_takes_nothing():
    scheduler, _ = make()
    assert scheduler.peek("A") is None
    scheduler.push("A", "A0")
    scheduler.push("A", "A1")
    assert scheduler.peek("A") == "A0"
    assert len(scheduler) == 2
    assert drain(scheduler) == ["A0", "A1"]
    assert scheduler.peek("A") is None


def test_held_back_is_paused_capped_waiting_or_a_lower_class_being_starved():
    scheduler, clock = make()
    scheduler.set_policy("paused", TenantPolicy(paused=True))
    scheduler.set_policy("capped", TenantPolicy(rate_cap=1.0))
    scheduler.set_policy("low", TenantPolicy(priority=1))
    for tenant in ("paused", "capped", "low", "busy"):
        scheduler.push(tenant, f"{tenant}0")
        scheduler.push(tenant, f"{tenant}1")
    assert not scheduler.held_back("nobody")
    assert scheduler.held_back("paused")
    assert scheduler.held_back("low")  # class 1 waits while class 0 has tenants to serve
    assert not scheduler.held_back("busy")
    picked = [scheduler.pick(clock.now()) for _ in range(3)]
    assert {p.tenant for p in picked if p is not None} == {"capped", "busy"}
    assert scheduler.held_back("capped")  # its one token spent: waiting for the next
    while scheduler.backlog("busy")[0]:
        assert scheduler.pick(clock.now()) is not None
    # Class 0 has nobody to serve now (the capped tenant waits for a token): class 1 goes.
    assert not scheduler.held_back("low")


def test_push_front_puts_a_pick_back_ahead_of_the_tenants_later_items():
    scheduler, _ = make()
    for i in range(3):
        scheduler.push("a", f"a{i}")
    scheduler.push("b", "b0")
    first = scheduler.pick()
    assert first is not None
    assert first.item == "a0"
    scheduler.push_front("a", first.item)
    assert len(scheduler) == 4
    assert scheduler.backlog("a") == (3, 3)
    assert [x for x in drain(scheduler) if x.startswith("a")] == ["a0", "a1", "a2"]


def test_push_front_of_a_tenant_whose_queue_emptied_makes_it_backlogged_again():
    scheduler, _ = make()
    scheduler.push("a", "a0")
    picked = scheduler.pick()
    assert picked is not None
    assert "a" not in scheduler
    scheduler.push_front("a", picked.item, 2)
    assert scheduler.backlog("a") == (1, 2)
    assert drain(scheduler) == ["a0"]
    with pytest.raises(ValueError, match="cost"):
        scheduler.push_front("a", "x", 0)


POLICIES = {
    "paused": TenantPolicy(paused=True),
    "capped": TenantPolicy(rate_cap=1.0),
    "low": TenantPolicy(priority=1),
    "busy": None,
}


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["push", "pick", "pick", "tick", "resume", "pause"]),
            st.sampled_from(sorted(POLICIES)),
        ),
        max_size=60,
    )
)
@settings(max_examples=200, deadline=None)
def test_holds_any_back_is_never_false_while_a_tenant_is_held_back(
    steps: list[tuple[str, str]],
) -> None:
    # The service skips its O(tenants) search for a held-back tenant at a mark when this
    # says nobody is: it may say True for nothing, never False for someone.
    scheduler, clock = make()
    for tenant, policy in POLICIES.items():
        scheduler.set_policy(tenant, policy)
    for n, (step, tenant) in enumerate(steps):
        if step == "push":
            scheduler.push(tenant, f"{tenant}{n}")
        elif step == "pick":
            scheduler.pick(clock.now())
        elif step == "tick":
            clock.advance(0.5)
        elif step == "resume":
            scheduler.set_policy(tenant, None)
        else:
            scheduler.set_policy(tenant, TenantPolicy(paused=True))
        held = [t for t in POLICIES if scheduler.held_back(t)]
        assert scheduler.holds_any_back() or not held, held


def test_holds_any_back_is_false_with_nobody_to_hold() -> None:
    scheduler, _ = make()
    scheduler.set_policy("paused", TenantPolicy(paused=True))
    assert not scheduler.holds_any_back()  # paused, but nothing of it waits
    for i in range(3):
        scheduler.push("busy", f"busy{i}")
        scheduler.push("other", f"other{i}")
    assert not scheduler.holds_any_back()  # one class, no caps, no pause with a backlog
    scheduler.push("paused", "paused0")
    assert scheduler.holds_any_back()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("ABC"), st.integers(1, 4), st.booleans()), max_size=40),
    st.one_of(st.none(), st.integers(1, 4)),
    st.one_of(st.none(), st.integers(1, 8)),
)
def test_push_admitted_follows_the_room_rule_and_a_refusal_changes_nothing(
    ops: list[tuple[str, int, bool]], max_backlog: int | None, max_backlog_cost: int | None
) -> None:
    # The default policy limits A and B; C has a policy of its own of half that.
    default = TenantPolicy(max_backlog=max_backlog, max_backlog_cost=max_backlog_cost)
    core: FairScheduler[int] = FairScheduler(ManualClock(), default_policy=default)
    core.set_policy(
        "C",
        TenantPolicy(
            max_backlog=None if max_backlog is None else max(1, max_backlog // 2),
            max_backlog_cost=None if max_backlog_cost is None else max(1, max_backlog_cost // 2),
        ),
    )
    model: dict[str, list[tuple[int, int]]] = {"A": [], "B": [], "C": []}  # FIFO each
    for n, (tenant, cost, pick) in enumerate(ops):
        if pick:
            picked = core.pick()
            if picked is not None:
                assert model[picked.tenant].pop(0) == (picked.item, picked.cost)
            continue
        left = core.room(tenant)
        before = (core.backlog(tenant), len(core))
        verdict = core.push_admitted(tenant, n, cost)
        if left[0] < 1:
            assert verdict == NO_ROOM
        elif left[1] < cost:
            assert verdict == NO_COST_ROOM
        else:
            assert verdict == ADMITTED
            model[tenant].append((n, cost))
            continue
        assert (core.backlog(tenant), len(core)) == before  # refused: nothing changed
    for tenant, queue in model.items():
        assert [(p.item, p.cost) for p in core.take_backlog(tenant)] == queue


def _restore(tenant: str, stored: object) -> tuple[str, int]:
    # Items are (tenant, n); the stored form is "n" as a string, the tenant left out.
    return (tenant, int(stored)) if isinstance(stored, str) else stored  # type: ignore[return-value]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["A", "B", "C"]),
            st.integers(1, 3),
            st.sampled_from(["push", "stored", "pick", "front", "peek"]),
        ),
        max_size=60,
    )
)
def test_items_pushed_in_a_stored_form_leave_as_the_items_they_were(
    ops: list[tuple[str, int, str]],
) -> None:
    # Two cores take the same operations; one is given some items in a stored form of the
    # caller's (``store_as``). Every item leaves both the same, at the same time.
    plain: FairScheduler[tuple[str, int]] = FairScheduler(ManualClock())
    packed: FairScheduler[tuple[str, int]] = FairScheduler(ManualClock())
    packed.store_as(_restore)
    for n, (tenant, cost, op) in enumerate(ops):
        if op in ("push", "stored"):
            plain.push(tenant, (tenant, n), cost)
            packed.push(tenant, str(n) if op == "stored" else (tenant, n), cost)  # type: ignore[arg-type]
        elif op == "pick":
            assert packed.pick() == plain.pick()
        elif op == "front":
            picked = plain.pick()
            assert packed.pick() == picked
            if picked is not None:  # put back, as the service does with a pick it cannot send
                plain.push_front(picked.tenant, picked.item, picked.cost)
                packed.push_front(picked.tenant, picked.item, picked.cost)
        else:
            assert packed.peek(tenant) == plain.peek(tenant)
    assert packed.take_backlog("A") == plain.take_backlog("A")
    assert packed.remove_tenant("B") == plain.remove_tenant("B")
    while (picked := plain.pick()) is not None:
        assert packed.pick() == picked
    assert packed.pick() is None


_POLICIES = [
    None,  # the default
    TenantPolicy(weight=2.0),
    TenantPolicy(priority=1),
    TenantPolicy(paused=True),
    TenantPolicy(rate_cap=5.0),
]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["A", "B", "C", "D", "E", "F"]),
            st.integers(1, 3),
            st.sampled_from(["push", "pick", "policy", "default"]),
            st.integers(0, len(_POLICIES) - 1),
        ),
        max_size=60,
    ),
    st.integers(1, 4),
)
def test_the_surveys_agree_with_asking_tenant_by_tenant(
    ops: list[tuple[str, int, str, int]], k: int
) -> None:
    # largest_backlogs, heads, oldest_head, backlogs and policy_counts read every backlogged
    # tenant in one pass; they answer what backlog, peek and policy answer one at a time.
    clock = ManualClock()
    core: FairScheduler[int] = FairScheduler(clock)
    for n, (tenant, cost, op, p) in enumerate(ops):
        if op == "push":
            core.push(tenant, n, cost)
        elif op == "pick":
            clock.advance(0.5)
            core.pick()
        elif op == "policy":
            core.set_policy(tenant, _POLICIES[p])
        else:
            core.set_default_policy(_POLICIES[p] or TenantPolicy())
    tenants = list(core.tenants())
    backlogs = sorted((core.backlog(t)[0] for t in tenants), reverse=True)
    largest = core.largest_backlogs(k)
    assert [n for _, n in largest] == backlogs[:k]
    assert all(core.backlog(t)[0] == n for t, n in largest)
    assert sorted(core.heads()) == sorted(
        (t, core.peek(t)) for t in tenants if not core.policy(t).paused
    )
    keys = [-h for t in tenants if not core.policy(t).paused and (h := core.peek(t)) is not None]
    assert core.oldest_head(lambda item: -item) == min(keys, default=None)
    assert sorted(core.backlogs()) == sorted(
        (t, core.backlog(t)[0], core.policy(t)) for t in tenants
    )
    counted = {id(policy): n for policy, n in core.policy_counts()}
    expected: dict[int, int] = {}
    for t in tenants:
        expected[id(core.policy(t))] = expected.get(id(core.policy(t)), 0) + 1
    assert counted == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["push", "pick", "front", "take"]), max_size=40))
def test_one_tenants_queue_keeps_its_order_through_every_size(ops: list[str]) -> None:
    # A queue's second item waits in a tuple, a third turns it into a deque (``rings``):
    # whatever the size, pushes, picks, pushes to the front and a take keep FIFO order.
    core: FairScheduler[int] = FairScheduler(ManualClock())
    model: list[int] = []
    for n, op in enumerate(ops):
        if op == "push":
            core.push("A", n)
            model.append(n)
        elif op == "pick":
            picked = core.pick()
            assert (picked.item if picked else None) == (model.pop(0) if model else None)
        elif op == "front":
            core.push_front("A", n)
            model.insert(0, n)
        else:
            assert [p.item for p in core.take_backlog("A")] == model
            model = []
        assert core.backlog("A")[0] == len(model)
        assert core.peek("A") == (model[0] if model else None)


def test_pushing_to_the_front_again_and_again_extends_one_queue_in_place() -> None:
    # push_front is O(1): a queue of three or more items is one deque, extended at its left,
    # never copied (a copy per call made putting 40,000 records back take seconds).
    core: FairScheduler[int] = FairScheduler(ManualClock())
    for n in range(3):
        core.push("A", n)
    rest = core._tenants["A"].rest  # the core's own record, read for this test only
    for n in range(3, 100):
        core.push_front("A", n)
    assert core._tenants["A"].rest is rest
    assert [p.item for p in core.take_backlog("A")] == [*range(99, 2, -1), 0, 1, 2]
