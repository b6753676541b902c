"""The reference schedules the demo and benchmarks compare fairstream with."""

from __future__ import annotations

import pytest

from fairstream.analysis.reference import Arrival, fifo_starts, gps_starts


def test_fifo_serves_in_arrival_order_at_the_rate() -> None:
    arrivals = [Arrival(0.0, "a", "a1"), Arrival(0.0, "a", "a2"), Arrival(0.05, "b", "b1")]
    starts = fifo_starts(arrivals, rate=10)
    assert starts == {"a1": 0.0, "a2": pytest.approx(0.1), "b1": pytest.approx(0.2)}


def test_gps_alone_starts_at_once() -> None:
    assert gps_starts([Arrival(1.0, "a", "a1")], rate=10) == {"a1": pytest.approx(1.0)}


def test_gps_quiet_tenant_is_not_stuck_behind_a_burst() -> None:
    burst = [Arrival(0.0, "noisy", f"n{i}") for i in range(100)]
    quiet = Arrival(1.0, "quiet", "q1")
    gps = gps_starts([*burst, quiet], rate=10)
    fifo = fifo_starts([*burst, quiet], rate=10)
    # Under GPS the quiet record gets half the server: it finishes 0.2 s after arriving.
    assert gps["q1"] == pytest.approx(1.1)
    assert fifo["q1"] == pytest.approx(10.0)
    # The noisy tenant's records keep their order and all get served.
    noisy = [gps[f"n{i}"] for i in range(100)]
    assert noisy == sorted(noisy)
    assert len(gps) == 101


def test_gps_weights_split_the_rate() -> None:
    arrivals = [Arrival(0.0, t, f"{t}{i}") for t in ("a", "b") for i in range(30)]
    gps = gps_starts(arrivals, rate=4, weights={"a": 3})
    # With weights 3:1, a's 30 records finish while b has had a third as many served.
    a_done = max(gps[f"a{i}"] for i in range(30))
    b_served_by_then = sum(1 for i in range(30) if gps[f"b{i}"] <= a_done)
    assert 9 <= b_served_by_then <= 11


def test_gps_of_the_demo_scenario_finishes_and_serves_everyone() -> None:
    from fairstream.cli.demo import Scenario

    arrivals = Scenario().arrivals()
    gps = gps_starts(arrivals, rate=50)
    assert set(gps) == {a.id for a in arrivals}
    assert all(gps[a.id] >= a.t for a in arrivals)
