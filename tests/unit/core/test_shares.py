"""Group-wide fair shares (fairstream.core.shares): water filling over every instance's
tenants, the idle floor, and that the instances' rates never add up to more than the rate."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairstream.core.shares import (
    MAX_CAPPED,
    ClassDemand,
    allocate,
    instance_rate,
    summarize,
)


def test_weights_across_instances_are_honoured() -> None:
    demands = {"a": {0: ClassDemand(3)}, "b": {0: ClassDemand(1)}}
    assert instance_rate(demands, "a", 200) == pytest.approx(150)
    assert instance_rate(demands, "b", 200) == pytest.approx(50)


def test_one_backlogged_tenant_takes_all_but_the_idle_floor() -> None:
    demands = {"a": {0: ClassDemand(1)}, "b": {}, "c": {0: ClassDemand(0)}}
    floor = 200 * 0.05 / 3
    assert instance_rate(demands, "b", 200) == pytest.approx(floor)
    assert instance_rate(demands, "c", 200) == pytest.approx(floor)
    assert instance_rate(demands, "a", 200) == pytest.approx(200 - 2 * floor)


def test_alone_in_the_group_takes_the_whole_rate() -> None:
    assert instance_rate({"a": {}}, "a", 300) == 300


def test_caps_bind_and_the_rest_goes_to_the_others() -> None:
    demands = {"a": {0: ClassDemand(0, ((1, 10),))}, "b": {0: ClassDemand(1)}}
    assert allocate(demands, 100) == pytest.approx({"a": 10, "b": 90})


def test_a_fully_capped_class_leaves_the_rest_to_the_next_class() -> None:
    demands = {"a": {0: ClassDemand(0, ((1, 10), (2, 5)))}, "b": {1: ClassDemand(1)}}
    assert allocate(demands, 100) == pytest.approx({"a": 15, "b": 85})


def test_a_higher_class_takes_everything_it_can_use() -> None:
    demands = {"a": {0: ClassDemand(1)}, "b": {1: ClassDemand(5)}}
    assert allocate(demands, 100) == pytest.approx({"a": 100, "b": 0})


def test_summarize_keeps_the_largest_caps_and_sums_the_rest() -> None:
    tenants = [(0, 1.0, None), (0, 2.0, None), (1, 1.0, 3.0)]
    tenants += [(0, 1.0, float(c)) for c in range(1, MAX_CAPPED + 10)]
    demand = summarize(tenants)
    assert demand[0].weight == 3.0
    assert len(demand[0].capped) == MAX_CAPPED
    total_caps = sum(float(c) for c in range(1, MAX_CAPPED + 10))
    assert sum(cap for _, cap in demand[0].capped) == pytest.approx(total_caps)
    assert demand[1] == ClassDemand(0.0, ((1.0, 3.0),))


def test_bad_demands_are_refused() -> None:
    with pytest.raises(ValueError, match="weight"):
        ClassDemand(-1)
    with pytest.raises(ValueError, match="capped"):
        ClassDemand(0, ((0, 5),))
    with pytest.raises(ValueError, match="missing"):
        instance_rate({"a": {}}, "b", 10)
    with pytest.raises(ValueError, match="floor"):
        instance_rate({"a": {}, "b": {}}, "a", 10, floor=2)


class_demand = st.builds(
    ClassDemand,
    st.one_of(st.just(0.0), st.floats(1e-6, 10)),
    st.lists(
        st.tuples(st.floats(1e-6, 10), st.floats(1e-6, 500)),
        max_size=4,
    ).map(tuple),
)
demands_strategy = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.dictionaries(st.integers(0, 2), class_demand, max_size=3),
    min_size=1,
)


@given(demands_strategy, st.floats(1, 10_000, allow_nan=False))
def test_instances_never_add_up_to_more_than_the_rate(demands, rate) -> None:
    total = sum(instance_rate(demands, own, rate) for own in demands)
    assert total <= rate * (1 + 1e-9)
    assert all(instance_rate(demands, own, rate) >= 0 for own in demands)


@given(demands_strategy, st.floats(1, 10_000, allow_nan=False))
def test_water_filling_is_max_min_fair_in_the_top_class(demands, rate) -> None:
    shares = allocate(demands, rate)
    assert sum(shares.values()) <= rate * (1 + 1e-9)
    classes = sorted({c for d in demands.values() for c, cd in d.items() if not cd.empty})
    if not classes:
        assert all(v == 0 for v in shares.values())
        return
    top = classes[0]
    members = [d[top] for d in demands.values() if top in d]
    uncapped = sum(cd.weight for cd in members)
    caps = sum(cap for cd in members for _, cap in cd.capped)
    if uncapped > 0:
        # Uncapped demand is unbounded: the whole rate is handed out.
        assert sum(shares.values()) == pytest.approx(rate, rel=1e-6)
    else:
        # Only capped tenants: each class takes at most its caps.
        assert sum(shares.values()) <= rate * (1 + 1e-9)
        assert sum(shares.values()) >= min(rate, caps) * (1 - 1e-6)
