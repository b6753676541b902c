"""Dominant-resource fairness (``fairstream.core.dominant``): with both ``--rate`` and
``--cost-rate`` binding, a tenant of many cheap requests and one of few costly ones get
equal dominant shares; without DRF (DRR by cost) they do not; with one limit nothing
changes."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from fairstream.core import FairScheduler, GroupScheduler, ManualClock, Pick
from fairstream.core.dominant import DominantCharge, dominant_shares
from fairstream.core.emission import EmissionRule, Wait

RATE, COST_RATE = 100.0, 1000.0  # records/s and cost/s: a record costing 10 uses both equally
CHEAP, COSTLY = 1, 100


def test_the_charge_is_the_larger_of_the_two_uses_in_cost_units():
    drf = DominantCharge(RATE, COST_RATE)
    assert drf.active
    assert drf.balance == 10
    assert drf.charge(1, 10) == 10  # at the balance: its cost, as without DRF
    assert drf.charge(1, 100) == 100  # costly: cost is its dominant resource
    assert drf.charge(1, 1) == 10  # cheap: its record slot is
    assert drf.charge(5, 20) == 50
    assert drf.extra(1) == 9
    assert drf.extra(10) == 0
    assert drf.extra(300) == 0
    assert drf.correction(1, 100) == 90  # declared cheap, cost 100: charged 10 at the pick
    assert drf.correction(100, 1) == -90
    assert drf.correction(2, 5) == 0  # both under the balance: the record slot dominated
    assert "10" in repr(drf)


@pytest.mark.parametrize(("rate", "cost_rate"), [(RATE, None), (None, COST_RATE), (None, None)])
def test_with_one_limit_the_charge_is_todays(rate, cost_rate):
    drf = DominantCharge(rate, cost_rate)
    assert not drf.active
    for cost in (1, 7, 100):
        assert drf.charge(1, cost) == cost
        assert drf.extra(cost) == 0
    assert drf.correction(3, 10) == 7  # as cost_correction: measured - declared


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan, "10", True])
def test_rates_must_be_positive_finite_numbers(bad):
    with pytest.raises(ValueError, match="rate"):
        DominantCharge(bad, COST_RATE)
    with pytest.raises(ValueError, match="cost_rate"):
        DominantCharge(RATE, bad)


def test_dominant_shares():
    shares = dominant_shares({"a": 50}, {"a": 50, "b": 500}, RATE, COST_RATE, 1.0)
    assert shares == {"a": 0.5, "b": 0.5}


# -- the must-show: two tenants, both limits binding -------------------------------------------


def run(
    core: FairScheduler[int] | GroupScheduler[int],
    clock: ManualClock,
    *,
    dominant: bool,
    seconds: float,
) -> tuple[Counter[str], Counter[str]]:
    """Drive the emission rule at RATE and COST_RATE for ``seconds``, every tenant kept
    backlogged (each record sent is replaced); records and cost sent per tenant."""
    rule = EmissionRule(core, clock, rate=RATE, cost_rate=COST_RATE, dominant=dominant)
    records: Counter[str] = Counter()
    cost: Counter[str] = Counter()
    end = clock.now() + seconds
    n = 0
    while clock.now() < end:
        step = rule.next()
        if isinstance(step, Wait):
            clock.advance(step.seconds)
            continue
        assert isinstance(step, Pick)
        records[step.tenant] += 1
        cost[step.tenant] += step.cost
        n += 1
        core.push(step.tenant, n, step.cost)  # stays backlogged
    return records, cost


def flat_pair() -> tuple[FairScheduler[int], ManualClock]:
    clock = ManualClock()
    core: FairScheduler[int] = FairScheduler(clock)
    for i in range(20):
        core.push("cheap", i, CHEAP)
        core.push("costly", i, COSTLY)
    return core, clock


def test_without_drf_the_cheap_tenants_dominant_share_is_ten_times_the_costly_ones():
    records, cost = run(*flat_pair(), dominant=False, seconds=60)
    shares = dominant_shares(records, cost, RATE, COST_RATE, 60)
    assert shares["cheap"] > 5 * shares["costly"]
    assert cost["cheap"] == pytest.approx(cost["costly"], rel=0.05)  # DRR by cost: equal cost


def test_with_drf_dominant_shares_are_equal_and_both_limits_bind():
    records, cost = run(*flat_pair(), dominant=True, seconds=60)
    shares = dominant_shares(records, cost, RATE, COST_RATE, 60)
    assert shares["cheap"] == pytest.approx(shares["costly"], rel=0.05)
    # Both limits bind: the records and the cost sent are each (about) their limit.
    assert sum(records.values()) >= 0.95 * RATE * 60
    assert sum(cost.values()) >= 0.95 * COST_RATE * 60
    assert shares["cheap"] == pytest.approx(10 / 11, rel=0.05)


def test_drf_needs_both_limits_in_the_rule():
    clock = ManualClock()
    core: FairScheduler[int] = FairScheduler(clock)
    assert EmissionRule(core, clock, rate=RATE, dominant=True).dominant is None
    assert EmissionRule(core, clock, rate=RATE, cost_rate=COST_RATE).dominant is None
    rule = EmissionRule(core, clock, rate=RATE, cost_rate=COST_RATE, dominant=True)
    assert rule.dominant is not None
    assert rule.dominant.balance == 10


def test_drf_between_groups_charges_each_groups_dominant_use():
    """Group A: two tenants of cheap requests; group B: one of costly ones. DRF applies at
    both levels: the groups' dominant shares come out equal, A's tenants split A's."""
    clock = ManualClock()
    core: GroupScheduler[int] = GroupScheduler(clock)
    for tenant, group in (("a1", "A"), ("a2", "A"), ("b", "B")):
        core.set_group(tenant, group)
    for i in range(20):
        core.push("a1", i, CHEAP)
        core.push("a2", i, CHEAP)
        core.push("b", i, COSTLY)
    records, cost = run(core, clock, dominant=True, seconds=60)
    group_records = Counter({"A": records["a1"] + records["a2"], "B": records["b"]})
    group_cost = Counter({"A": cost["a1"] + cost["a2"], "B": cost["b"]})
    shares = dominant_shares(group_records, group_cost, RATE, COST_RATE, 60)
    assert shares["A"] == pytest.approx(shares["B"], rel=0.05)
    assert records["a1"] == pytest.approx(records["a2"], rel=0.05)


def test_measured_cost_corrects_in_dominant_units():
    """A tenant declaring cheap requests that measure costly is charged the difference of
    dominant uses: shares follow what really dominates."""
    clock = ManualClock()
    core: FairScheduler[int] = FairScheduler(clock)
    for i in range(20):
        core.push("liar", i, CHEAP)  # declares 1, costs 100
        core.push("honest", i, COSTLY)
    rule = EmissionRule(core, clock, rate=RATE, cost_rate=COST_RATE, dominant=True)
    drf = rule.dominant
    assert drf is not None
    records: Counter[str] = Counter()
    real: Counter[str] = Counter()
    n = 0
    while clock.now() < 60:
        step = rule.next()
        if isinstance(step, Wait):
            clock.advance(step.seconds)
            continue
        assert isinstance(step, Pick)
        n += 1
        records[step.tenant] += 1
        real[step.tenant] += COSTLY
        if step.tenant == "liar":
            core.charge("liar", drf.correction(CHEAP, COSTLY))  # the worker's report
        core.push(step.tenant, n, step.cost)
    # Both really cost 100 a record: equal records (the liar's declared cost only spends
    # fewer cost tokens).
    assert records["liar"] == pytest.approx(records["honest"], rel=0.05)
