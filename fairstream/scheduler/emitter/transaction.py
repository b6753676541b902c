"""The transactional producer, and what the open transaction holds.

Egress records, dead letters and progress records are produced inside one transaction;
``commit`` sends the low-water marks as the group's offsets with the owning member's group
metadata (KIP-447) and commits. The caller passes the metadata of the generation that owns
the partitions (captured when they were handed over), so the broker refuses offsets sent
for a generation that is gone. A commit the broker refuses for a reason that allows an
abort (a stale generation, a failed send) raises ``Aborted`` after aborting; anything
else (fenced by a newer producer with the same transactional id) raises ``FatalError``.

Caller: the emitter thread only.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from fairstream.adapters.clients import producer_config
from fairstream.adapters.ports import ProducerFactory, connect_producer
from fairstream.errors import Error
from fairstream.scheduler.supervise import FatalError

log = logging.getLogger("fairstream.transaction")

API_TIMEOUT = 30.0  # seconds for a transactional call
INIT_DEADLINE = 120.0  # seconds init_transactions is retried while it fails retriably
RETRY_FOR = 120.0  # seconds a retriable commit or abort is tried again (a broker restart)
OFFSETS_TIMEOUT = 10.0  # seconds send_offsets_to_transaction may take before it is aborted
POLL_EVERY = 1000  # records produced between two polls of the producer (its callbacks)
RENEW_EVERY = 60.0  # seconds: a broken producer is replaced at most this often
# send_offsets_to_transaction timing out this many times in a row: the producer is replaced.
# After the broker was paused for 15 s (SIGSTOP), a producer's request to its transaction
# coordinator stayed in its out-queue for good ("Timed out 0 in-flight, ... 1 out-queue"):
# every later transaction was aborted 10 s in, and nothing reached egress for the 240 s
# watched, while each abort succeeded (a known class of librdkafka coordinator hangs). A new
# producer has new connections.
STUCK_AFTER = 3
METADATA_TIMEOUT = 5.0  # seconds the emitter waits for a topic's partitions, once


# What a fenced producer is told: a newer one with its transactional id exists.
_FENCED = frozenset(
    {KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError.PRODUCER_FENCED}
)


# What the group coordinator answers offsets sent with a generation that is gone: the
# partitions may be another member's now. Nothing of the transaction may commit.
_GENERATION_GONE = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
    }
)


def transaction_config(librdkafka: dict[str, Any], largest: int) -> dict[str, Any]:
    """The transactional producer's client config, for records of up to ``largest`` bytes:
    our own size check decides what fits (``egress``), librdkafka must not refuse first
    what the topics accept."""
    return {**librdkafka, "message.max.bytes": largest + 64 * 1024}


class BrokerCalls:
    """The blocking calls of one transactional producer (send the offsets, commit, abort),
    run one at a time on a daemon thread of its own, each with a deadline that does not
    trust librdkafka's: after a broker restart, send_offsets_to_transaction was seen blocked
    for minutes past its own timeout. Past the deadline the producer counts as broken
    (``FatalError``): the emitter replaces it (the new one fences it) and reads again what
    was open, and this thread ends once the stuck call returns, with nothing more to run.
    One thread per producer, started with it: a thread per call cost a thread's start at
    every commit.

    Caller: the emitter thread (``run``, ``close``). Affects: its own thread only.
    """

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], None], Future[None]] | None] = (
            queue.SimpleQueue()
        )
        self.stuck: str | None = None  # the call that outlived its deadline
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._calls.get()) is not None:
            call, outcome = job
            try:
                call()
            except BaseException as exc:
                outcome.set_exception(exc)
            else:
                outcome.set_result(None)

    def run(
        self,
        call: Callable[[], None],
        timeout: float,
        name: str,
        meanwhile: Callable[[], bool] | None = None,
    ) -> None:
        """Run ``call`` on the thread; raise what it raised, or ``FatalError`` when it does
        not return within ``timeout`` seconds (or an earlier call never did).

        ``meanwhile`` is called again and again while the call runs, until it returns False
        (the emitter prepares its next records while the broker commits)."""
        if self.stuck is not None:
            raise FatalError(f"{self.stuck} never returned: the producer is stuck")
        outcome: Future[None] = Future()
        self._calls.put((call, outcome))
        # The call's thread takes the interpreter lock back when it returns (within the
        # switch interval); until then, what ``meanwhile`` does is work the emitter has to
        # do anyway.
        try:
            while meanwhile is not None and not outcome.done() and meanwhile():
                pass
        except BaseException:
            wait([outcome], timeout)  # the call's outcome is the producer's state: let it land
            raise
        if not wait([outcome], timeout).done:
            self.stuck = name
            self._calls.put(None)  # the thread ends when the stuck call returns
            raise FatalError(f"{name} did not return within {timeout:.0f} s: the producer is stuck")
        failure = outcome.exception()
        if failure is not None:
            raise failure

    def close(self) -> None:
        """End the thread once the call it runs (if any) returned."""
        self._calls.put(None)


class Aborted(Error):
    """The transaction was aborted: what it held is as if it never happened."""


class Transaction:
    """The open transaction on a transactional producer (``connect``: confluent-kafka's, or
    a test's in-memory one; see ``fairstream.adapters.ports``)."""

    def __init__(
        self,
        config: dict[str, Any],
        transactional_id: str,
        timeout: float,
        connect: ProducerFactory = connect_producer,
    ) -> None:
        self.producer = connect(
            producer_config(
                config,
                overrides={
                    "transactional.id": transactional_id,
                    "transaction.timeout.ms": int(timeout * 1000),
                    "batch.num.messages": 10_000,
                    "queue.buffering.max.messages": 1_000_000,
                    "queue.buffering.max.kbytes": 1_048_576,
                    # Nothing here waits on a record's delivery (the commit flushes and says
                    # whether all went): a report per record would be work for nothing.
                    "delivery.report.only.error": True,
                    "error_cb": self._error,
                },
            )
        )
        self.fatal_reason: str | None = None  # librdkafka's words for a fatal error
        self.transactional_id = transactional_id
        self.timeout = timeout
        self.open = False
        self.opened_at: float | None = None  # monotonic time the open transaction began
        # When the oldest transaction began that was aborted after a failure and not yet
        # followed by a commit the broker confirmed: its end may not have reached the
        # coordinator (a broker that hung), which then expires it and bumps the epoch, a
        # fence that reaches the next transaction (``outlived_timeout``).
        self.troubled_at: float | None = None
        self.records = 0  # records produced in the open transaction
        self._produced = 0
        self._timeouts = 0  # send_offsets_to_transaction timed out this many times in a row
        self.calls = BrokerCalls(f"broker-calls-{transactional_id}")

    def _error(self, err: KafkaError) -> None:
        # A fatal error reaches the calls that meet it as a bare "Local: Fatal error"; the
        # error callback carries what happened (e.g. a newer producer with our id).
        if err.fatal() and self.fatal_reason is None:
            self.fatal_reason = err.str()
        elif not err.fatal():
            log.warning("transactional producer: %s", err.str())

    def failure(self, exc: KafkaException) -> FatalError | None:
        """A ``FatalError`` with the reason for a fatal ``exc``, or None if it is not fatal."""
        err = exc.args[0] if exc.args else None
        if not isinstance(err, KafkaError) or not (
            err.fatal() or err.code() in (KafkaError._FATAL, KafkaError._FENCED)
        ):
            return None
        try:
            self.producer.poll(0)  # serves the error callback, which has the reason
        except KafkaException as polled:  # ... or raises it
            if self.fatal_reason is None and polled.args:
                self.fatal_reason = polled.args[0].str()
        reason = self.fatal_reason or err.str()
        if err.code() in _FENCED or "old epoch" in reason or "fenced" in reason.lower():
            return FatalError(
                f"fenced: a newer producer with this instance's transactional id "
                f"({self.transactional_id}) took over (another process with the same "
                f"--group-instance-id or --data-dir?): {reason}",
                fenced=True,
            )
        return FatalError(f"the transactional producer failed: {reason}")

    def init(self, deadline: float = INIT_DEADLINE) -> None:
        """Register the transactional id, fencing an older producer with the same id (a
        previous run of this instance) and aborting what it left open.

        A retriable failure (a timeout while the broker or its transaction coordinator is
        away, as during a broker restart: librdkafka says "retry call to resume") is
        retried for up to ``deadline`` seconds; anything else, or longer, raises."""
        until = time.monotonic() + deadline
        while True:
            try:
                self.producer.init_transactions(API_TIMEOUT)
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                retriable = isinstance(err, KafkaError) and err.retriable() and not err.fatal()
                if not retriable or time.monotonic() >= until:
                    raise
                log.warning("init_transactions: %s; trying again", exc)

    def begin(self) -> None:
        if not self.open:
            try:
                self.producer.begin_transaction()
            except KafkaException as exc:
                fatal = self.failure(exc)
                raise (fatal or FatalError(f"beginning a transaction: {exc}")) from exc
            self.open = True
            self.opened_at = time.monotonic()

    def outlived_timeout(self, now: float | None = None) -> bool:
        """Whether the open transaction, or one aborted after a failure since the last
        commit (``troubled_at``), began ``transaction.timeout.ms`` ago or more: the broker
        then aborts it itself and bumps the producer's epoch, so this producer is told it
        is fenced although no other process has its transactional id (seen after the
        broker hung for 15 s mid-transaction: in that transaction, or, its abort taken
        while the broker was away, 0.6 s into the next one)."""
        began = [
            t for t in (self.opened_at if self.open else None, self.troubled_at) if t is not None
        ]
        if not began:
            return False
        return (time.monotonic() if now is None else now) - min(began) >= self.timeout

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> None:
        """Produce one record in the transaction (begun if need be); ``timestamp`` in epoch
        ms (None: now)."""
        self.begin()
        kwargs: dict[str, Any] = {}
        if headers:
            kwargs["headers"] = headers
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        while True:
            try:
                self.producer.produce(topic, value, key, **kwargs)
                break
            except BufferError:
                self.producer.poll(0.05)  # librdkafka's queue is full: let it drain
            except KafkaException as exc:
                fatal = self.failure(exc)
                if fatal is not None:
                    raise fatal from exc
                raise
        self.records += 1
        self.tally(1)

    def partitions(self, topic: str, timeout: float = METADATA_TIMEOUT) -> int | None:
        """How many partitions ``topic`` has, from the producer's metadata; None when the
        broker does not say within ``timeout`` seconds (or the topic is missing)."""
        try:
            metadata = self.producer.list_topics(topic, timeout)
        except KafkaException as exc:
            log.warning("metadata of %s: %s", topic, exc)
            return None
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            return None
        return len(info.partitions)

    def tally(self, produced: int) -> None:
        """Count ``produced`` records (the emitter's inline path produces on ``producer``
        itself and counts ``records``); every ``POLL_EVERY`` the producer is polled, which
        serves its callbacks (errors; delivery reports only of failures)."""
        before = self._produced
        self._produced += produced
        if before // POLL_EVERY != self._produced // POLL_EVERY:
            self.producer.poll(0)

    def commit(
        self,
        offsets: list[TopicPartition],
        group_metadata: Any,
        meanwhile: Callable[[], bool] | None = None,
    ) -> None:
        """Send the offsets with the member's group metadata and commit. ``meanwhile`` is
        called while the broker works, until it returns False (see ``BrokerCalls``)."""
        if offsets and group_metadata is None:
            raise ValueError("offsets without the group metadata of the generation owning them")
        self.begin()
        try:
            self.calls.run(
                lambda: self.producer.send_offsets_to_transaction(
                    offsets, group_metadata, OFFSETS_TIMEOUT
                ),
                OFFSETS_TIMEOUT + 5,
                "send_offsets_to_transaction",
                meanwhile,
            )
        except KafkaException as exc:
            err = exc.args[0]
            timed_out = err.code() == KafkaError._TIMED_OUT
            self._timeouts = self._timeouts + 1 if timed_out else 0
            if err.txn_requires_abort() or err.retriable() or err.code() in _GENERATION_GONE:
                # A broker away (restart, network) or a generation gone: nothing of this
                # transaction is committed, so abort it and read again what it held.
                self.abort(err.str())
                if self._timeouts >= STUCK_AFTER:
                    raise FatalError(
                        f"the transaction coordinator did not take the offsets "
                        f"{self._timeouts} times in a row ({err.str()})"
                    ) from exc
                raise Aborted(err.str()) from exc
            fatal = self.failure(exc)
            reason = str(fatal) if fatal is not None else err.str()
            raise FatalError(
                f"sending the offsets failed: {reason}", fenced=bool(fatal and fatal.fenced)
            ) from exc
        try:
            # A commit that failed retriably may be half done at the coordinator: the same
            # call is made again until it completes (librdkafka's rule), or the time is up.
            self._retrying(
                lambda: self.calls.run(
                    lambda: self.producer.commit_transaction(API_TIMEOUT),
                    API_TIMEOUT + 5,
                    "commit_transaction",
                    meanwhile,
                ),
                "commit_transaction",
            )
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                self.abort(err.str())
                raise Aborted(err.str()) from exc
            fatal = self.failure(exc)
            reason = str(fatal) if fatal is not None else err.str()
            raise FatalError(
                f"the transaction failed and cannot be aborted: {reason}",
                fenced=bool(fatal and fatal.fenced),
            ) from exc
        self.open = False
        self.opened_at = None
        self.troubled_at = None  # the broker confirmed a commit: nothing older is pending
        self.records = 0
        self._timeouts = 0

    def _retrying(self, call: Callable[[], None], name: str) -> None:
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                err = exc.args[0]
                if not err.retriable() or time.monotonic() >= deadline:
                    raise
                log.warning("%s: %s; retrying", name, err.str())

    def abort(self, why: str) -> None:
        log.warning("aborting the transaction (%s)", why)
        if self.troubled_at is None:
            self.troubled_at = self.opened_at
        try:
            self._retrying(
                lambda: self.calls.run(
                    lambda: self.producer.abort_transaction(API_TIMEOUT),
                    API_TIMEOUT + 5,
                    "abort_transaction",
                ),
                "abort",
            )
        except KafkaException as exc:
            fatal = self.failure(exc)
            reason = str(fatal) if fatal is not None else exc.args[0].str()
            raise FatalError(
                f"aborting the transaction failed: {reason}", fenced=bool(fatal and fatal.fenced)
            ) from exc
        self.open = False
        self.opened_at = None
        self.records = 0

    def close(self) -> None:
        self.calls.close()
        self.producer.flush(API_TIMEOUT)


class Renewal:
    """The emitter's transactional producers: the first, and a new one with the same
    transactional id when one cannot go on (``renew``), at most every ``RENEW_EVERY``
    seconds. ``make`` builds one (``Transaction``, or a test's); ``now`` is the emitter's
    clock. Caller: the emitter thread."""

    def __init__(
        self,
        make: Callable[..., Transaction],
        config: tuple[dict[str, Any], str, float],  # librdkafka config, id, timeout
        now: Callable[[], float],
    ) -> None:
        self._make = make
        self._config = config
        self._now = now
        self._renewed_at = -RENEW_EVERY

    def first(self) -> Transaction:
        return self._make(*self._config)

    def renew(self, txn: Transaction, exc: FatalError) -> Transaction:
        """A producer that cannot go on (say, after a broker restart its abort is refused):
        a new one with the same transactional id, initialised (which fences the old one and
        aborts what it left open). Fenced by another process with our id, or producers
        breaking again within ``RENEW_EVERY``: ``exc`` is raised (fatal)."""
        now = self._now()
        # Fenced while the transaction had outlived --transaction-timeout: the broker
        # aborted it and bumped the epoch itself (a broker that hung, a stalled emitter),
        # which librdkafka reports as a fence. This instance's data directory is locked, so
        # no other process on this host has the id: a new producer takes over.
        expired = exc.fenced and txn.outlived_timeout()  # by the producer's own clock
        if (exc.fenced and not expired) or now - self._renewed_at < RENEW_EVERY:
            # Another process has our id (it would be fenced back in turn), or producers
            # keep breaking: exit, and let the orchestrator (or the operator) sort it out.
            raise exc
        self._renewed_at = now
        log.warning(
            "replacing the transactional producer after: %s%s",
            exc,
            " (the transaction had been open past --transaction-timeout: the broker aborted it)"
            if expired
            else "",
        )
        fresh = self._make(*self._config)
        fresh.init()
        return fresh
