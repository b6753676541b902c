"""The egress partition choice (``fairstream.core.spread``): quiet tenants keep their key's
partition, backlogged ones fill the least loaded, loads decay; time given by the test."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from fairstream.core.spread import HALF_LIFE, SLACK, EgressSpread


def test_a_quiet_tenant_keeps_its_keys_partition_however_loaded_it_is() -> None:
    spread = EgressSpread(4)
    for i in range(50):
        assert spread.choose(2, False, i * 0.01) == 2
    assert spread.load(2, 0.5) > 40
    assert [spread.load(p, 0.5) for p in (0, 1, 3)] == [0.0, 0.0, 0.0]


def test_a_backlogged_tenant_goes_round_the_partitions_from_its_own() -> None:
    spread = EgressSpread(4)
    # Equal loads: its key's partition first, then the ones after it in turn.
    assert [spread.choose(1, True, 0.0) for _ in range(8)] == [1, 2, 3, 0, 1, 2, 3, 0]


def test_a_backlogged_tenant_fills_the_partitions_quiet_ones_leave() -> None:
    spread = EgressSpread(4)
    rng = random.Random(7)
    noisy: Counter[int] = Counter()
    total: Counter[int] = Counter()
    for i in range(4000):
        now = i * 0.01
        if rng.random() < 0.2:  # a fifth of the releases: quiet tenants homed on 0 and 1
            total[spread.choose(rng.choice((0, 1)), False, now)] += 1
        else:  # the noisy tenant, whose key hashes to 0
            chosen = spread.choose(0, True, now)
            noisy[chosen] += 1
            total[chosen] += 1
    # Every partition ends up with about a quarter of all releases; the noisy tenant's
    # records go mostly where the quiet ones are not.
    assert set(noisy) == {0, 1, 2, 3}
    assert max(total.values()) - min(total.values()) < 0.02 * 4000
    assert noisy[2] > noisy[0]
    assert noisy[3] > noisy[1]


def test_loads_decay_by_half_every_half_life() -> None:
    spread = EgressSpread(2, half_life=2.0)
    for _ in range(8):
        spread.choose(0, False, 10.0)
    assert spread.load(0, 10.0) == pytest.approx(8.0)
    assert spread.load(0, 12.0) == pytest.approx(4.0)
    assert spread.load(0, 16.0) == pytest.approx(1.0)
    assert spread.load(1, 16.0) == 0.0


def test_old_releases_stop_counting_so_a_partition_busy_long_ago_is_used_again() -> None:
    spread = EgressSpread(2)
    for _ in range(100):
        spread.choose(0, False, 0.0)  # partition 0 took a burst
    assert spread.choose(0, True, 0.1) == 1  # just after it: the other one
    # 20 half-lives later the burst counts for nothing next to one fresh release on 1.
    spread.choose(1, False, 20 * HALF_LIFE)
    assert spread.choose(1, True, 20 * HALF_LIFE) == 0


@pytest.mark.parametrize("idle", [70.0, 5_000.0, 1e9])
def test_a_long_idle_spell_neither_overflows_nor_remembers(idle: float) -> None:
    spread = EgressSpread(3)
    for i in range(30):
        spread.choose(0, False, i * 0.5)
    later = 15.0 + idle
    assert spread.load(0, later) < 1e-6
    assert spread.choose(2, True, later) == 2  # all alike now: its own first
    assert spread.load(2, later) == pytest.approx(1.0)
    for i in range(1, 200):  # and it goes on counting afterwards
        spread.choose(0, True, later + i)
    assert all(math.isfinite(spread.load(p, later + 200)) for p in range(3))


def test_one_partition_takes_everything() -> None:
    spread = EgressSpread(1)
    assert {spread.choose(0, True, i * 0.1) for i in range(10)} == {0}


def test_a_clock_read_before_the_last_release_counts_as_that_release() -> None:
    spread = EgressSpread(2)
    spread.choose(0, False, 100.0)
    assert spread.load(0, 99.0) == pytest.approx(1.0)


@pytest.mark.parametrize("partitions", [0, -1, 1.5, True])
def test_partitions_must_be_a_positive_integer(partitions: object) -> None:
    with pytest.raises(ValueError, match="partitions"):
        EgressSpread(partitions)  # type: ignore[arg-type]


@pytest.mark.parametrize("half_life", [0.0, -1.0, math.inf, math.nan])
def test_half_life_must_be_positive_and_finite(half_life: float) -> None:
    with pytest.raises(ValueError, match="half_life"):
        EgressSpread(2, half_life=half_life)


@pytest.mark.parametrize("home", [-1, 4])
def test_home_must_be_one_of_the_partitions(home: int) -> None:
    with pytest.raises(ValueError, match="home"):
        EgressSpread(4).choose(home, True, 0.0)


def test_a_partition_behind_by_more_than_the_slack_is_skipped_however_light() -> None:
    spread = EgressSpread(3)
    for _ in range(6):  # partitions 1 and 2 took many releases, settled already (no key)
        spread.choose(1, False, 0.0)
        spread.choose(2, False, 0.0)
    for i in range(SLACK):  # partition 0: lightly loaded, but records out
        spread.choose(0, False, 0.0, key=f"q{i}")
    assert [spread.outstanding(p) for p in range(3)] == [SLACK, 0, 0]
    assert spread.choose(1, True, 0.1, key="n0") == 0  # within the slack: the load decides
    assert spread.outstanding(0) == SLACK + 1
    assert spread.choose(0, True, 0.1, key="n1") == 1  # behind now: skipped
    assert spread.prune({"q0", "q1", "n1"}) == 1
    assert spread.choose(2, True, 0.1) == 0  # caught up: the lightest again


def test_a_slow_partition_is_kept_within_the_slack_of_the_others() -> None:
    """Two partitions whose worker settles every record at once, one whose worker never
    does: the slow one is given at most SLACK + 1 records; the others take the rest."""
    spread = EgressSpread(3)
    held: set[str] = set()
    placed: Counter[int] = Counter()
    for i in range(300):
        key = f"r{i}"
        chosen = spread.choose(0, True, i * 0.01, key=key)
        placed[chosen] += 1
        if chosen == 2:
            held.add(key)  # never settled
        spread.prune(held)
    assert placed[2] <= SLACK + 1
    assert placed[0] + placed[1] >= 300 - SLACK - 1
    assert abs(placed[0] - placed[1]) <= 2


def test_a_request_id_released_twice_counts_once_where_it_went_last() -> None:
    spread = EgressSpread(2)
    spread.choose(0, False, 0.0, key="dup")
    spread.choose(1, False, 0.0, key="dup")
    assert [spread.outstanding(p) for p in range(2)] == [0, 1]
    assert spread.prune(()) == 1
    assert [spread.outstanding(p) for p in range(2)] == [0, 0]


def test_a_tenants_records_of_one_stamp_go_to_one_partition() -> None:
    spread = EgressSpread(4)
    burst = [spread.choose(0, True, 0.0, tenant="A", stamp=1000) for _ in range(3)]
    assert burst == [0, 0, 0]  # a burst: one partition's FIFO keeps its order
    other = spread.choose(0, True, 0.0, tenant="B", stamp=1000)
    assert other == 1  # another tenant at that stamp is spread as ever
    assert spread.choose(0, True, 0.0, tenant="A", stamp=1000) == 0
    # The next stamp: placed afresh (the least loaded), remembered for that stamp.
    nxt = spread.choose(0, True, 0.01, tenant="A", stamp=1010)
    assert nxt in (2, 3)
    assert spread.choose(0, True, 0.01, tenant="A", stamp=1010) == nxt
    assert spread.choose(0, False, 0.01, tenant="A", stamp=1010) == nxt  # even quiet now
