"""The per-window fairness audit: Jain over weighted shares, the largest shortfall, busy periods."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairstream.analysis.stats import backlogged_throughout, busy_periods, window_fairness


def test_equal_service_at_equal_weights_is_perfectly_fair():
    result = window_fairness({"a": 50, "b": 50, "c": 50}, {})
    assert result.tenants == 3
    assert result.jain == 1.0
    assert result.worst is None
    assert result.shortfall == 0.0


def test_service_in_proportion_to_weight_is_perfectly_fair():
    result = window_fairness({"gold": 75, "bronze": 25}, {"gold": 3})
    assert result.jain == pytest.approx(1.0)
    assert result.shortfall == pytest.approx(0.0)


def test_equal_service_at_unequal_weights_falls_short_for_the_heavier_tenant():
    # gold (weight 3) is owed 75 of 100 and got 50: a third of its share missing.
    result = window_fairness({"gold": 50, "bronze": 50}, {"gold": 3})
    assert result.worst == "gold"
    assert result.shortfall == pytest.approx(1 / 3)
    assert result.shortfall_units == pytest.approx(25)
    # ratios 50/75 and 50/25: Jain = (2/3 + 2)^2 / (2 * (4/9 + 4))
    assert result.jain == pytest.approx((2 / 3 + 2) ** 2 / (2 * (4 / 9 + 4)))


def test_a_starved_tenant_has_the_whole_shortfall():
    result = window_fairness({"noisy": 100, "quiet": 0}, {})
    assert result.worst == "quiet"
    assert result.shortfall == 1.0
    assert result.shortfall_units == 50
    assert result.jain == pytest.approx(0.5)  # 1/n: one tenant got everything


def test_strict_priority_between_classes_is_not_a_shortfall():
    served = {"urgent": 90, "urgent-2": 90, "batch": 0}
    result = window_fairness(served, {}, {"urgent": 0, "urgent-2": 0, "batch": 1})
    assert result.tenants == 2  # batch's class received nothing: nothing to fall short of
    assert result.jain == 1.0
    assert result.shortfall == 0.0


def test_no_backlogged_tenant_means_no_contention():
    result = window_fairness({}, {})
    assert result.tenants == 0
    assert result.jain is None
    assert result.shortfall == 0.0


@given(
    st.dictionaries(
        st.sampled_from("abcdefgh"),
        st.tuples(st.integers(0, 1000), st.sampled_from([0.5, 1.0, 2.0, 3.0])),
        min_size=1,
    )
)
def test_jain_is_between_one_over_n_and_one_and_shortfall_a_fraction(tenants):
    served = {t: float(s) for t, (s, _) in tenants.items()}
    weights = {t: w for t, (_, w) in tenants.items()}
    result = window_fairness(served, weights)
    if sum(served.values()) == 0:
        assert result.jain is None
        return
    assert result.jain is not None
    assert 1 / len(served) - 1e-9 <= result.jain <= 1 + 1e-9
    assert 0.0 <= result.shortfall <= 1.0
    if result.worst is not None:
        total, weight = sum(served.values()), sum(weights.values())
        entitled = total * weights[result.worst] / weight
        assert math.isclose(result.shortfall_units, entitled - served[result.worst])


def test_busy_periods_merge_overlapping_and_touching_spans():
    spans = [(5.0, 6.0), (0.0, 2.0), (1.0, 3.0), (3.0, 4.0), (7.0, 7.5)]
    assert busy_periods(spans) == [(0.0, 4.0), (5.0, 6.0), (7.0, 7.5)]
    assert busy_periods([]) == []


def test_backlogged_throughout_needs_one_period_covering_the_window():
    periods = busy_periods([(0.0, 2.0), (1.5, 12.0), (13.0, 20.0)])
    assert backlogged_throughout(periods, 0.0, 10.0)
    assert not backlogged_throughout(periods, 10.0, 20.0)  # idle between 12 and 13
    assert backlogged_throughout(periods, 13.0, 20.0)
