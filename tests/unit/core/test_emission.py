"""The emission rule (``fairstream.core.emission``): pace, pick, expire, cost tokens, hold,
lease, tenant pauses and the rate share, all on a ManualClock."""

from __future__ import annotations

import math
from operator import itemgetter

import pytest

from fairstream.core import FairScheduler, ManualClock, Pick, TenantPolicy
from fairstream.core.emission import EmissionRule, Expire, Wait

# Items are (name, deadline in epoch ms or None).
Item = tuple[str, int | None]


def make(**kwargs: object) -> tuple[EmissionRule[Item], FairScheduler[Item], ManualClock]:
    clock = ManualClock()
    core: FairScheduler[Item] = FairScheduler(clock)
    rule: EmissionRule[Item] = EmissionRule(core, clock, deadline=itemgetter(1), **kwargs)  # type: ignore[arg-type]
    return rule, core, clock


def push(
    core: FairScheduler[Item], tenant: str, name: str, cost: int = 1, deadline: int | None = None
) -> None:
    core.push(tenant, (name, deadline), cost)


def sent(step: object) -> str:
    assert isinstance(step, Pick), step
    return step.item[0]


def test_unlimited_sends_everything_in_fair_order_then_waits_for_news():
    rule, core, _ = make()
    for i in range(2):
        push(core, "A", f"a{i}")
        push(core, "B", f"b{i}")
    assert [sent(rule.next()) for _ in range(4)] == ["a0", "b0", "a1", "b1"]
    assert rule.next() == Wait(math.inf)


def test_pacing_waits_for_a_record_token_before_picking():
    rule, core, clock = make(rate=10, burst=1)
    push(core, "low", "l0")
    push(core, "low", "l1")
    core.set_policy("high", TenantPolicy(priority=0))
    core.set_policy("low", TenantPolicy(priority=1))
    assert sent(rule.next()) == "l0"
    step = rule.next()
    assert step == Wait(pytest.approx(0.1))
    assert rule.pending is None  # nothing was picked while waiting
    push(core, "high", "h0")  # arrives during the wait: it must compete for the token
    clock.advance(0.1)
    assert sent(rule.next()) == "h0"
    assert rule.next() == Wait(pytest.approx(0.1))
    clock.advance(0.1)
    assert sent(rule.next()) == "l1"


def test_cost_tokens_are_waited_for_after_the_pick_and_nobody_overtakes():
    rule, core, clock = make(cost_rate=10, cost_burst=10)
    push(core, "A", "a0", cost=10)
    push(core, "A", "a1", cost=5)
    assert sent(rule.next()) == "a0"  # the whole cost burst
    assert rule.next() == Wait(pytest.approx(0.1))  # pacing: one cost unit before a pick
    assert rule.pending is None
    clock.advance(0.1)
    assert rule.next() == Wait(pytest.approx(0.4))  # a1 is picked: 5 cost tokens at 10/s
    assert rule.pending == Pick("A", ("a1", None), 5)
    assert len(core) == 0
    core.set_policy("B", TenantPolicy(priority=0))
    push(core, "B", "b0")
    clock.advance(0.2)
    assert rule.next() == Wait(pytest.approx(0.2))  # still short: the held pick waits
    clock.advance(0.2)
    assert sent(rule.next()) == "a1"  # the held pick first, whoever arrived meanwhile
    assert rule.pending is None
    assert rule.next() == Wait(pytest.approx(0.1))
    clock.advance(0.1)
    assert sent(rule.next()) == "b0"


def test_record_and_cost_tokens_are_taken_together_or_not_at_all():
    rule, core, clock = make(rate=2, burst=2, cost_rate=10, cost_burst=60)
    for i in range(3):
        push(core, "A", f"a{i}", cost=30)
    assert [sent(rule.next()) for _ in range(2)] == ["a0", "a1"]
    assert rule.next() == Wait(pytest.approx(0.5))  # no record token: nothing picked yet
    clock.advance(0.5)
    assert rule.next() == Wait(pytest.approx(2.5))  # a2 picked; 5 of its 30 cost tokens
    clock.advance(2.5)
    assert sent(rule.next()) == "a2"
    push(core, "A", "a3", cost=1)
    # The record token a2 did not take while it waited is there; the cost tokens are not.
    assert rule.next() == Wait(pytest.approx(0.1))


def test_expired_at_emit_time_takes_no_token():
    rule, core, clock = make(rate=1, burst=1)
    push(core, "A", "late", deadline=1_000)
    push(core, "A", "fine", deadline=5_000)
    push(core, "A", "none")
    step = rule.next(now_ms=2_000)
    assert step == Expire("A", ("late", 1_000), 1)
    assert sent(rule.next(now_ms=2_000)) == "fine"  # the token is still there
    assert rule.next(now_ms=2_000) == Wait(pytest.approx(1.0))
    clock.advance(1)
    assert sent(rule.next(now_ms=10**12)) == "none"  # no deadline, never expires


def test_at_the_deadline_a_record_still_goes():
    rule, core, _ = make()
    push(core, "A", "a0", deadline=1_000)
    assert sent(rule.next(now_ms=1_000)) == "a0"


def test_a_held_pick_expires_if_its_deadline_passes_while_it_waits():
    rule, core, clock = make(cost_rate=1, cost_burst=2)
    push(core, "A", "a0")
    push(core, "A", "a1", cost=2, deadline=1_500)
    assert sent(rule.next(now_ms=1_000)) == "a0"
    assert rule.next(now_ms=1_000) == Wait(pytest.approx(1.0))
    assert rule.pending is not None
    clock.advance(1)
    assert rule.next(now_ms=2_000) == Expire("A", ("a1", 1_500), 2)
    assert rule.pending is None
    assert rule.next(now_ms=2_000) == Wait(math.inf)


def test_no_deadline_function_means_nothing_expires():
    clock = ManualClock()
    core: FairScheduler[Item] = FairScheduler(clock)
    rule: EmissionRule[Item] = EmissionRule(core, clock)
    push(core, "A", "a0", deadline=1)
    assert sent(rule.next(now_ms=10**12)) == "a0"


def test_hold_stops_everything_until_it_ends():
    rule, core, clock = make()
    push(core, "A", "a0")
    rule.hold(2.0)
    assert rule.next() == Wait(2.0)
    clock.advance(1.5)
    assert rule.next() == Wait(pytest.approx(0.5))
    assert len(core) == 1  # nothing was picked during the hold
    clock.advance(0.5)
    assert sent(rule.next()) == "a0"


def test_a_lease_that_runs_out_stops_emission_until_renewed():
    rule, core, clock = make()
    for i in range(3):
        push(core, "A", f"a{i}")
    rule.lease(1.0)
    assert sent(rule.next()) == "a0"
    clock.advance(1.0)
    assert rule.next() == Wait(math.inf)
    rule.lease(3.0)
    assert sent(rule.next()) == "a1"


def test_share_scales_rate_and_burst():
    rule, core, _ = make(rate=100, burst=10, cost_rate=1000)
    rule.set_share(0.5)
    assert rule.share == 0.5
    assert rule.rate == 50
    assert rule.cost_rate == 500
    for i in range(20):
        push(core, "A", f"a{i}")
    out = []
    while isinstance(step := rule.next(), Pick):
        out.append(step)
    assert len(out) == 5  # half the burst
    assert step == Wait(pytest.approx(1 / 50))


def test_share_changes_keep_spent_tokens_spent():
    rule, core, clock = make(rate=10, burst=10)
    for i in range(30):
        push(core, "A", f"a{i}")
    for _ in range(10):
        sent(rule.next())  # the whole burst
    assert isinstance(rule.next(), Wait)
    # Rebalances back and forth hand out no fresh burst.
    rule.set_share(0.5)
    rule.set_share(1.0)
    rule.set_share(2.0)
    assert rule.next() == Wait(pytest.approx(1 / 20))
    clock.advance(1 / 20)
    assert sent(rule.next()) == "a10"
    assert isinstance(rule.next(), Wait)


def test_share_zero_sends_nothing_and_keeps_tokens():
    rule, core, clock = make(rate=10, burst=10)
    push(core, "A", "a0")
    rule.set_share(0)
    assert rule.rate == pytest.approx(10e-6)
    clock.advance(60)
    step = rule.next()
    assert isinstance(step, Pick)  # the one token the zero share keeps (burst 1)
    push(core, "A", "a1")
    assert isinstance(rule.next(), Wait)
    clock.advance(60)
    assert isinstance(rule.next(), Wait)
    rule.set_share(1)
    assert rule.next() == Wait(pytest.approx(0.1, abs=1e-3))


@pytest.mark.parametrize("share", [-0.1, math.inf, math.nan, True, "1"])
def test_bad_shares(share):
    rule, _, _ = make(rate=10)
    with pytest.raises(ValueError, match="share"):
        rule.set_share(share)  # type: ignore[arg-type]


def test_tenant_pause_keeps_backlog_and_restores_policy():
    resumed: list[str] = []
    rule, core, clock = make(on_resume=resumed.append)
    core.set_policy("A", TenantPolicy(weight=2))
    for i in range(3):
        push(core, "A", f"a{i}")
        push(core, "B", f"b{i}")
    assert rule.pause("A", 5.0)
    assert not rule.pause("A", 1.0)  # a pause is extended, never shortened
    assert core.policy("A").paused
    assert [sent(rule.next()) for _ in range(3)] == ["b0", "b1", "b2"]
    assert rule.next() == Wait(5.0)  # A is back then: the caller wakes for it
    clock.advance(5.0)
    assert sent(rule.next()) == "a0"
    assert resumed == ["A"]
    assert core.policy("A") == TenantPolicy(weight=2)


def test_a_policy_set_during_a_pause_applies_when_it_ends():
    rule, core, clock = make()
    push(core, "A", "a0")
    rule.pause("A", 1.0)
    rule.set_policy("A", TenantPolicy(weight=3))
    assert core.policy("A") == TenantPolicy(weight=3, paused=True)
    rule.set_policy("B", TenantPolicy(weight=2))  # not paused: applied at once
    assert core.policy("B") == TenantPolicy(weight=2)
    clock.advance(1.0)
    assert sent(rule.next()) == "a0"
    assert core.policy("A") == TenantPolicy(weight=3)


def test_a_tenant_without_its_own_policy_goes_back_to_the_default():
    rule, core, clock = make()
    push(core, "A", "a0")
    rule.pause("A", 1.0)
    assert core.own_policy("A") == TenantPolicy(paused=True)
    clock.advance(1.0)
    assert sent(rule.next()) == "a0"
    assert core.own_policy("A") is None


def test_capped_tenant_wait_comes_from_the_core():
    rule, core, clock = make()
    core.set_policy("A", TenantPolicy(rate_cap=2, cap_burst=1))
    push(core, "A", "a0")
    push(core, "A", "a1")
    assert sent(rule.next()) == "a0"
    assert rule.next() == Wait(pytest.approx(0.5))
    clock.advance(0.5)
    assert sent(rule.next()) == "a1"


def test_cancel_and_replace_core_forget_the_held_pick():
    rule, core, clock = make(cost_rate=1, cost_burst=2)
    push(core, "A", "a0")
    push(core, "A", "a1", cost=2)
    sent(rule.next())
    assert rule.next() == Wait(pytest.approx(1.0))
    assert rule.cancel() == Pick("A", ("a1", None), 2)
    assert rule.pending is None
    push(core, "A", "a2", cost=2)
    assert isinstance(rule.next(), Wait)
    assert rule.pending is not None
    rule.pause("B", 10.0)
    fresh: FairScheduler[Item] = FairScheduler(clock)
    rule.replace_core(fresh)
    assert rule.pending is None
    assert fresh.policy("B").paused  # pauses carry over to the new core
    clock.advance(10.0)
    push(fresh, "B", "b0")
    assert sent(rule.next()) == "b0"
    assert not fresh.policy("B").paused


def test_direct_only_without_limits_holds_leases_pauses_or_held_picks():
    rule, core, clock = make()
    assert rule.direct()
    rule.hold(clock.now() + 1)
    assert not rule.direct()
    clock.advance(1)
    assert rule.direct()
    rule.lease(clock.now() + 5)
    assert rule.direct()  # the lease runs, nothing is due yet
    clock.advance(5)
    assert not rule.direct()  # its end is due: next must stop emission
    rule.lease(math.inf)
    push(core, "A", "a0")
    rule.pause("A", 2)
    assert rule.direct()
    clock.advance(2)
    assert not rule.direct()  # the pause's end is due: next resumes the tenant
    assert make(rate=10)[0].direct() is False
    assert make(cost_rate=10)[0].direct() is False


def _drive(rule: EmissionRule[Item], core: FairScheduler[Item], now_ms: int, direct: bool):
    """Every answer until nothing is left, the emitter's way (``direct``: its fast path)."""
    out = []
    while True:
        if direct and rule.direct():
            pick = core.pick()
            if pick is None:
                step = rule.next(now_ms)
            else:
                deadline = pick.item[1]
                step = Expire(*pick) if deadline is not None and now_ms > deadline else pick
        else:
            step = rule.next(now_ms)
        if type(step) is Wait:
            return out, step
        out.append((type(step).__name__, step[0], step[1][0]))


@pytest.mark.parametrize("seed", range(20))
def test_the_direct_path_answers_what_next_answers(seed):
    import random

    rng = random.Random(seed)
    runs = []
    for direct in (False, True):
        rng.seed(seed)
        rule, core, _ = make()
        for t in range(rng.randint(1, 6)):
            core.set_policy(
                f"t{t}", TenantPolicy(weight=rng.choice((1, 2, 3)), priority=rng.randint(0, 1))
            )
        for i in range(rng.randint(0, 60)):
            tenant = f"t{rng.randint(0, 5)}"
            deadline = rng.choice((None, None, 50, 150))
            push(core, tenant, f"r{i}", cost=rng.randint(1, 3), deadline=deadline)
        runs.append(_drive(rule, core, 100, direct))
    assert runs[0] == runs[1]
