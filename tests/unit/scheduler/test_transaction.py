"""``BrokerCalls``: a producer's librdkafka calls run on a thread of its own, each with a
deadline and work for the caller meanwhile; ``Transaction`` on an in-memory cluster's
producer (``memory_kafka``): commits, aborts, fences and a stuck coordinator, without a
broker (``fairstream.scheduler.emitter.transaction``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, TopicPartition

from fairstream.scheduler.emitter.transaction import (
    STUCK_AFTER,
    Aborted,
    BrokerCalls,
    Renewal,
    Transaction,
)
from fairstream.scheduler.supervise import FatalError
from tests.unit.scheduler.memory_kafka import GroupMetadata, MemoryCluster


def test_meanwhile_runs_until_the_call_returns_or_it_has_nothing_to_do() -> None:
    release = threading.Event()
    calls = []

    def meanwhile() -> bool:  # 1 ms of work a call, holding the interpreter lock
        calls.append(1)
        if len(calls) == 5:
            release.set()  # the broker answers while the caller works
        until = time.perf_counter() + 0.001
        while time.perf_counter() < until:
            pass
        return len(calls) < 2000

    broker = BrokerCalls("test")
    broker.run(lambda: release.wait(10) or None, 10, "test", meanwhile)
    # It stopped asking soon after the call was done (the call's thread needs the lock back:
    # a switch interval, 5 ms), long before it ran out of work.
    assert 5 <= len(calls) < 500

    calls.clear()
    release.clear()
    threading.Timer(0.2, release.set).start()
    broker.run(lambda: release.wait(10) or None, 10, "test", lambda: bool(calls.append(1)))
    assert calls == [1]  # nothing more to do: it just waits for the call


def test_the_calls_failure_and_a_stuck_call_reach_the_caller() -> None:
    def fail() -> None:
        raise ValueError("refused")

    calls = BrokerCalls("test")
    with pytest.raises(ValueError, match="refused"):
        calls.run(fail, 5, "test", lambda: False)
    stuck = threading.Event()
    with pytest.raises(FatalError, match="did not return within"):
        calls.run(lambda: stuck.wait(5) or None, 0.2, "commit", lambda: False)
    # The producer is broken for good: no call queues behind the stuck one.
    with pytest.raises(FatalError, match="commit never returned"):
        calls.run(lambda: None, 5, "abort")
    stuck.set()
    calls._thread.join(5)
    assert not calls._thread.is_alive()  # it ended once the stuck call returned


def test_a_failure_meanwhile_waits_for_the_call_to_land() -> None:
    landed = threading.Event()
    failing = threading.Event()

    def call() -> None:
        # Lands only after ``meanwhile`` failed: a run that did not wait would return
        # before it.
        assert failing.wait(5)
        landed.set()

    def meanwhile() -> bool:
        failing.set()
        raise RuntimeError("a bug while preparing")

    with pytest.raises(RuntimeError, match="preparing"):
        BrokerCalls("test").run(call, 5, "test", meanwhile)
    assert landed.is_set()  # the producer's state is the call's outcome, not half of it


def test_one_thread_runs_the_calls_one_at_a_time_and_ends_at_close() -> None:
    calls = BrokerCalls("test")
    threads = set()
    for _ in range(50):
        calls.run(lambda: threads.add(threading.current_thread().name), 5, "commit")
    assert threads == {"test"}
    calls.close()
    calls._thread.join(5)
    assert not calls._thread.is_alive()


def test_a_transaction_open_past_its_timeout_is_one_the_broker_aborted_itself() -> None:
    """After the broker aborted a transaction that outlived ``transaction.timeout.ms`` (and
    bumped the epoch), librdkafka reports a fence: the emitter tells that case from another
    process with its transactional id by the open transaction's age."""
    txn = Transaction({}, "fairstream-unit-txn", 10.0, connect=MemoryCluster().producer)
    try:
        assert not txn.outlived_timeout(1e9)  # nothing open
        txn.open, txn.opened_at = True, 100.0
        assert not txn.outlived_timeout(109.9)
        assert txn.outlived_timeout(110.0)
    finally:
        txn.open = False
        txn.calls.close()


def test_a_fence_in_the_transaction_after_an_abort_counts_the_aborted_ones_age() -> None:
    """A broker that hung: the transaction failed and was aborted, the next one began, and
    0.6 s into it the broker expired the first one (its abort had not reached the
    coordinator) and bumped the epoch. The fence reaches the new transaction, young as it
    is: the age that counts is the aborted one's, until a commit is confirmed."""
    cluster = MemoryCluster()
    txn = _transaction(cluster)
    try:
        txn.begin()
        txn.opened_at = 100.0
        txn.abort("Failed to add offsets to transaction: Local: Timed out")
        assert txn.troubled_at == 100.0
        txn.begin()
        txn.opened_at = 109.5
        assert not txn.outlived_timeout(109.9)
        assert txn.outlived_timeout(110.1)  # the aborted one's age
        txn.commit([], cluster.join("group"))
        assert txn.troubled_at is None
        assert not txn.outlived_timeout(1e9)
    finally:
        txn.calls.close()


def _transaction(cluster: MemoryCluster, tid: str = "fairstream-unit-txn") -> Transaction:
    """A ``Transaction`` on ``cluster``'s producer, initialised (no broker)."""
    txn = Transaction({}, tid, 10.0, connect=cluster.producer)
    txn.init()
    return txn


@dataclass
class Member:
    """An emitter's transaction on the in-memory cluster, and its group generation."""

    cluster: MemoryCluster
    txn: Transaction
    generation: GroupMetadata

    def commit(self, offset: int = 1) -> None:
        self.txn.commit([TopicPartition("ingest", 0, offset)], self.generation)

    def egress(self) -> list[bytes | None]:
        return [r.value for r in self.cluster.committed("egress")]


@pytest.fixture
def member() -> Iterator[Member]:
    cluster = MemoryCluster()
    txn = _transaction(cluster)
    yield Member(cluster, txn, cluster.join("app"))
    txn.calls.close()


def _offsets_timing_out(cluster: MemoryCluster, times: int) -> None:
    # The coordinator does not take the offsets (a request stuck in librdkafka's out-queue).
    timed_out = KafkaError(KafkaError._TIMED_OUT, "Timed out", retriable=True)
    cluster.fail("send_offsets_to_transaction", timed_out, times)


def test_a_commit_makes_the_records_and_the_offsets_visible_together(member: Member) -> None:
    member.txn.produce("egress", b"a", b"t1")
    assert member.egress() == []  # read_committed: not before the commit
    member.commit(7)
    assert member.egress() == [b"a"]
    assert member.cluster.offsets["app"] == {("ingest", 0): 7}
    assert not member.txn.open


def test_offsets_of_a_generation_that_is_gone_abort_the_whole_transaction(
    member: Member,
) -> None:
    member.txn.produce("egress", b"a", b"t1")
    member.cluster.join("app")  # a rebalance: the partitions may be another member's now
    with pytest.raises(Aborted, match="generation"):
        member.commit(7)
    assert member.egress() == []
    assert "app" not in member.cluster.offsets
    assert [r.state for r in member.cluster.log("egress")[0]] == ["aborted"]


def test_a_newer_producer_with_the_same_id_fences_the_older_and_aborts_what_it_left(
    member: Member,
) -> None:
    old = member.txn
    old.produce("egress", b"zombie", b"t1")
    new = _transaction(member.cluster)  # another process with this transactional id
    with pytest.raises(FatalError, match="fenced") as fenced:
        member.commit()
    assert fenced.value.fenced
    assert member.egress() == []  # the zombie's record never becomes visible
    # Fenced by another process (the transaction had not outlived its timeout): the
    # emitter exits rather than fence it back.
    renewal = Renewal(lambda *_: new, ({}, "fairstream-unit-txn", 10.0), lambda: 1000.0)
    with pytest.raises(FatalError, match="fenced"):
        renewal.renew(old, fenced.value)
    member.txn = new
    new.produce("egress", b"b", b"t1")
    member.commit()
    assert member.egress() == [b"b"]
    old.calls.close()


def test_a_commit_that_failed_retriably_is_made_again(member: Member) -> None:
    member.txn.produce("egress", b"a", b"t1")
    busy = KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "loading", retriable=True)
    member.cluster.fail("commit_transaction", busy, times=2)
    member.commit()
    assert member.egress() == [b"a"]


def test_a_coordinator_that_keeps_timing_out_gets_the_producer_replaced(
    member: Member,
) -> None:
    # Aborted and read again twice; the third time in a row is a producer that cannot go on
    # (FatalError: the emitter replaces it), not one more abort forever.
    _offsets_timing_out(member.cluster, STUCK_AFTER)
    for _ in range(STUCK_AFTER - 1):
        member.txn.produce("egress", b"a", b"t1")
        with pytest.raises(Aborted):
            member.commit()
    member.txn.produce("egress", b"a", b"t1")
    with pytest.raises(FatalError, match="did not take the offsets 3 times in a row"):
        member.commit()
    assert [r.state for r in member.cluster.log("egress")[0]] == ["aborted"] * STUCK_AFTER


def test_a_commit_between_timeouts_starts_the_count_again(member: Member) -> None:
    _offsets_timing_out(member.cluster, STUCK_AFTER - 1)
    for _ in range(STUCK_AFTER - 1):
        with pytest.raises(Aborted):
            member.commit()
    member.commit()  # the coordinator answered
    _offsets_timing_out(member.cluster, 1)
    with pytest.raises(Aborted):  # one timeout, not the third in a row
        member.commit()
