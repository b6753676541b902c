"""fairstream.analysis.contention: trigger.dev's contention-window fairness, on schedules
small enough to count by hand."""

from __future__ import annotations

import pytest

from fairstream.analysis.contention import Service, contention


def test_alternating_equal_tenants_are_fair():
    services = [Service("a" if i % 2 == 0 else "b", 0, i) for i in range(11)]
    c = contention(services)
    assert c.share_over_weight == {"a": pytest.approx(1.0), "b": pytest.approx(1.0)}
    assert c.worst_share_over_weight == pytest.approx(1.0)
    assert c.jain == pytest.approx(1.0)
    assert c.window == 10  # the last service: only a had work left, no contention
    assert c.makespan == 10


def test_a_tenant_served_only_after_the_other_drained_was_starved():
    services = [Service("heavy", 0, i) for i in range(5)] + [Service("light", 0, 5)]
    c = contention(services)
    # Five services while both waited, all heavy's: light's share 0 of an expected half.
    assert c.window == 5
    assert c.share_over_weight == {"heavy": pytest.approx(2.0), "light": 0.0}
    assert c.worst_share_over_weight == 0.0
    assert c.jain == pytest.approx(0.5)
    assert c.mean_wait == {"heavy": pytest.approx(2.0), "light": pytest.approx(5.0)}


def test_records_not_arrived_yet_do_not_contend():
    # b's record arrives at 3: a is alone before, so those services are outside the window.
    services = [Service("a", 0, t) for t in range(4)] + [Service("b", 3, 4)]
    c = contention(services)
    assert c.window == 1  # at 3: a's record and b's, both waiting; a served
    assert c.share_over_weight == {"a": pytest.approx(2.0), "b": 0.0}


def test_weights_set_the_expected_share():
    # 3:1 service while both are backlogged is fair for weights 3 and 1.
    order = ["small", "big", "big", "big"] * 5 + ["small"]
    services = [Service(g, 0, i) for i, g in enumerate(order)]
    c = contention(services, {"big": 3})
    assert c.window == 20
    assert c.share_over_weight == {"big": pytest.approx(1.0), "small": pytest.approx(1.0)}
    unweighted = contention(services)
    assert unweighted.worst_share_over_weight == pytest.approx(0.5)


def test_ties_keep_the_given_order():
    services = [Service("a", 0, 0), Service("b", 0, 0), Service("a", 0, 1)]
    assert contention(services).window == 2  # a then b at 0, both waiting each time
    # b first at 0, then a@1 given before a@0: after b, a is alone.
    flipped = contention(services[::-1])
    assert (flipped.window, flipped.share_over_weight) == (1, {"a": 0.0, "b": 2.0})


def test_mean_wait_of_a_set_of_tenants():
    c = contention([Service("x", 0, 2), Service("y", 1, 5), Service("y", 1, 7)])
    assert c.mean_wait_of(["x", "y"]) == pytest.approx((2 + 5) / 2)


def test_no_services_and_service_before_arrival_are_errors():
    with pytest.raises(ValueError, match="no services"):
        contention([])
    with pytest.raises(ValueError, match="before it arrived"):
        contention([Service("a", 5, 4)])
