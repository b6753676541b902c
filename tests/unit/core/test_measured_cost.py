"""Measured cost: ``cost_correction`` and ``FairScheduler.charge``. Shares follow what the
requests really cost once the difference from the declared cost is charged."""

from __future__ import annotations

import math
import random
from collections import Counter, deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairstream.analysis.stats import jain_index
from fairstream.core import FairScheduler, ManualClock, TenantPolicy, cost_correction
from fairstream.core.usage import MAX_COST

# -- cost_correction ------------------------------------------------------------------------


def test_correction_is_reported_minus_declared() -> None:
    assert cost_correction(1, 10) == 9
    assert cost_correction(350, 120) == -230
    assert cost_correction(5, 5) == 0
    assert cost_correction(5, None) == 0  # nothing reported: the declared cost stands


@pytest.mark.parametrize(
    ("declared", "reported"),
    [(0, 5), (-1, 5), (1, 0), (1, -3), (1, MAX_COST + 1), (MAX_COST + 1, 1), (1, 2.5), (True, 1)],
)
def test_unbelievable_costs_are_refused(declared: object, reported: object) -> None:
    assert cost_correction(declared, reported) is None  # type: ignore[arg-type]


def test_max_ratio_refuses_absurd_reports() -> None:
    assert cost_correction(10, 1000, max_ratio=100) == 990
    assert cost_correction(10, 1001, max_ratio=100) is None
    assert cost_correction(1000, 10, max_ratio=100) == -990
    assert cost_correction(1000, 9, max_ratio=100) is None


@pytest.mark.parametrize("ratio", [0.5, -1, math.inf, math.nan, True])
def test_max_ratio_must_be_a_finite_number_of_at_least_1(ratio: object) -> None:
    with pytest.raises(ValueError, match="max_ratio"):
        cost_correction(1, 1, max_ratio=ratio)  # type: ignore[arg-type]


# -- FairScheduler.charge -------------------------------------------------------------------


def scheduler(quantum: float = 1) -> FairScheduler[int]:
    return FairScheduler(ManualClock(), quantum=quantum)


def test_charging_a_tenant_without_backlog_changes_nothing() -> None:
    s = scheduler()
    assert s.charge("idle", 5) is False
    assert "idle" not in s
    s.push("acme", 1)
    s.set_policy("acme", TenantPolicy(paused=True))
    assert s.charge("acme", 5) is False  # a paused tenant keeps no deficit


@pytest.mark.parametrize("amount", [math.nan, math.inf, -math.inf, "3", True])
def test_charge_amount_must_be_a_finite_number(amount: object) -> None:
    s = scheduler()
    s.push("acme", 1)
    with pytest.raises(ValueError, match="amount"):
        s.charge("acme", amount)  # type: ignore[arg-type]


def order(s: FairScheduler[int], picks: int) -> str:
    out = []
    for _ in range(picks):
        pick = s.pick()
        assert pick is not None
        out.append(pick.tenant)
    return "".join(out)


def backlogged(tenants: str, each: int = 20) -> FairScheduler[int]:
    s = scheduler()
    for i in range(each):
        for t in tenants:
            s.push(t, i)
    return s


def test_a_charge_makes_the_tenant_sit_out_the_rounds_it_owes() -> None:
    s = backlogged("AB")
    assert order(s, 2) == "AB"
    assert s.charge("A", 2) is True  # A's first request really cost 3
    assert order(s, 6) == "BBABAB"  # B gets the two rounds A owes


def test_a_refund_is_given_in_full() -> None:
    s = scheduler(quantum=2)
    for i in range(20):
        for t in "AB":
            s.push(t, i, cost=2)
    assert order(s, 8) == "ABABABAB"
    for _ in range(4):
        assert s.charge("A", -1) is True  # A's four requests cost 1, not 2
    # Two records more (the four units it was overcharged), not one (a quantum's worth).
    assert order(s, 8) == "AAABABAB"


def test_a_refund_brings_a_tenant_sitting_out_rounds_back_at_once() -> None:
    s = backlogged("AB")
    assert order(s, 2) == "AB"
    assert s.charge("A", 10) is True  # owes ten rounds
    assert order(s, 3) == "BBB"
    assert s.charge("A", -10) is True  # the report was wrong: corrected back
    # Back in the next round, not ten rounds later, with the rounds it sat out for a debt
    # it never owed: the two are even again (within the record B's round began with).
    assert order(s, 4) == "BAAA"
    assert order(s, 4) == "ABAB"


def test_two_tenants_of_the_same_costs_do_not_drift_apart() -> None:
    """Both tenants' requests declare 1-100 and cost 0.5-2x that, drawn the same way; each
    call's correction is charged before the next pick. The service difference on measured
    cost stays within twice the largest request's cost plus one call's mis-declaration;
    refunds kept only in part (up to a quantum) let it wander past 400."""
    rng = random.Random(7)
    s: FairScheduler[int] = FairScheduler(ManualClock(), quantum=100)
    measured: dict[int, int] = {}
    for key in range(20_000):
        declared = rng.randint(1, 100)
        measured[key] = max(1, min(100, int(declared * rng.uniform(0.5, 2.0))))
        s.push("AB"[key % 2], key, cost=declared)
    served = {"A": 0, "B": 0}
    worst = 0
    while s.backlog("A")[0] and s.backlog("B")[0]:
        pick = s.pick()
        assert pick is not None
        served[pick.tenant] += measured[pick.item]
        worst = max(worst, abs(served["A"] - served["B"]))
        s.charge(pick.tenant, measured[pick.item] - pick.cost)
    assert worst <= 2 * 100 + 50


def test_shares_follow_the_measured_cost() -> None:
    """Both tenants declare cost 1; 'heavy' really costs 10. With the corrections charged
    (a few picks late, as feedback is), each gets about the same real cost; without them,
    the same number of records, so ten times the cost for 'heavy'."""

    def run(feedback: bool) -> dict[str, int]:
        s = backlogged("HL", each=3000)
        real = {"H": 10, "L": 1}
        late: deque[str] = deque()
        served: Counter[str] = Counter()
        for _ in range(2000):
            pick = s.pick()
            assert pick is not None
            served[pick.tenant] += real[pick.tenant]
            late.append(pick.tenant)
            if len(late) > 5:  # the feedback of the request sent 5 picks ago
                tenant = late.popleft()
                correction = cost_correction(1, real[tenant])
                assert correction is not None
                if feedback:
                    s.charge(tenant, correction)
        return dict(served)

    with_feedback = run(feedback=True)
    assert jain_index(with_feedback.values()) >= 0.95
    without = run(feedback=False)
    assert without["H"] == 10 * without["L"]
    assert jain_index(without.values()) < 0.7


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("push"), st.sampled_from("ABC"), st.integers(1, 5)),
            st.tuples(st.just("pick"), st.just(""), st.just(0)),
            st.tuples(st.just("charge"), st.sampled_from("ABC"), st.integers(-20, 50)),
        ),
        max_size=150,
    ),
    st.sampled_from([1, 2, 0.5]),
)
def test_charges_never_lose_or_reorder_records(
    ops: list[tuple[str, str, int]], quantum: float
) -> None:
    s = scheduler(quantum)
    pushed: dict[str, list[int]] = {t: [] for t in "ABC"}
    departed: dict[str, list[int]] = {t: [] for t in "ABC"}
    for n, (op, tenant, value) in enumerate(ops):
        if op == "push":
            s.push(tenant, n, cost=value)
            pushed[tenant].append(n)
        elif op == "charge":
            s.charge(tenant, value)
        else:
            pick = s.pick()
            if pick is not None:
                departed[pick.tenant].append(pick.item)
    while len(s):  # whatever was charged, every record still goes
        pick = s.pick()
        assert pick is not None
        departed[pick.tenant].append(pick.item)
    assert departed == pushed
