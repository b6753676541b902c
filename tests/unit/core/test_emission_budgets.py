"""The emission rule under budgets: a record reserves its declared cost when picked; one that
does not fit waits (its tenant out of the pick, the others going on) or is answered
``Exhausted``; tenant groups' budgets; expiry, refunds and policy changes. ManualClock time
and epoch ms move together."""

from __future__ import annotations

import math
from collections import Counter

from fairstream.core import FairScheduler, GroupScheduler, ManualClock, Pick, TenantPolicy
from fairstream.core.budget import Budget
from fairstream.core.emission import EmissionRule, Exhausted, Expire, Wait

Item = tuple[str, int | None]  # name, deadline (epoch ms)
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, at clock time 0
DAY = 86_400.0


class Times:
    """The rule's clock and the wall clock it is given, moved together."""

    def __init__(self) -> None:
        self.clock = ManualClock()

    @property
    def ms(self) -> int:
        return T0_MS + round(self.clock.now() * 1000)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)


def make(
    grouped: bool = False, **kwargs: object
) -> tuple[EmissionRule[Item], FairScheduler[Item] | GroupScheduler[Item], Times]:
    times = Times()
    core: FairScheduler[Item] | GroupScheduler[Item] = (
        GroupScheduler(times.clock) if grouped else FairScheduler(times.clock)
    )
    rule: EmissionRule[Item] = EmissionRule(
        core,
        times.clock,
        deadline=lambda item: item[1],
        **kwargs,  # type: ignore[arg-type]
    )
    return rule, core, times


def backlog(core: FairScheduler[Item] | GroupScheduler[Item], tenant: str, n: int) -> None:
    for i in range(n):
        core.push(tenant, (f"{tenant}{i}", None))


def drain(rule: EmissionRule[Item], times: Times, steps: int) -> list[object]:
    """Up to ``steps`` answers, stopping at the first Wait."""
    out: list[object] = []
    for _ in range(steps):
        step = rule.next(times.ms)
        out.append(step)
        if isinstance(step, Wait):
            break
    return out


def test_no_budget_leaves_the_fast_path_alone() -> None:
    rule, core, _ = make()
    backlog(core, "a", 2)
    assert not rule.budgeted
    assert rule.direct()
    rule.set_policy("a", TenantPolicy(budgets=(Budget(5, "day"),)))
    assert rule.budgeted
    assert not rule.direct()
    rule.set_policy("a", None)
    assert not rule.budgeted
    assert rule.direct()


def test_a_full_budget_waits_without_blocking_other_tenants_and_resumes_at_reset() -> None:
    rule, core, times = make()
    rule.set_policy("a", TenantPolicy(budgets=(Budget(5, "day", unit="records"),)))
    backlog(core, "a", 20)
    backlog(core, "b", 20)
    steps = drain(rule, times, 40)
    sent = Counter(s.tenant for s in steps if isinstance(s, Pick))
    assert sent == {"a": 5, "b": 20}
    assert steps[-1] == Wait(DAY)  # a's budget resets at midnight, nothing else waits
    assert core.backlog("a") == (15, 15)  # kept, in order
    assert rule.budget_held() == {"a": DAY}
    assert rule.budget_waits == 1
    times.advance(DAY)
    steps = drain(rule, times, 10)
    picks = [s for s in steps if isinstance(s, Pick)]
    assert [p.item[0] for p in picks] == ["a5", "a6", "a7", "a8", "a9"]  # order kept
    assert rule.budget_held() == {"a": 2 * DAY}


def test_a_budget_that_dead_letters_answers_exhausted_for_each_record_past_it() -> None:
    rule, core, times = make()
    budget = Budget(3, "hour", on_exhausted="dead-letter")
    rule.set_policy("a", TenantPolicy(budgets=(budget,)))
    backlog(core, "a", 5)
    steps = drain(rule, times, 6)
    assert [type(s).__name__ for s in steps] == ["Pick"] * 3 + ["Exhausted"] * 2 + ["Wait"]
    exhausted = steps[3]
    assert isinstance(exhausted, Exhausted)
    assert exhausted.item == ("a3", None)
    assert exhausted.refusal.budget == budget
    assert exhausted.refusal.fits_at_ms == T0_MS + 3_600_000
    assert len(core) == 0


def test_costs_are_charged_as_declared() -> None:
    rule, core, times = make()
    rule.set_policy("a", TenantPolicy(budgets=(Budget(1000, "day"),)))
    for i in range(5):
        core.push("a", (f"a{i}", None), cost=300)
    steps = drain(rule, times, 5)
    assert [type(s).__name__ for s in steps] == ["Pick"] * 3 + ["Wait"]
    assert rule.ledger.spent("a", Budget(1000, "day"), times.ms) == 900


def test_a_group_budget_holds_over_all_its_members() -> None:
    rule, core, times = make(grouped=True)
    assert isinstance(core, GroupScheduler)
    for tenant in ("a", "b", "c"):
        core.set_group(tenant, "org")
    core.set_group_policy("org", TenantPolicy(budgets=(Budget(10, "day", unit="records"),)))
    rule.budgets_changed()
    assert rule.budgeted
    for tenant in ("a", "b", "c", "solo"):
        backlog(core, tenant, 10)
    steps = drain(rule, times, 60)
    sent = Counter(s.tenant for s in steps if isinstance(s, Pick))
    assert sent["a"] + sent["b"] + sent["c"] == 10
    assert sent["solo"] == 10
    assert min(sent["a"], sent["b"], sent["c"]) >= 2  # shared among them meanwhile


def test_a_record_past_its_deadline_is_expired_and_not_charged() -> None:
    rule, core, times = make()
    budget = Budget(2, "day", unit="records")
    rule.set_policy("a", TenantPolicy(budgets=(budget,)))
    core.push("a", ("late", T0_MS - 1))
    core.push("a", ("ok", None))
    first = rule.next(times.ms)
    assert isinstance(first, Expire)
    assert rule.ledger.spent("a", budget, times.ms) == 0
    assert isinstance(rule.next(times.ms), Pick)
    assert rule.ledger.spent("a", budget, times.ms) == 1


def test_a_raised_limit_lets_a_waiting_tenant_go_at_once() -> None:
    rule, core, times = make()
    rule.set_policy("a", TenantPolicy(budgets=(Budget(2, "day", unit="records"),)))
    backlog(core, "a", 5)
    assert [type(s).__name__ for s in drain(rule, times, 5)] == ["Pick", "Pick", "Wait"]
    rule.set_policy("a", TenantPolicy(budgets=(Budget(4, "day", unit="records"),)))
    assert not rule.budget_held()
    assert [type(s).__name__ for s in drain(rule, times, 5)] == ["Pick", "Pick", "Wait"]


def test_a_refund_puts_a_waiting_tenant_back_in_the_pick() -> None:
    rule, core, times = make()
    budget = Budget(100, "day")
    rule.set_policy("a", TenantPolicy(budgets=(budget,)))
    for i in range(3):
        core.push("a", (f"a{i}", None), cost=50)
    assert [type(s).__name__ for s in drain(rule, times, 5)] == ["Pick", "Pick", "Wait"]
    # The first two cost 20 each, not 50: 60 is refunded.
    rule.ledger.settle(rule.charges("a"), -60, times.ms, times.ms)
    rule.release_budget_holds()
    step = rule.next(times.ms)
    assert isinstance(step, Pick)
    assert step.item[0] == "a2"


def test_a_put_back_pick_is_refunded() -> None:
    rule, core, times = make()
    budget = Budget(10, "day")
    rule.set_policy("a", TenantPolicy(budgets=(budget,)))
    core.push("a", ("a0", None), cost=4)
    step = rule.next(times.ms)
    assert isinstance(step, Pick)
    core.push_front("a", step.item, step.cost)  # its payload could not be read back
    rule.refund("a", step.item, step.cost, times.ms)
    assert rule.ledger.spent("a", budget, times.ms) == 0


def test_a_paused_tenant_waiting_for_its_budget_stays_out_until_both_end() -> None:
    rule, core, times = make()
    rule.set_policy("a", TenantPolicy(budgets=(Budget(1, "minute", unit="records"),)))
    backlog(core, "a", 3)
    assert isinstance(rule.next(times.ms), Pick)
    assert rule.next(times.ms) == Wait(60.0)
    rule.pause("a", 90.0)  # its upstream quota, on top
    times.advance(60.0)
    step = rule.next(times.ms)
    assert isinstance(step, Wait)
    assert math.isclose(step.seconds, 30.0)
    times.advance(30.0)
    assert isinstance(rule.next(times.ms), Pick)


def test_under_a_rate_a_refused_pick_takes_no_token() -> None:
    rule, core, times = make(rate=10.0, burst=1.0)
    rule.set_policy(
        "a", TenantPolicy(budgets=(Budget(1, "day", unit="records", on_exhausted="dead-letter"),))
    )
    backlog(core, "a", 3)
    backlog(core, "b", 3)
    answers, sent_at = [], []
    for _ in range(20):
        step = rule.next(times.ms)
        if isinstance(step, Wait):
            if step.seconds == math.inf:
                break
            times.advance(step.seconds)
            continue
        answers.append((type(step).__name__, step[0]))
        if isinstance(step, Pick):
            sent_at.append(round(times.clock.now(), 6))
    assert answers.count(("Exhausted", "a")) == 2
    # Four sends at 10/s with a burst of 1, back to back: the dead letters took no slot.
    assert sent_at == [0.0, 0.1, 0.2, 0.3]
