"""The clocks, percentiles, Jain's index and the fair-share tracker."""

from __future__ import annotations

import pytest

from fairstream.analysis.stats import FairShareTracker, jain_index, percentile
from fairstream.core import Clock, ManualClock, MonotonicClock


def test_manual_clock_moves_only_forward():
    clock = ManualClock(5)
    assert isinstance(clock, Clock)
    assert clock.now() == 5.0
    assert clock.advance(1.5) == 6.5
    assert clock.set(10) == 10.0
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        clock.set(9)
    assert repr(clock) == "ManualClock(10.0)"


def test_monotonic_clock():
    clock = MonotonicClock()
    assert isinstance(clock, Clock)
    assert clock.now() <= clock.now()


def test_percentile_interpolates_like_numpy():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([4, 1, 3, 2], 0) == 1
    assert percentile([1, 2, 3, 4], 100) == 4
    assert percentile(list(range(101)), 99) == 99
    assert percentile([7], 99) == 7
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1], 101)


def test_jain_index():
    assert jain_index([3, 3, 3]) == 1.0
    assert jain_index([1, 0, 0, 0]) == 0.25
    assert jain_index([0, 0]) == 1.0
    assert jain_index([1, 2]) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="no values"):
        jain_index([])
    with pytest.raises(ValueError, match="non-negative"):
        jain_index([1, -1])


def test_fair_share_tracker_weighted():
    tracker = FairShareTracker()
    tracker.backlogged("A", 2)
    tracker.backlogged("B", 1)
    tracker.backlogged("B", 1)  # already backlogged: no effect
    for tenant in "AAB" * 3:
        tracker.served(tenant)
    tracker.idle("A")
    tracker.idle("B")
    tracker.idle("B")
    assert tracker.ratios() == pytest.approx({"A": 1.0, "B": 1.0})
    assert tracker.jain_index() == pytest.approx(1.0)


def test_fair_share_tracker_unfair_and_still_backlogged():
    tracker = FairShareTracker()
    assert tracker.jain_index() is None
    tracker.backlogged("A")
    tracker.backlogged("B")
    for _ in range(4):
        tracker.served("A")
    ratios = tracker.ratios()
    assert ratios == pytest.approx({"A": 2.0, "B": 0.0})
    assert tracker.jain_index() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="not backlogged"):
        tracker.served("C")
