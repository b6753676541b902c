"""What the emitter counts per tenant at each commit (``fairstream.scheduler.tallies``): counts
that add up, dwell times bounded to the newest of the latest emitters, and the views of a
transaction's flat tally."""

from __future__ import annotations

import bisect
import random

from fairstream.scheduler.metrics import DWELL_BUCKETS, CheapHistogram
from fairstream.scheduler.tallies import (
    DWELL_SAMPLES,
    DWELL_TENANTS,
    Tallies,
    Tally,
    add_counts,
    bucket_dwells,
)
from tests.unit.scheduler.parts import tally_of


def test_counts_add_up_since_the_start_and_since_the_probe() -> None:
    tallies = Tallies()
    assert tallies.committed(tally_of({"a": [0.1, 0.2], "b": [0.3]})) == 3
    assert tallies.committed(tally_of({"a": [0.4]})) == 1
    assert tallies.emitted == {"a": 3, "b": 1}
    assert tallies.take_since_probe() == {"a": 3, "b": 1}
    tallies.committed(tally_of({"b": [0.5, 0.6]}))
    assert tallies.take_since_probe() == {"b": 2}
    assert tallies.take_since_probe() == {}
    assert tallies.emitted == {"a": 3, "b": 3}


def test_a_tenant_keeps_its_newest_dwell_times_in_order() -> None:
    tallies = Tallies()
    sent = 0
    given: list[tuple[Tally, list[float]]] = []  # each transaction's tally, and a copy
    for size in (1, 3, DWELL_SAMPLES - 2, 5, 2 * DWELL_SAMPLES, 7, 1):
        seconds = [float(sent + i) for i in range(size)]
        sent += size
        tally = tally_of({"a": seconds, "b": [-1.0] * (size % 3)})  # b's between, unkept
        given.append((tally, list(tally.seconds)))
        tallies.committed(tally)
        kept = list(tallies.dwell["a"])
        assert kept == [float(i) for i in range(max(0, sent - DWELL_SAMPLES), sent)]
    # A committed tally is not changed by its commit or by later ones.
    assert all(tally.seconds == copy for tally, copy in given)


def test_only_the_latest_emitters_keep_dwell_times_latest_last() -> None:
    tallies = Tallies()
    tallies.committed(tally_of({"old": [1.0]}))
    tallies.committed(tally_of({f"t{i}": [0.5] for i in range(DWELL_TENANTS - 1)}))
    tallies.committed(tally_of({"old": [2.0]}))  # emitted again: the latest now
    assert len(tallies.dwell) == DWELL_TENANTS
    assert next(reversed(tallies.dwell)) == "old"
    assert list(tallies.dwell["old"]) == [1.0, 2.0]
    # A transaction over more tenants than are kept: its latest ones, in its order.
    many = {f"n{i}": [float(i)] for i in range(3 * DWELL_TENANTS)}
    tallies.committed(tally_of(many))
    assert list(tallies.dwell) == list(many)[-DWELL_TENANTS:]
    assert list(tallies.dwell[f"n{3 * DWELL_TENANTS - 1}"]) == [float(3 * DWELL_TENANTS - 1)]


def test_a_transaction_of_interleaved_tenants_keeps_each_ones_newest_in_order() -> None:
    tally = Tally()
    for i in range(3 * DWELL_SAMPLES):  # a, b, a, b, ...: each tenant's in emission order
        tally.record("ab"[i % 2], float(i))
    tally.record("c", 0.5)
    assert tally.counts() == {"a": 384, "b": 384, "c": 1}
    assert tally.by_tenant()["a"] == [float(i) for i in range(0, 3 * DWELL_SAMPLES, 2)]
    tallies = Tallies()
    assert tallies.committed(tally) == len(tally) == 3 * DWELL_SAMPLES + 1
    assert list(tallies.dwell) == ["a", "b", "c"]  # by each one's latest record
    newest_a = list(range(3 * DWELL_SAMPLES - 2, -1, -2))[:DWELL_SAMPLES][::-1]
    assert list(tallies.dwell["a"]) == [float(i) for i in newest_a]
    assert list(tallies.dwell["c"]) == [0.5]
    assert tallies.emitted == {"a": 384, "b": 384, "c": 1}


def test_add_counts() -> None:
    into = {"a": 1}
    add_counts(into, {"a": 2, "b": 3})
    add_counts(into, {})
    assert into == {"a": 3, "b": 3}


def test_dwell_times_fall_in_the_buckets_bisect_gives() -> None:
    bounds = [0.01, 0.1, 0.5, 1.0, 5.0]
    rng = random.Random(7)
    lists = [[rng.uniform(0, 6) for _ in range(rng.randrange(0, 50))] for _ in range(40)]
    lists.append([0.0, *bounds, 6.0])  # on each bound, below and above them all
    expected = [0] * (len(bounds) + 1)
    for d in (d for seconds in lists for d in seconds):
        expected[bisect.bisect_left(bounds, d)] += 1
    counts = [0] * (len(bounds) + 1)
    total = bucket_dwells(bounds, counts, lists)
    assert counts == expected
    assert total == sum(d for seconds in lists for d in seconds)


def test_the_dwell_histogram_observes_each_value_of_each_list() -> None:
    histogram = CheapHistogram("dwell", "dwell", DWELL_BUCKETS)
    histogram.observe_lists([[0.0, DWELL_BUCKETS[-1] + 1], [], [DWELL_BUCKETS[0]]])
    (family,) = histogram.collect()
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    assert buckets["+Inf"] == 3
    assert next(iter(buckets.values())) == 2  # 0.0 and the first bound: le is inclusive
    assert histogram.sum == DWELL_BUCKETS[-1] + 1 + DWELL_BUCKETS[0]


def test_a_tally_is_counted_once_and_again_after_a_record() -> None:
    # The tenant groups and the demotion tracker both ask at a commit: one count.
    tally = Tally()
    tally.record("a", 0.1)
    tally.record("b", 0.2)
    first = tally.counts()
    assert tally.counts() is first
    assert first == {"a": 1, "b": 1}
    tally.record("a", 0.3)
    assert tally.counts() == {"a": 2, "b": 1}
