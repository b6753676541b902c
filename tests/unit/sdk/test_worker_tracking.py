"""The worker's pure parts: backoff schedule, commit positions, per-tenant ordering, dedup."""

from __future__ import annotations

import random

import pytest

from fairstream.sdk.worker.retry import backoff_delay
from fairstream.sdk.worker.tracking import (
    ORDERINGS,
    CommitPosition,
    RecentIds,
    TenantQueues,
    per_tenant,
)


def test_backoff_doubles_from_initial_and_caps() -> None:
    delays = [backoff_delay(a, 0.1, 1.0) for a in range(1, 8)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_backoff_survives_huge_attempt_numbers_and_rejects_zero() -> None:
    assert backoff_delay(10_000, 0.1, 10.0) == 10.0
    assert backoff_delay(3, 0.0, 10.0) == 0.0
    with pytest.raises(ValueError, match="from 1"):
        backoff_delay(0, 0.1, 1.0)


def test_commit_position_is_the_first_offset_not_done() -> None:
    p = CommitPosition()
    assert p.commit_position() is None
    for offset in (10, 11, 12, 13):
        assert p.add(offset)
    assert p.commit_position() == 10
    p.resolve(11, done=True)
    p.resolve(13, done=True)
    assert p.commit_position() == 10  # 10 still running: nothing after it may be committed
    p.resolve(10, done=True)
    assert p.commit_position() == 12
    p.resolve(12, done=True)
    assert p.commit_position() == 14  # everything done: the next offset to read
    assert p.unresolved == 0


def test_commit_position_across_offset_gaps() -> None:
    p = CommitPosition()
    for offset in (5, 9, 20):  # compaction or transaction markers leave gaps
        p.add(offset)
    p.resolve(5, done=True)
    assert p.commit_position() == 9
    p.resolve(9, done=True)
    p.resolve(20, done=True)
    assert p.commit_position() == 21


def test_abandoned_offset_blocks_the_commit_for_good() -> None:
    p = CommitPosition()
    for offset in range(3):
        p.add(offset)
    p.resolve(0, done=True)
    p.resolve(1, done=False)
    p.resolve(2, done=True)
    assert p.commit_position() == 1
    assert p.unresolved == 0
    p.resolve(1, done=True)  # a late report cannot change an abandoned record
    assert p.commit_position() == 1


def test_refetched_offsets_are_refused_and_stale_reports_ignored() -> None:
    p = CommitPosition()
    assert p.add(0)
    assert p.add(1)
    assert not p.add(1)
    assert not p.add(0)
    p.resolve(0, done=True)
    p.resolve(0, done=True)  # twice: harmless
    assert p.commit_position() == 1
    assert p.unresolved == 1


def test_commit_position_matches_a_model_under_random_completion_order() -> None:
    rng = random.Random(7)
    for _ in range(200):
        offsets = sorted(rng.sample(range(100), rng.randint(1, 30)))
        p = CommitPosition()
        for o in offsets:
            p.add(o)
        done: set[int] = set()
        for o in rng.sample(offsets, len(offsets)):
            p.resolve(o, done=True)
            done.add(o)
            first_open = next((x for x in offsets if x not in done), None)
            expected = first_open if first_open is not None else offsets[-1] + 1
            assert p.commit_position() == expected


def test_tenant_queues_hand_out_one_item_per_tenant_in_fifo_order() -> None:
    q: TenantQueues[str] = TenantQueues()
    for item in ("a1", "a2", "b1", "a3", "c1", "b2"):
        q.push(item[0], item)
    taken = [q.take(), q.take(), q.take()]
    assert taken == [("a", "a1"), ("b", "b1"), ("c", "c1")]
    assert q.take() is None  # every tenant with work has an item out
    assert q.out == 3
    assert len(q) == 3
    q.done("b")
    assert q.take() == ("b", "b2")
    q.done("a")
    assert q.take() == ("a", "a2")
    q.done("c")
    assert q.take() is None  # c has nothing queued
    q.done("a")
    assert q.take() == ("a", "a3")


def test_tenant_queues_follow_arrival_order_where_tenants_allow() -> None:
    q: TenantQueues[str] = TenantQueues()
    for item in ("a1", "a2", "z1", "a3"):
        q.push(item[0], item)
    out = []
    while (taken := q.take()) is not None:  # one at a time: exactly the arrival order
        out.append(taken[1])
        q.done(taken[0])
    assert out == ["a1", "a2", "z1", "a3"]
    # Two slots: z1 overtakes a2 only because a is busy.
    for item in ("a1", "a2", "z1", "b1"):
        q.push(item[0], item)
    assert [q.take(), q.take()] == [("a", "a1"), ("z", "z1")]
    q.done("z")
    q.done("a")
    assert [q.take(), q.take()] == [("a", "a2"), ("b", "b1")]


def test_tenant_queues_never_run_a_tenant_twice_at_once_and_keep_order() -> None:
    """Random pushes, takes and completions with N slots: per-tenant FIFO, no overlap."""
    rng = random.Random(11)
    q: TenantQueues[tuple[str, int]] = TenantQueues()
    seq: dict[str, int] = {}
    running: dict[str, tuple[str, int]] = {}
    seen: dict[str, list[int]] = {}
    slots = 3
    for _ in range(5000):
        action = rng.random()
        if action < 0.45:
            tenant = rng.choice("abcdefg")
            seq[tenant] = seq.get(tenant, 0) + 1
            q.push(tenant, (tenant, seq[tenant]))
        elif action < 0.75 and len(running) < slots:
            taken = q.take()
            if taken is not None:
                tenant, item = taken
                assert tenant not in running
                running[tenant] = item
                seen.setdefault(tenant, []).append(item[1])
        elif running:
            tenant = rng.choice(sorted(running))
            del running[tenant]
            q.done(tenant)
    for tenant, numbers in seen.items():
        assert numbers == list(range(1, len(numbers) + 1)), tenant


def test_tenant_queues_purge_removes_queued_items_only() -> None:
    q: TenantQueues[tuple[str, int]] = TenantQueues()
    for i in range(4):
        q.push("a", ("a", i))
        q.push("b", ("b", i))
    assert q.take() == ("a", ("a", 0))
    removed = q.purge(lambda item: item[1] >= 2 or item[0] == "b")
    assert sorted(removed) == [("a", 2), ("a", 3), ("b", 0), ("b", 1), ("b", 2), ("b", 3)]
    assert len(q) == 1
    assert q.take() is None  # a is out, b has nothing left
    q.done("a")
    assert q.take() == ("a", ("a", 1))
    assert len(q) == 0


def test_recent_ids_evict_the_least_recently_seen() -> None:
    ids = RecentIds(3)
    for rid in ("a", "b", "c"):
        ids.add(rid)
    ids.add("a")  # seen again: now the most recent
    ids.add("d")
    assert "b" not in ids
    assert all(rid in ids for rid in ("a", "c", "d"))
    assert len(ids) == 3
    with pytest.raises(ValueError, match="at least 1"):
        RecentIds(0)


def test_unlimited_tenant_queues_hand_out_in_arrival_order_whatever_the_tenant() -> None:
    q: TenantQueues[str] = TenantQueues(per_tenant=None)
    for item in ("a1", "a2", "b1", "a3", "c1", "b2"):
        q.push(item[0], item)
    taken = [q.take() for _ in range(6)]
    assert taken == [("a", "a1"), ("a", "a2"), ("b", "b1"), ("a", "a3"), ("c", "c1"), ("b", "b2")]
    assert q.take() is None
    assert (q.out, q.out_of("a"), q.out_of("b"), len(q)) == (6, 3, 2, 0)
    q.done("a")
    q.done("a")
    assert (q.out, q.out_of("a")) == (4, 1)
    q.push("a", "a4")
    assert q.take() == ("a", "a4")  # nothing waits for a tenant's records still out


def test_tenant_queues_limit_per_tenant_and_resume_in_arrival_order() -> None:
    q: TenantQueues[str] = TenantQueues(per_tenant=2)
    for item in ("a1", "a2", "a3", "b1", "a4"):
        q.push(item[0], item)
    assert [q.take(), q.take(), q.take()] == [("a", "a1"), ("a", "a2"), ("b", "b1")]
    assert q.take() is None  # a has two out
    q.done("a")
    assert q.take() == ("a", "a3")
    assert q.take() is None
    q.done("b")
    q.done("a")
    assert q.take() == ("a", "a4")
    q.done("x")  # a stray report for a tenant with nothing out changes nothing
    assert q.out == 2


def test_per_tenant_limit_of_each_ordering() -> None:
    assert per_tenant("start") is None
    assert per_tenant("completion") == 1
    assert ORDERINGS == ("start", "completion")
    with pytest.raises(ValueError, match="ordering must be one of start, completion"):
        per_tenant("per-tenant")
    with pytest.raises(ValueError, match="at least 1"):
        TenantQueues(per_tenant=0)


@pytest.mark.parametrize("limit", [None, 1, 3])
def test_tenant_queues_keep_start_order_and_limits_under_random_completions(
    limit: int | None,
) -> None:
    """Random pushes, takes and completions with 5 slots: each tenant's items start in
    push order, never more than ``limit`` of a tenant out, and with no limit every item
    starts in exactly the global push order."""
    rng = random.Random(23)
    q: TenantQueues[tuple[str, int]] = TenantQueues(per_tenant=limit)
    pushed: list[tuple[str, int]] = []
    started: list[tuple[str, int]] = []
    running: list[tuple[str, int]] = []
    seq: dict[str, int] = {}
    for _ in range(5000):
        action = rng.random()
        if action < 0.45:
            tenant = rng.choice("abcd")
            seq[tenant] = seq.get(tenant, 0) + 1
            pushed.append((tenant, seq[tenant]))
            q.push(tenant, pushed[-1])
        elif action < 0.75 and len(running) < 5:
            taken = q.take()
            if taken is not None:
                running.append(taken[1])
                started.append(taken[1])
                out = sum(1 for t, _ in running if t == taken[0])
                assert limit is None or out <= limit
                assert q.out_of(taken[0]) == out
        elif running:
            item = running.pop(rng.randrange(len(running)))  # any order of completion
            q.done(item[0])
        assert q.out == len(running)
    for tenant in seq:
        numbers = [n for t, n in started if t == tenant]
        assert numbers == list(range(1, len(numbers) + 1)), tenant
    if limit is None:
        assert started == pushed[: len(started)]


def test_many_in_flight_per_tenant_never_commit_past_an_unfinished_record() -> None:
    """The worker's two pieces together, with no limit per tenant: records of a few tenants
    on two partitions start in arrival order, 8 at a time, and finish in random order; the
    commit position of each partition never passes a record that is not done, and reaches
    the end once all are."""
    rng = random.Random(5)
    progress = {0: CommitPosition(), 1: CommitPosition()}
    q: TenantQueues[tuple[int, int]] = TenantQueues(per_tenant=None)
    next_offset = {0: 0, 1: 0}
    done: set[tuple[int, int]] = set()
    running: list[tuple[str, tuple[int, int]]] = []
    total = 0
    while total < 600 or running or len(q):
        if total < 600 and rng.random() < 0.5:
            partition = rng.randrange(2)
            offset = next_offset[partition]
            next_offset[partition] += 1
            assert progress[partition].add(offset)
            q.push(rng.choice("xyz"), (partition, offset))
            total += 1
        while len(running) < 8 and (taken := q.take()) is not None:
            running.append(taken)
        if running and rng.random() < 0.6:
            tenant, (partition, offset) = running.pop(rng.randrange(len(running)))
            q.done(tenant)
            progress[partition].resolve(offset, done=True)
            done.add((partition, offset))
        for partition, p in progress.items():
            position = p.commit_position()
            if position is not None:
                assert all((partition, o) in done for o in range(position))
    assert [progress[p].commit_position() for p in (0, 1)] == [next_offset[0], next_offset[1]]
