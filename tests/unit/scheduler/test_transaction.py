"""``BrokerCalls``: a producer's librdkafka calls run on a thread of its own, each with a
deadline and work for the caller meanwhile (``fairstream.scheduler.emitter.transaction``)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException

from fairstream.scheduler.emitter.transaction import STUCK_AFTER, Aborted, BrokerCalls, Transaction
from fairstream.scheduler.supervise import FatalError


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
    txn = Transaction({"bootstrap.servers": "127.0.0.1:1"}, "fairstream-unit-txn", 10.0)
    try:
        assert not txn.outlived_timeout(1e9)  # nothing open
        txn.open, txn.opened_at = True, 100.0
        assert not txn.outlived_timeout(109.9)
        assert txn.outlived_timeout(110.0)
    finally:
        txn.open = False
        txn.calls.close()


class _CoordinatorAway:
    """A producer whose transaction coordinator does not take the offsets (a request stuck
    in librdkafka's out-queue) while ``away``: each send_offsets_to_transaction times out;
    aborts work."""

    def __init__(self) -> None:
        self.away = True
        self.aborts = 0

    def begin_transaction(self) -> None:
        pass

    def send_offsets_to_transaction(self, *_args: object) -> None:
        if self.away:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Timed out", retriable=True))

    def abort_transaction(self, *_args: object) -> None:
        self.aborts += 1

    def commit_transaction(self, *_args: object) -> None:
        pass

    def flush(self, *_args: object) -> int:
        return 0


@contextlib.contextmanager
def _coordinator_away() -> Iterator[tuple[Transaction, _CoordinatorAway]]:
    """A ``Transaction`` whose producer is a ``_CoordinatorAway``."""
    txn = Transaction({"bootstrap.servers": "127.0.0.1:1"}, "fairstream-unit-txn", 10.0)
    real = txn.producer
    stub = _CoordinatorAway()
    txn.producer = stub  # type: ignore[assignment]
    try:
        yield txn, stub
    finally:
        txn.calls.close()
        txn.producer = real


def test_a_coordinator_that_keeps_timing_out_gets_the_producer_replaced() -> None:
    # Aborted and read again twice; the third time in a row is a producer that cannot go on
    # (FatalError: the emitter replaces it), not one more abort forever.
    with _coordinator_away() as (txn, stub):
        for _ in range(STUCK_AFTER - 1):
            with pytest.raises(Aborted):
                txn.commit([], None)
        with pytest.raises(FatalError, match="did not take the offsets 3 times in a row"):
            txn.commit([], None)
        assert stub.aborts == STUCK_AFTER


def test_a_commit_between_timeouts_starts_the_count_again() -> None:
    with _coordinator_away() as (txn, stub):
        for _ in range(STUCK_AFTER - 1):
            with pytest.raises(Aborted):
                txn.commit([], None)
        stub.away = False
        txn.commit([], None)  # the coordinator answered
        stub.away = True
        with pytest.raises(Aborted):  # one timeout, not the third in a row
            txn.commit([], None)
