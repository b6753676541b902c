"""Budgets in the emitter, on the in-memory cluster (``memory_kafka``), no broker: a
tenant's budget lets exactly its limit out, then its records wait (or are dead-lettered
``budget-exhausted``) while other tenants go on; the spend is committed with the partition's
progress in the same transaction, restored from it on an assignment, and an aborted
transaction's reservations count for nothing."""

from __future__ import annotations

import pytest

from fairstream import wire
from fairstream.config.topics import progress_topic
from fairstream.core import TenantPolicy
from fairstream.core.budget import Budget
from fairstream.scheduler import progress as codec
from fairstream.scheduler.messages import Assign, PolicyChange
from fairstream.scheduler.progress import HoldingProgress, PartitionProgress
from fairstream.scheduler.recovery import holding_id
from fairstream.wire.policy import PolicyRecord, encode_policy
from tests.unit.scheduler.memory_kafka import MemoryCluster
from tests.unit.scheduler.test_emitter_memory import GROUP, INGEST, Driver, cluster

__all__ = ["cluster"]  # the fixture


def budget(driver: Driver, tenant: bytes, *budgets: Budget) -> None:
    policy = encode_policy(PolicyRecord(TenantPolicy(budgets=budgets), 1))
    driver.emitter._control(PolicyChange(tenant, policy))


def committed_spend(cluster: MemoryCluster) -> list[list[object]]:
    """The budget entries of partition 0's last committed progress snapshot."""
    chunks = [codec.decode_chunk(r.value) for r in cluster.committed(progress_topic(GROUP))]
    latest = chunks[-1].token
    snapshot = codec.assemble(c for c in chunks if c.token == latest)
    assert snapshot is not None
    return snapshot.budgets


def reassign(driver: Driver, cluster: MemoryCluster, *, rewind: bool = False) -> None:
    """Partition 0 assigned again from what is committed, its budget spend included (what
    ``Recovery`` reads from the progress topic)."""
    mark = cluster.offsets.get(GROUP, {}).get((INGEST, 0), 0)
    prog = PartitionProgress(mark)
    prog.budgets = committed_spend(cluster)
    em = driver.emitter
    recovered = {0: prog, holding_id(0): HoldingProgress(0)}
    queues = {0: em.handoff.open(0)}
    em._assign(Assign(recovered, queues, rewind=rewind, metadata=cluster.join(GROUP)))
    em._warm_until = 0.0
    driver.readers.open(0, mark)


def egress_of(driver: Driver, tenant: bytes) -> list[bytes]:
    return [v for v in driver.egress() if v is not None and v.startswith(tenant + b":")]


@pytest.fixture
def day_of_five(cluster: MemoryCluster) -> Driver:
    driver = Driver(cluster)
    budget(driver, b"a", Budget(5, "day"))
    return driver


def test_a_budget_lets_its_limit_out_then_waits_while_others_go(
    cluster: MemoryCluster, day_of_five: Driver
) -> None:
    driver = day_of_five
    driver.produce(*(["a"] * 8), "b", "b", "b")
    driver.ingest()
    driver.emit_and_commit()
    assert len(egress_of(driver, b"a")) == 5
    assert len(egress_of(driver, b"b")) == 3
    assert driver.emitter.core.backlog("a") == (3, 3)  # waiting, in the backlog
    assert driver.dead_letters() == []
    # The spend went out with the progress, in the same transaction.
    [entry] = committed_spend(cluster)
    assert entry[:2] == ["t", "a"]
    assert entry[8] == 5  # spent
    # The committed mark stays below the waiting records: they are read again after a
    # restart.
    assert cluster.offsets[GROUP][(INGEST, 0)] == 5


def test_a_budget_that_dead_letters_sends_the_rest_to_the_dead_letter_topic(
    cluster: MemoryCluster,
) -> None:
    driver = Driver(cluster)
    budget(driver, b"a", Budget(5, "day", on_exhausted="dead-letter"))
    driver.produce(*(["a"] * 8))
    driver.ingest()
    driver.emit_and_commit()
    assert len(egress_of(driver, b"a")) == 5
    letters = driver.dead_letters()
    assert [reason for _, reason in letters] == [wire.BUDGET_EXHAUSTED.encode()] * 3
    detail = dict(cluster.committed("fairstream.dlq")[0].headers)[wire.DLQ_DETAIL]
    assert b"5/day,dead-letter" in detail
    assert cluster.offsets[GROUP][(INGEST, 0)] == 8


def test_the_spend_survives_a_reassignment_and_nothing_is_counted_twice(
    cluster: MemoryCluster, day_of_five: Driver
) -> None:
    driver = day_of_five
    driver.produce("a", "a", "a")
    driver.ingest()
    driver.emit_and_commit()
    assert len(egress_of(driver, b"a")) == 3
    # A new instance takes the partition over from what is committed.
    after = Driver(cluster)
    budget(after, b"a", Budget(5, "day"))
    reassign(after, cluster)
    assert (
        after.emitter.rule.ledger.spent("a", Budget(5, "day"), after.emitter.clock.epoch_ms()) == 3
    )
    after.produce("a", "a", "a", "a")
    after.ingest()
    after.emit_and_commit()
    assert len(egress_of(after, b"a")) == 5  # 3 before, 2 now: the day's 5 in all
    [entry] = committed_spend(cluster)
    assert entry[8] == 5


def test_an_aborted_transactions_reservations_count_for_nothing(
    cluster: MemoryCluster, day_of_five: Driver
) -> None:
    driver = day_of_five
    driver.produce("a", "a")
    driver.ingest()
    driver.emit_and_commit()
    driver.produce("a", "a")
    driver.ingest()
    em = driver.emitter
    while em._emit_some():
        pass
    assert em.rule.ledger.spent("a", Budget(5, "day"), em.clock.epoch_ms()) == 4
    cluster.join(GROUP)  # a rebalance before the commit: the transaction aborts
    em._commit()
    assert driver.rewinds == 1
    assert em.rule.ledger.spent("a", Budget(5, "day"), em.clock.epoch_ms()) == 2
    reassign(driver, cluster, rewind=True)
    driver.ingest()
    driver.emit_and_commit()
    assert len(egress_of(driver, b"a")) == 4
    [entry] = committed_spend(cluster)
    assert entry[8] == 4
