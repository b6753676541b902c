"""Token buckets and the egress limiter, on a manual clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairstream.core import EgressLimiter, ManualClock, TokenBucket


def grants_within_bound(grants: list[tuple[float, float]], rate: float, burst: float) -> None:
    """For every window [t_i, t_j] of grant times: granted amount <= rate * w + burst."""
    for i, (start, _) in enumerate(grants):
        total = 0.0
        for end, amount in grants[i:]:
            total += amount
            assert total <= rate * (end - start) + burst + 1e-6, (start, end, total)


gaps = st.lists(st.floats(0, 2, allow_nan=False), min_size=1, max_size=120)


@settings(max_examples=150, deadline=None)
@given(
    rate=st.floats(0.1, 100),
    burst=st.floats(1, 20),
    gaps=gaps,
)
def test_records_never_exceed_rate_times_window_plus_burst(rate, burst, gaps):
    clock = ManualClock()
    limiter = EgressLimiter(clock, rate=rate, burst=burst)
    grants = []
    for gap in gaps:
        clock.advance(gap)
        while limiter.try_acquire():
            grants.append((clock.now(), 1.0))
    grants_within_bound(grants, rate, burst)


@settings(max_examples=150, deadline=None)
@given(
    rate=st.floats(1, 50),
    burst=st.floats(1, 10),
    cost_rate=st.floats(1, 200),
    cost_burst=st.floats(1, 50),
    requests=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 60)), min_size=1, max_size=120),
)
def test_records_and_cost_limits_hold_together(rate, burst, cost_rate, cost_burst, requests):
    clock = ManualClock()
    limiter = EgressLimiter(
        clock, rate=rate, burst=burst, cost_rate=cost_rate, cost_burst=cost_burst
    )
    records, costs = [], []
    largest = max(cost for _, cost in requests)
    for gap, cost in requests:
        clock.advance(gap)
        if limiter.try_acquire(1, cost):
            records.append((clock.now(), 1.0))
            costs.append((clock.now(), float(cost)))
    grants_within_bound(records, rate, burst)
    # A request larger than the bucket goes when it is full, in debt: see the module doc.
    grants_within_bound(costs, cost_rate, max(cost_burst, largest))


@settings(max_examples=100, deadline=None)
@given(rate=st.floats(0.1, 1000), burst=st.floats(1, 10), cost=st.integers(1, 30))
def test_waiting_wait_time_is_always_enough(rate, burst, cost):
    clock = ManualClock(12345.678)
    limiter = EgressLimiter(clock, rate=rate, burst=burst, cost_rate=rate * 3)
    for _ in range(20):
        wait = limiter.wait_time(1, cost)
        assert wait >= 0
        clock.advance(wait)
        assert limiter.try_acquire(1, cost)


def test_limiter_wait_time_and_burst():
    clock = ManualClock()
    limiter = EgressLimiter(clock, rate=10, burst=3)
    assert [limiter.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert limiter.wait_time() == pytest.approx(0.1)
    clock.advance(0.05)
    assert not limiter.try_acquire()
    clock.advance(0.05)
    assert limiter.try_acquire()
    clock.advance(100)
    assert limiter.wait_time(records=3) == 0.0
    assert limiter.wait_time(records=4) == 0.0  # larger than the burst: goes when full


def test_cost_limit_alone():
    clock = ManualClock()
    limiter = EgressLimiter(clock, rate=None, cost_rate=100, cost_burst=100)
    assert limiter.rate is None
    assert limiter.try_acquire(1, 60)
    assert not limiter.try_acquire(1, 60)
    assert limiter.wait_time(1, 60) == pytest.approx(0.2)


def test_all_or_nothing_across_limits():
    clock = ManualClock()
    limiter = EgressLimiter(clock, rate=1, burst=5, cost_rate=10, cost_burst=10)
    assert limiter.try_acquire(1, 11)  # above the cost burst: allowed when full, in debt
    assert limiter.wait_time(1, 1) == pytest.approx(0.2)
    clock.advance(10)
    assert limiter.try_acquire(1, 10)
    assert not limiter.try_acquire(1, 1)  # cost bucket empty: records not taken either
    assert limiter.wait_time(1, 1) == pytest.approx(0.1)
    clock.advance(0.1)
    assert limiter.try_acquire(1, 1)


def test_unlimited_limiter_always_allows():
    limiter = EgressLimiter(ManualClock(), rate=None)
    assert all(limiter.try_acquire(1, 1000) for _ in range(100))
    assert limiter.wait_time(5, 5) == 0.0


def test_set_rate_live_keeps_earned_tokens():
    clock = ManualClock()
    limiter = EgressLimiter(clock, rate=10, burst=10)
    for _ in range(10):
        assert limiter.try_acquire()
    clock.advance(0.5)  # 5 tokens earned at the old rate
    limiter.set_rate(1, burst=10)
    assert limiter.rate == 1
    assert [limiter.try_acquire() for _ in range(6)] == [True] * 5 + [False]
    assert limiter.wait_time() == pytest.approx(1.0)
    limiter.set_rate(100, burst=2)
    assert limiter.burst == 2
    limiter.set_rate(None)
    assert limiter.rate is None
    assert limiter.try_acquire()
    limiter.set_rate(5)  # a limit that did not exist starts full, burst 1
    assert limiter.burst == 1
    limiter.set_rate(5, cost_rate=7)
    assert limiter.cost_rate == 7
    assert limiter.cost_burst == 7
    assert "rate=5" in repr(limiter)


def test_smaller_burst_trims_tokens():
    bucket = TokenBucket(rate=1, burst=10, now=0)
    bucket.reconfigure(rate=1, burst=2, now=0)
    assert bucket.available(0) == 2


@pytest.mark.parametrize(
    ("rate", "burst"), [(0, 1), (-1, 1), (float("inf"), 1), (1, 0), (True, 1), ("1", 1)]
)
def test_bucket_rejects_bad_parameters(rate, burst):
    with pytest.raises(ValueError, match="must be a"):
        TokenBucket(rate=rate, burst=burst, now=0)


def test_limiter_rejects_bad_rate():
    with pytest.raises(ValueError, match="rate"):
        EgressLimiter(ManualClock(), rate=0)
    with pytest.raises(ValueError, match="cost_rate"):
        EgressLimiter(ManualClock(), rate=1, cost_rate=-5)
