"""The ingest thread: group membership, recovery, and reading the ingest log.

One librdkafka consumer is this instance's membership in the consumer group ``--app-id``
(cooperative-sticky assignment, optional static membership). Its committed offsets are the
partitions' low-water marks, written by the emitter's transactions with this consumer's
group metadata, so a member that lost its partitions cannot commit (KIP-447). It reads no
records itself: each owned partition has a reader of its own (``readers``), so a burst in
one partition never queues ahead of another's records, and so has its holding log (the
records of parked tenants, ``holding``), under the key ``holding_id(p)``.

The thread takes a slice from each reader in turn and parses each record against the ingest
contract; it keeps no state of its own and writes nothing. Parsed records and rebalance
events go to the emitter through the handoff queues, in order per partition.

Generations: every ``Assign`` and ``Revoke`` carries the group metadata read in its
callback, and the emitter commits only with the metadata it was last handed, never with
one read later: after a revocation it commits with the generation that still owned the
partitions, so once they belong to another member (a newer generation) the broker refuses
that commit and the emitter aborts. A revocation waits ``--revoke-wait`` seconds for the
emitter to commit; past that the partitions go anyway (the group must not wait forever on
a stuck emitter) and the ``Revoke`` is marked given up: the emitter, when it gets to it,
aborts what is open and recovers what stays its own instead of committing.

Caller: ``SchedulerService``. Affects: the group membership, the handoff queues.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from fairstream.adapters.heap import HeapTrimmer
from fairstream.config import Settings
from fairstream.config.topics import holding_topic
from fairstream.scheduler.handoff import Handoff, high_water
from fairstream.scheduler.ingest.readers import Readers, reader_config
from fairstream.scheduler.messages import Assign, Heard, Revoke, Stop
from fairstream.scheduler.parsing import parse
from fairstream.scheduler.records import Parsed
from fairstream.scheduler.recovery import Recovery, holding_id
from fairstream.scheduler.supervise import FatalError

log = logging.getLogger("fairstream.ingest")

BATCH = 2000  # records per consume call
REJOIN_EVERY = 60.0  # seconds: a group consumer fenced again sooner is fatal


def static_id(settings: Settings) -> str | None:
    """The group instance id this member joins under (static membership), if any."""
    if settings.membership == "static" and settings.group_instance_id:
        return settings.group_instance_id
    return None


def consumer_config(settings: Settings) -> dict[str, Any]:
    """The group member's librdkafka settings (it reads nothing itself: see ``readers``)."""
    config: dict[str, Any] = {
        **settings.kafka.librdkafka(),
        "group.id": settings.app_id,
        "partition.assignment.strategy": "cooperative-sticky",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        # Only committed ingest records are requests; aborted ones never reach egress.
        "isolation.level": "read_committed",
        "session.timeout.ms": int(settings.session_timeout * 1000),
        "heartbeat.interval.ms": max(500, int(settings.session_timeout * 100)),
    }
    static = static_id(settings)
    if static is not None:
        config["group.instance.id"] = static
    return config


class Ingest:
    """Owns the group consumer; runs ``run`` on a thread of its own."""

    def __init__(
        self,
        settings: Settings,
        handoff: Handoff,
        recovery: Recovery,
        *,
        emitter_alive: Callable[[], bool],
        on_lost_records: Callable[[int], None],
        heap: HeapTrimmer,
    ) -> None:
        self.settings = settings
        self.topic = settings.topics.ingest
        self.handoff = handoff
        self.recovery = recovery
        self._emitter_alive = emitter_alive
        self._on_lost_records = on_lost_records
        # What the fetches freed, given back to the system each second (``adapters.heap``).
        self._heap = heap
        self.consumer = Consumer(consumer_config(settings))
        self.assigned: set[int] = set()
        self.joined = threading.Event()  # the first assignment arrived (possibly empty)
        self._stopping = threading.Event()
        self._rewind = threading.Event()
        self._rejoined_at = -REJOIN_EVERY  # when a fenced group consumer was last replaced
        # What a rebalance callback raised, raised again by the thread once consume()
        # returns: an exception raised inside librdkafka's callback came out of consume()
        # as a bare KafkaError object that no ``except`` clause matched, so the thread died
        # past its supervisor.
        self._callback_failed: tuple[str, Exception] | None = None
        self._tenants: dict[bytes, str] = {}
        self.readers = Readers(
            reader_config(consumer_config(settings), settings.app_id),
            self.topic,
            holding_topic(settings.app_id),
        )

    # -- control from other threads ---------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()

    def request_rewind(self) -> None:
        """After an aborted transaction: recover every owned partition and read again.
        Caller: the emitter thread."""
        self._rewind.set()

    # -- the thread ----------------------------------------------------------------------------

    def run(self) -> None:
        """The thread's body (under ``supervise``: any failure is fatal, it cannot run twice)."""
        cause: str | None = None
        try:
            self._run()
        except BaseException as exc:
            cause = f"the ingest thread failed: {type(exc).__name__}: {exc}"
            raise
        finally:
            self._close(cause)

    def _subscribe(self) -> None:
        self.consumer.subscribe(
            [self.topic],
            on_assign=self._guarded("assigning", self._on_assign),
            on_revoke=self._guarded("revoking", self._on_revoke),
            on_lost=self._guarded("losing", self._on_lost),
        )

    def _guarded(
        self, doing: str, callback: Callable[[Consumer, list[TopicPartition]], None]
    ) -> Callable[[Consumer, list[TopicPartition]], None]:
        """``callback`` for librdkafka: what it raises is kept for ``_raise_callback_failure``
        instead of crossing the C library."""

        def run(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            try:
                callback(consumer, partitions)
            except Exception as exc:
                parts = sorted(tp.partition for tp in partitions)
                log.exception("%s ingest partitions %s failed", doing, parts)
                if self._callback_failed is None:
                    self._callback_failed = (f"{doing} ingest partitions {parts}", exc)

        return run

    def _raise_callback_failure(self) -> None:
        """A rebalance callback failed: the instance cannot own its partitions as recovered
        (fatal: the supervisor ends the instance, which says why)."""
        if self._callback_failed is not None:
            doing, exc = self._callback_failed
            raise FatalError(f"{doing} failed: {type(exc).__name__}: {exc}") from exc

    def _run(self) -> None:
        self._subscribe()
        handoff = self.handoff
        readers = self.readers
        idle = False
        while not self._stopping.is_set():
            if self._rewind.is_set():
                self._do_rewind()
                continue
            # The member's own partitions stay paused: this call serves the group
            # (callbacks, liveness) and is where the thread waits when nothing came. What
            # it returns is the group's errors: a fatal one (a static member fenced) ends
            # the instance, which would otherwise stay alive with no partitions.
            for event in self.consumer.consume(num_messages=1, timeout=0.005 if idle else 0):
                err = event.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    self._group_error(err)
            self._raise_callback_failure()
            most = high_water(len(self.assigned))
            full = {
                key
                for p in self.assigned
                for key in (p, holding_id(p))  # each partition's ingest and holding logs
                if handoff.backlog(key) >= most
            }
            slices = readers.take(full)
            idle = not slices
            self._heap.maybe()
            if slices:
                for partition, messages in slices:
                    self._hand_over(partition, messages)
                handoff.wake.set()

    def _hand_over(self, partition: int, messages: list[Message]) -> None:
        """Parse one reader's slice into its partition's handoff queue."""
        queue = self.handoff.records.get(partition)
        if queue is not None:  # else revoked meanwhile
            self._parse(partition, messages, queue)

    def _await_emitter(self, done: threading.Event) -> bool:
        """Wait for the emitter to act on a control (at most ``--revoke-wait`` seconds), or
        to die: an emitter that failed will never answer, and the stop must not wait for it."""
        deadline = time.monotonic() + self.settings.revoke_wait
        while not done.wait(0.1):
            if not self._emitter_alive() or time.monotonic() >= deadline:
                return False
        return True

    def _close(self, cause: str | None = None) -> None:
        if self._emitter_alive():
            stop = Stop(cause=cause)
            self.handoff.put(stop)
            self._await_emitter(stop.done)
        self.readers.close_all()
        try:
            self.consumer.close()  # leaves the group (a static member stays until timeout)
        except Exception as exc:
            log.warning("closing the group consumer: %s", exc)
        self.recovery.close()

    def _parse(self, partition: int, messages: list[Message], queue: deque[Parsed]) -> None:
        # The emitter's latest word on whom to pass over (a snapshot, replaced whole).
        passing = self.handoff.passing.get(partition)
        parse(partition, messages, queue, self._tenants, self._heard, self._consumer_error, passing)

    def _heard(self, partition: int) -> None:
        self.handoff.put(Heard(partition))

    def _group_error(self, err: KafkaError) -> None:
        """An error the group consumer returned. A static member fenced is replaced by a
        new consumer, at most once per ``REJOIN_EVERY``; other fatal ones end the thread.

        Why replace it: after a broker restart, the session of each static member timed out,
        librdkafka rejoined under the same group instance id, and the coordinator answered
        an older request of the same member with FENCED_INSTANCE_ID, which librdkafka takes
        as fatal: every instance stopped consuming at once, and stayed up with no partitions.
        Two processes given one instance id fence each other again at once: that is fatal."""
        fatal = err.fatal() or err.code() == KafkaError._FATAL
        static = static_id(self.settings)
        if fatal and "fenced" in err.str().lower() and static is not None:
            now = time.monotonic()
            if now - self._rejoined_at >= REJOIN_EVERY:
                self._rejoined_at = now
                self._rejoin(err)
                return
            raise RuntimeError(
                f"group consumer failed: {err.str()}, again within {REJOIN_EVERY:.0f} s of "
                f"the last time: another process runs as group instance "
                f"{static} (the same --group-instance-id, or a copy "
                "of this instance's --data-dir)"
            )
        self._consumer_error(err, fatal=fatal)

    def _rejoin(self, err: KafkaError) -> None:
        """Give up what the fenced consumer held, close it, and join with a new one."""
        log.warning("the group consumer was fenced (%s): a new one joins the group", err.str())
        if self.assigned:
            parts = [TopicPartition(self.topic, p) for p in sorted(self.assigned)]
            self._give_up(self.consumer, parts, lost=True)
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.info("closing the fenced group consumer: %s", exc)
        self.consumer = Consumer(consumer_config(self.settings))
        self._subscribe()

    def _consumer_error(self, err: KafkaError, *, fatal: bool | None = None) -> None:
        if err.fatal() if fatal is None else fatal:
            raise RuntimeError(f"group consumer failed: {err.str()}")
        if err.code() in (
            KafkaError._AUTHENTICATION,
            KafkaError.SASL_AUTHENTICATION_FAILED,
            KafkaError.GROUP_AUTHORIZATION_FAILED,
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
        ):
            raise RuntimeError(f"Kafka refused the scheduler: {err.str()}")
        log.warning("ingest consumer: %s", err.str())

    # -- rebalance callbacks (run inside consume, on this thread) ------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        metadata = consumer.consumer_group_metadata()  # the new generation's
        wanted = sorted(tp.partition for tp in partitions)
        if wanted:
            progress, lost = self.recovery.recover(consumer, wanted)
            if lost:
                self._on_lost_records(lost)
            keys = [*wanted, *(holding_id(p) for p in wanted)]  # ingest and holding logs
            queues = {key: self.handoff.open(key) for key in keys}
            self.handoff.put(Assign(progress, queues, metadata=metadata))
            # The member holds the partitions paused; a reader of its own reads each log.
            owned = [TopicPartition(self.topic, p, progress[p].lwm) for p in wanted]
            consumer.incremental_assign(owned)
            consumer.pause(owned)
            among = len(self.assigned.union(wanted))
            for key in keys:
                self.readers.open(key, progress[key].lwm, among=among)
            self.assigned.update(wanted)
            log.info(
                "assigned ingest partitions %s (resuming at %s)",
                wanted,
                {p: progress[p].lwm for p in wanted},
            )
        else:
            self.handoff.put(Assign({}, metadata=metadata))
        self.joined.set()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._give_up(consumer, partitions, lost=False)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._give_up(consumer, partitions, lost=True)

    def _give_up(self, consumer: Consumer, partitions: list[TopicPartition], lost: bool) -> None:
        parts = sorted(tp.partition for tp in partitions)
        # The emitter commits with the generation that still owns the partitions.
        metadata = consumer.consumer_group_metadata()
        for p in parts:
            self.readers.close(p)
            self.readers.close(holding_id(p))
        if parts and self._emitter_alive():
            revoke = Revoke(parts, lost=lost, metadata=metadata)
            self.handoff.put(revoke)
            # The emitter commits (or, for lost partitions, aborts) before they move on.
            if not self._await_emitter(revoke.done):
                # Mark it before the partitions go: an emitter that gets to it later aborts.
                revoke.given_up.set()
                log.error(
                    "the emitter did not settle partitions %s within --revoke-wait (%.1f s): "
                    "letting them go; what it holds for them will be aborted",
                    parts,
                    self.settings.revoke_wait,
                )
        try:
            consumer.incremental_unassign(partitions)
        except KafkaException as exc:
            if not lost:
                raise
            log.info("unassigning lost partitions %s: %s", parts, exc)  # a fenced consumer
        self.assigned.difference_update(parts)
        for p in parts:
            self.handoff.close(p)
            self.handoff.close(holding_id(p))
        log.info("%s ingest partitions %s", "lost" if lost else "revoked", parts)

    def _do_rewind(self) -> None:
        self._rewind.clear()
        parts = sorted(self.assigned)
        progress, lost = self.recovery.recover(self.consumer, parts) if parts else ({}, 0)
        if lost:
            self._on_lost_records(lost)
        queues = {}
        for p in [*parts, *(holding_id(p) for p in parts)]:  # ingest and holding logs
            # The reader drops what it prefetched; the fresh queue what was parsed before.
            self.readers.open(p, progress[p].lwm, among=len(parts))
            queues[p] = self.handoff.open(p)
        metadata = self.consumer.consumer_group_metadata()  # this generation's (no callback)
        self.handoff.put(Assign(progress, queues, rewind=True, metadata=metadata))
        log.info("rewound ingest partitions %s to %s", parts, {p: progress[p].lwm for p in parts})
