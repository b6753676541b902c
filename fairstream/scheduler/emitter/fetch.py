"""Payloads read back from the ingest log.

The emitter holds buffered payloads in memory up to ``--buffer-memory``; beyond that a record
is indexed without its payload (tenant, offset, cost, times) and read again from the log
when its turn comes (a parked record's from the holding topic: a negative partition ``~p``
is partition ``p`` of it, ``holding``). A read fetches a run of records from that offset on
and keeps them in a small window, because the next turns usually want their neighbours: a
bursting tenant's records sit next to each other in its partition.

A read that does not find its record cannot tell by itself "deleted" from "broker slow or
away", so it asks the partition's log start (the low watermark, from the leader): only a
log start past the record means the log no longer holds it (``Gone``, with that log start,
which the ``lost`` dead letter then gives). Anything else (a timeout, a leader away, a log
start at or below the record) is "not now" (None): the partition backs off (``BACKOFF``
doubling to ``MAX_BACKOFF``) and every read of it answers None at once until the backoff
ends, so the emitter spends at most ``READ_TIMEOUT`` plus ``WATERMARK_TIMEOUT`` per
partition per backoff and goes on with the tenants it can serve. ``failing`` says which
partitions cannot be read back, since when, and why (the service's readiness condition).

Caller: the emitter thread (not thread-safe). Affects: nothing but its own consumer;
``failing`` is replaced whole (a reference swap) for other threads to read.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from fairstream.adapters.ports import AssignedReader, ConsumerFactory, connect_consumer
from fairstream.core import Clock, MonotonicClock
from fairstream.scheduler import faults
from fairstream.scheduler.consumers import LazyConsumer

log = logging.getLogger("fairstream.fetch")

WINDOW_BYTES = 32 * 1024 * 1024  # records read ahead and kept for the next turns
READ_TIMEOUT = 2.0  # seconds one read waits for its record
WATERMARK_TIMEOUT = 2.0  # seconds the log start is asked for, when the record was not read
BACKOFF = 0.25  # seconds before a partition that could not be read is read again
MAX_BACKOFF = 5.0
BATCH = 1000  # records one consume call takes at most
READ_AHEAD = 10_000  # records already fetched that a read keeps beyond the one it wanted
SKIP_AHEAD = 20_000  # offsets a read passes over rather than seek
PATIENT = 0.01  # seconds a read that need not hold the emitter up waits (``get``'s patience)


@dataclass(frozen=True)
class Gone:
    """The log no longer holds the record: its partition's log start is past it."""

    log_start: int


@dataclass(frozen=True)
class Failing:
    """A partition whose read-backs fail for now (published in ``PayloadFetcher.failing``)."""

    since: float  # the fetcher's clock's time of the first failure in a row
    attempts: int
    offset: int  # the record last wanted
    error: str  # why the last attempt did not read it
    retry_at: float  # by the fetcher's clock


class PayloadFetcher:
    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        holding: str | None = None,
        clock: Clock | None = None,
        connect: ConsumerFactory = connect_consumer,
    ) -> None:
        # The backoff's clock (the emitter's). A read's own timeout is real time: it bounds
        # the consumer's calls.
        self.clock = clock or MonotonicClock()
        self.topic = topic
        self.holding = holding  # a negative partition ~p is partition p of this topic
        self._consumer = LazyConsumer(
            config,
            f"{topic}.payloads",
            {
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
                "max.partition.fetch.bytes": 1024 * 1024,
                # Between two reads the reader prefetches until its queue holds
                # queued.min.messages, and then waits fetch.queue.backoff.ms (1 s by
                # default) before fetching again: the next read, after a seek, waited out
                # that second (measured: reads of 1.05 s, dead letters of a flood's overflow
                # at 2,400/s). A small queue and a short backoff keep a read to a round trip.
                "queued.min.messages": 10_000,
                "queued.max.messages.kbytes": 8192,
                "fetch.queue.backoff.ms": 5,
            },
            connect=connect,
        )
        self._window: OrderedDict[tuple[int, int], Message] = OrderedDict()
        self._bytes = 0
        self._next: tuple[int, int] | None = None  # where the reader stands, if streaming
        self.reads = 0
        self.failing: dict[int, Failing] = {}  # replaced whole: read by other threads

    def _reader(self) -> AssignedReader:
        return self._consumer.get()

    def get(
        self, partition: int, offset: int, patience: float | None = None
    ) -> Message | Gone | None:
        """The record at ``offset``; ``Gone`` when the log no longer has it (its log start
        is past it); None when it cannot be read now (try again after ``retry_in``).

        ``patience``: seconds this read may wait for its record, for a read that need not
        hold the emitter up (a dead letter, records read again ahead of their turn). Past
        them it answers None with no backoff (not yet, not a failure): the reader goes on
        fetching from there, and the next ``get`` takes what came meanwhile. The first read
        of a flood's letters, during the flood, waited 0.3-1.0 s for its fetch, and so did
        every record emitted after it."""
        key = (partition, offset)
        hit = self._window.pop(key, None)
        if hit is not None:
            self._bytes -= _size(hit)
            return hit
        failing = self.failing.get(partition)
        if failing is not None and self.clock.now() < failing.retry_at:
            return None  # backing off: the emitter serves others meanwhile
        self.reads += 1
        found, error, passed = self._read(partition, offset, patience)
        if found is not None:
            self._recovered(partition)
            return found
        if patience is not None and not passed:
            return None  # not yet
        try:
            low, _high = self._reader().get_watermark_offsets(
                TopicPartition(self.topic, partition), timeout=WATERMARK_TIMEOUT, cached=False
            )
        except KafkaException as exc:
            self._failed(partition, offset, f"{error}; log start unknown: {exc.args[0]}")
            return None
        if low > offset:
            self._recovered(partition)
            log.error(
                "ingest record %d@%d is gone from the log (log start %d)", partition, offset, low
            )
            return Gone(int(low))
        self._failed(partition, offset, f"{error}; the log still holds it (log start {low})")
        return None

    def retry_in(self, partition: int) -> float:
        """Seconds until a read of ``partition`` is tried again (0: now)."""
        failing = self.failing.get(partition)
        return 0.0 if failing is None else max(0.0, failing.retry_at - self.clock.now())

    @property
    def retry_at(self) -> float:
        """When (by the clock) the first backing-off partition is read again (0: none)."""
        return min((f.retry_at for f in self.failing.values()), default=0.0)

    def _read(
        self, partition: int, offset: int, patience: float | None
    ) -> tuple[Message | None, str, bool]:
        """The record at ``offset`` if read within the patience (``READ_TIMEOUT`` without
        one); why not; and whether the log went past it without it."""
        if faults.take("readback"):  # tests only: a read that finds nothing in time
            return None, "injected miss (FAIRSTREAM_TEST_FAULTS)", False
        reader = self._reader()
        topic, real = self.topic, partition
        if partition < 0 and self.holding is not None:
            topic, real = self.holding, ~partition
        stands = self._next
        if stands is None or stands[0] != partition or not 0 <= offset - stands[1] <= SKIP_AHEAD:
            # A seek: librdkafka drops what it fetched ahead. Reading on from where the
            # last read stopped (the next unheld letter of a flood's overflow, the next
            # record of a bursting tenant) keeps the stream and what it has fetched, and
            # passing over a few thousand records costs less than a seek's round trip.
            reader.assign([TopicPartition(topic, real, offset)])
        self._next = None
        wait = READ_TIMEOUT if patience is None else patience
        deadline = time.monotonic() + wait
        found: Message | None = None
        passed = False  # the log is past ``offset`` without it: deleted, or so it seems
        error = f"not read within {wait:g} s"
        last = -1
        while found is None and not passed and time.monotonic() < deadline:
            for msg in reader.consume(num_messages=BATCH, timeout=min(0.5, wait)):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        passed = True
                        error = "the end of the log came first"
                    else:
                        error = err.str()
                        log.warning("reading back partition %d: %s", partition, err.str())
                    continue
                at = msg.offset()
                if msg.partition() != real or at is None or at < offset:
                    continue
                last = max(last, at)
                if at == offset:
                    found = msg
                else:
                    # Records come in offset order: one past ``offset`` before it suggests
                    # the log no longer has it; the log start decides (``get``).
                    if found is None and not passed:
                        passed = True
                        error = f"offset {at} came first"
                    self._keep((partition, at), msg)
        if found is not None:
            # The reader stands after the last record it handed over (transaction markers
            # between are skipped by the next consume).
            self._next = (partition, self._read_ahead(reader, partition, real, last) + 1)
        elif not passed and last < 0:
            self._next = (partition, offset)  # nothing came yet: the reader stands there
        self._trim()
        return found, error, passed

    def _read_ahead(self, reader: AssignedReader, partition: int, real: int, last: int) -> int:
        """What the reader has fetched already is kept too (the next turns want the
        neighbours), without waiting for more. The last offset it handed over."""
        taken = 0
        while taken < READ_AHEAD:
            batch = reader.consume(num_messages=BATCH, timeout=0)
            if not batch:
                break
            taken += len(batch)
            for msg in batch:
                at = msg.offset()
                if msg.error() is None and msg.partition() == real and at is not None:
                    last = max(last, at)
                    self._keep((partition, at), msg)
        return last

    def _failed(self, partition: int, offset: int, error: str) -> None:
        now = self.clock.now()
        last = self.failing.get(partition)
        attempts = 1 if last is None else last.attempts + 1
        delay = min(MAX_BACKOFF, BACKOFF * 2 ** (attempts - 1))
        since = now if last is None else last.since
        log.warning(
            "ingest record %d@%d not read back (%s); trying again in %.2f s",
            partition,
            offset,
            error,
            delay,
        )
        failing = dict(self.failing)
        failing[partition] = Failing(since, attempts, offset, error, now + delay)
        self.failing = failing

    def _recovered(self, partition: int) -> None:
        if partition in self.failing:
            failing = dict(self.failing)
            del failing[partition]
            self.failing = failing
            log.info("ingest partition %d is read back again", partition)

    def _keep(self, key: tuple[int, int], msg: Message) -> None:
        if key not in self._window:
            self._window[key] = msg
            self._bytes += _size(msg)

    def _trim(self) -> None:
        while self._bytes > WINDOW_BYTES and self._window:
            _, old = self._window.popitem(last=False)
            self._bytes -= _size(old)

    def forget(self, partition: int) -> None:
        """Drop the window's records of a partition this instance no longer owns."""
        if self._next is not None and self._next[0] == partition:
            self._next = None
        for key in [k for k in self._window if k[0] == partition]:
            self._bytes -= _size(self._window.pop(key))
        if partition in self.failing:
            self.failing = {p: f for p, f in self.failing.items() if p != partition}

    def close(self) -> None:
        self._next = None
        self._consumer.close()


def _size(msg: Message) -> int:
    value = msg.value()
    return 100 + (len(value) if value else 0)
