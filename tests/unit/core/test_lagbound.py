"""Credit from the egress group's committed offsets (``fairstream.core.lagbound``): the lag
counted from offsets (markers, partitions without commits, resets), the bound's rules one
by one, then a simulated loop (an emitter that refills up to the bound at each sample, a
consumer of fixed speed committing after each record; no broker) showing that the bound
keeps the lag near the horizon's worth of the consumer's throughput and follows a change of
speed. Time is a ManualClock's."""

from __future__ import annotations

import itertools
import math

import pytest

from fairstream.core.clock import ManualClock
from fairstream.core.lagbound import LagBound, LagSample, OffsetLag

# -- the lag -------------------------------------------------------------------------------


def test_no_committed_offset_anywhere_is_unknown():
    lag = OffsetLag()
    assert lag.observe({0: 10, 1: 5}, {}) is None
    assert lag.observe({0: 10}, {3: 4}) is None  # a partition egress does not have


def test_the_marker_at_the_end_of_a_lagging_partition_is_not_counted():
    lag = OffsetLag()
    # Partition 0: caught up behind its last transaction's marker (end 11, committed 10).
    # Partition 1: records 20..29 and a marker at 30 waiting (end 31, committed 20).
    # Partition 2: nothing ever written, nothing committed: no lag.
    sample = lag.observe({0: 11, 1: 31, 2: 0}, {0: 10, 1: 20})
    assert sample == LagSample(consumed=0, lag=10)


def test_consumed_counts_what_the_group_moved_past_and_never_goes_back():
    lag = OffsetLag()
    lag.observe({0: 50, 1: 50}, {0: 10, 1: 20})
    assert lag.observe({0: 50, 1: 50}, {0: 15, 1: 27}) == LagSample(consumed=12, lag=34 + 22)
    # Partition 0 reset back to 0: nothing consumed by going back; counted from there on.
    assert lag.observe({0: 50, 1: 50}, {0: 0, 1: 27}).consumed == 12
    assert lag.observe({0: 50, 1: 50}, {0: 3, 1: 27}).consumed == 15


def test_a_partition_without_a_commit_counts_from_its_end_when_first_seen():
    lag = OffsetLag()
    # Partition 1 had 100 offsets before we watched and the group committed none there.
    assert lag.observe({0: 11, 1: 100}, {0: 10}) == LagSample(0, 0)
    # Five records (and a marker) released there since: waiting.
    assert lag.observe({0: 11, 1: 106}, {0: 10}) == LagSample(0, 5)
    # The group's first commit there: what it consumed past the first end counts.
    assert lag.observe({0: 11, 1: 106}, {0: 10, 1: 103}) == LagSample(3, 2)


def test_an_absent_group_forgets_the_partitions():
    lag = OffsetLag()
    lag.observe({0: 20}, {0: 10})
    assert lag.observe({0: 20}, {}) is None
    # Back with a commit far ahead: the first sample of the new run consumed nothing.
    assert lag.observe({0: 40}, {0: 30}) == LagSample(0, 9)


# -- the bound: rules -----------------------------------------------------------------------


def feed(bound: LagBound, clock: ManualClock, samples: list[tuple[int, int]], step: float):
    out = []
    for consumed, lag in samples:
        out.append(bound.observe(LagSample(consumed, lag)))
        clock.advance(step)
    return out


def test_unknown_is_unlimited_and_forgets():
    clock = ManualClock()
    bound = LagBound(clock, floor=4)
    assert bound.observe(None) is None
    assert bound.bound is None
    assert bound.observe(LagSample(0, 0)) == 4  # the first sample starts at floor
    clock.advance(0.1)
    assert bound.observe(None) is None
    assert bound.lag is None
    assert bound.rate == 0.0


def test_rejects_bad_parameters():
    clock = ManualClock()
    with pytest.raises(ValueError, match="floor"):
        LagBound(clock, floor=0)
    with pytest.raises(ValueError, match="ceiling"):
        LagBound(clock, floor=10, ceiling=5)
    with pytest.raises(ValueError, match="horizon"):
        LagBound(clock, horizon=0)
    with pytest.raises(ValueError, match="growth"):
        LagBound(clock, growth=1.0)
    with pytest.raises(ValueError, match="window"):
        LagBound(clock, interval=1.0, window=0.5)
    with pytest.raises(ValueError, match="initial"):
        LagBound(clock, floor=4, initial=2)


def test_a_bound_that_does_not_bind_does_not_move():
    clock = ManualClock()
    bound = LagBound(clock, floor=4, initial=20)
    # The group consumes 100 a second but only ever 2 wait: offered, not its capacity.
    results = feed(bound, clock, [(10 * i, 2) for i in range(50)], 0.1)
    assert set(results) == {20}


def test_a_binding_bound_goes_to_littles_law_of_the_group_rate():
    clock = ManualClock()
    bound = LagBound(clock, floor=4, initial=40, horizon=0.5, headroom=0.2, spare=2.0)
    # 20 a second (2 per 0.1 s sample) while the emitter keeps the lag at the bound.
    consumed = 0
    bound.observe(LagSample(consumed, 0))
    for _ in range(40):
        current = bound.bound
        assert current is not None
        bound.observe(LagSample(consumed, current - 2))
        consumed += 2
        clock.advance(0.1)
    assert bound.rate == pytest.approx(20.0)
    assert bound.bound == math.ceil(20 * 0.5 * 1.2 + 2)
    assert bound.wait() == pytest.approx((bound.bound - 2) / 20, rel=0.2)


def test_growth_is_limited_per_interval():
    clock = ManualClock()
    bound = LagBound(clock, floor=4, growth=1.5, interval=0.25)
    bounds = []
    consumed = 0
    for _ in range(20):
        current = bound.bound or 4
        bounds.append(current)
        # A very fast group: it takes whatever the bound lets wait, every sample.
        bound.observe(LagSample(consumed, 0))
        consumed += current
        clock.advance(0.1)
    for before, after in itertools.pairwise(bounds):
        assert after <= math.ceil(before * 1.5) + 1
    assert bounds[-1] > 4 * 1.5**3  # it did grow


def test_a_stalled_group_brings_the_bound_to_floor():
    clock = ManualClock()
    bound = LagBound(clock, floor=3, initial=50)
    results = feed(bound, clock, [(100, 50)] * 20, 0.1)
    assert results[-1] == 3


def test_a_counter_that_went_back_starts_a_new_run():
    clock = ManualClock()
    bound = LagBound(clock, floor=4, initial=10)
    feed(bound, clock, [(1000 + 2 * i, 10) for i in range(10)], 0.1)
    # The reader's counter restarted (its thread did): no negative rate, no crash.
    results = feed(bound, clock, [(2 * i, 10) for i in range(10)], 0.1)
    assert bound.rate >= 0
    assert all(r is not None and r >= 4 for r in results)


# -- the loop --------------------------------------------------------------------------------


def run_loop(
    bound: LagBound, clock: ManualClock, speed: float, seconds: float, backlog: list[int]
) -> list[int]:
    """An emitter that releases up to the bound at each 0.1 s sample, a consumer that takes
    ``speed`` records a second (committing each), a backlog of ``backlog[0]`` records.
    Returns the lag at each sample."""
    step = 0.1
    lags = []
    consumed = 0.0
    waiting = 0
    for _ in range(round(seconds / step)):
        limit = bound.observe(LagSample(int(consumed), waiting))
        lags.append(waiting)
        room = backlog[0] if limit is None else max(0, min(backlog[0], limit - waiting))
        backlog[0] -= room
        waiting += room
        took = min(waiting, int(consumed + speed * step) - int(consumed))
        consumed += speed * step
        waiting -= took
        clock.advance(step)
    return lags


def test_the_loop_keeps_the_lag_near_the_horizon_and_follows_a_slower_group():
    clock = ManualClock()
    bound = LagBound(clock, horizon=0.5, floor=4)
    backlog = [100_000]
    lags = run_loop(bound, clock, speed=40, seconds=10, backlog=backlog)
    # 40 a second: about 40 * 0.5 * 1.2 + 2 = 26 may wait; never a backlog's worth.
    assert max(lags) <= 40
    assert max(lags[-20:]) >= 10  # and the group is kept busy
    served = 100_000 - backlog[0]
    assert served >= 0.8 * 40 * 10 - 40
    # The group slows to 10 a second: the bound follows it down.
    lags = run_loop(bound, clock, speed=10, seconds=10, backlog=backlog)
    assert max(lags[-30:]) <= 12
    assert bound.bound is not None
    assert bound.bound <= 12
