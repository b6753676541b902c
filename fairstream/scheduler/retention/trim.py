"""Keeping the ingest topic to the backlog, and watching that retention never eats it.

After commits, the committed low-water marks of owned partitions are handed here; every
``INTERVAL`` seconds this thread deletes the ingest records below them (AdminClient
``delete_records``), so the ingest topic holds what is still buffered, plus ``TRIM_LAG``
seconds: a mark is trimmed to once it has stood that long without a rewind (``Seasoned``).
A rewind (an abort, a replaced producer) forgets the marks not yet trimmed to.

A mark is never trimmed to on the word of ``commit_transaction`` alone: each round reads the
group's committed offsets back from the coordinator, stable (``require_stable``, which
librdkafka sets under ``isolation.level=read_committed``, KIP-447: offsets still pending in
a transaction answer UNSTABLE_OFFSET_COMMIT and wait for a later round). An ingest partition
is trimmed to at most that offset; a holding log to a mark only once the group's offset
metadata names a commit of this process at least as new as the one that made the mark
(``confirmed``). Why: in the soak the single broker's controlled shutdown left
every partition without a leader; a commit whose EndTxn came then was answered with success
(PrepareCommit logged), its markers were skipped as if its partitions were deleted and
CompleteCommit was logged, so its egress records and offsets stayed pending until the next
transaction of the producer was aborted, which aborted them with it. The mark handed over
after that commit, one record ahead of the offset the group kept, had been trimmed to: the
record was lost. With ``--no-trim`` it only watches. The holding topic of parked records
(``holding``; its marks come under negative keys, ``holding_id``) is internal: it is trimmed
below its own marks whatever ``--no-trim`` says.

It also watches the other way round: when the ingest topic has a finite ``retention.ms``, it
reads the timestamp of each partition's oldest unsettled record (the one at the mark) and
exports how long retention leaves it (``fairstream_ingest_retention_headroom_seconds``),
warning below a tenth of the retention. ``fairstream topics create`` sets ``retention.ms=-1``
so nothing buffered can expire.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from fairstream.scheduler.consumers import LazyConsumer
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.retention.held import HeldReader

log = logging.getLogger("fairstream.trim")

INTERVAL = 2.0  # seconds between two rounds
TRIM_LAG = 20.0  # seconds a committed mark stands, with no rewind, before it is trimmed to


class Committed(NamedTuple):
    """An ingest partition's offset as the group coordinator reports it, stable, and the
    sequence of the commit its metadata names when this process wrote it (0 otherwise)."""

    offset: int
    seq: int


def token_seq(metadata: str | None, prefix: str) -> int:
    """The sequence of the commit token ``metadata`` (``<prefix>:<seq>``) when it has this
    process's ``prefix``; 0 for anything else (another run's token, or none: that commit
    wrote no progress snapshot), which confirms only recovered marks."""
    head, _, tail = (metadata or "").rpartition(":")
    return int(tail) if prefix and head == prefix and tail.isdigit() else 0


def limits(committed: Mapping[int, Committed]) -> dict[int, int]:
    """Per key, the newest commit sequence ``Seasoned.ripe`` may take a mark from: any for
    an ingest partition read back (``confirmed`` caps its mark at the offset), the one its
    offset metadata names for that partition's holding log; no key for the rest."""
    out = {p: sys.maxsize for p in committed}
    out.update({~p: c.seq for p, c in committed.items()})
    return out


def confirmed(marks: Mapping[int, int], committed: Mapping[int, Committed]) -> dict[int, int]:
    """What may be trimmed to of the ripe ``marks``: an ingest partition's mark capped at the
    group's committed offset; nothing of a partition (nor its holding log) whose offset was
    not read back stably this round."""
    out: dict[int, int] = {}
    for key, mark in marks.items():
        read = committed.get(key if key >= 0 else ~key)
        if read is not None:
            out[key] = min(mark, read.offset) if key >= 0 else mark
    return out


class Seasoned:
    """The committed marks old enough to trim to. Pure; the trimmer thread's own.

    ``observe`` takes each hand-over of the emitter's committed marks (with the generation
    the emitter bumps at each rewind, when they were handed over, and per mark the sequence
    of the commit that made it, 0 when recovered); ``ripe(now)`` says, per partition still
    handed over, the newest mark that has stood for ``lag`` seconds. A new generation forgets
    the marks that had not ripened yet: they came from before a rewind. With ``limits``
    (``limits()``), a mark ripens only once its commit is known committed, too.
    """

    def __init__(self, lag: float = TRIM_LAG) -> None:
        self.lag = lag
        self._generation = 0
        self._unripe: dict[int, deque[tuple[float, int, int]]] = {}  # key -> (at, seq, mark)
        self._ripe: dict[int, int] = {}

    def observe(
        self,
        generation: int,
        at: float,
        marks: dict[int, int],
        seqs: Mapping[int, int] | None = None,
    ) -> None:
        if generation != self._generation:
            self._generation = generation
            self._unripe = {}
        for partition in [p for p in self._unripe if p not in marks]:
            del self._unripe[partition]
        for partition in [p for p in self._ripe if p not in marks]:
            del self._ripe[partition]
        for partition, mark in marks.items():
            waiting = self._unripe.setdefault(partition, deque())
            newest = waiting[-1][2] if waiting else self._ripe.get(partition, -1)
            if mark > newest:
                waiting.append((at, (seqs or {}).get(partition, 0), mark))

    def ripe(self, now: float, limits: Mapping[int, int] | None = None) -> dict[int, int]:
        for partition, waiting in self._unripe.items():
            limit = sys.maxsize if limits is None else limits.get(partition, -1)
            while waiting and waiting[0][0] <= now - self.lag and waiting[0][1] <= limit:
                _at, _seq, mark = waiting.popleft()
                self._ripe[partition] = max(mark, self._ripe.get(partition, -1))
        return dict(self._ripe)


class Trimmer:
    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        metrics: Metrics,
        *,
        trim: bool,
        retention_ms: int | None,
        holding: str | None = None,
        lag: float = TRIM_LAG,
        clock: Callable[[], float] = time.monotonic,
        group_id: str | None = None,
        token_prefix: str = "",
        held: HeldReader | None = None,
    ) -> None:
        self.topic = topic
        self.held = held  # the watch of the topics this instance writes (``held``)
        self.holding = holding
        self.metrics = metrics
        self.trim = trim
        self.retention_ms = retention_ms if retention_ms and retention_ms > 0 else None
        self._admin = AdminClient(config)
        self._clock = clock
        # (generation, when handed over, marks, the sequence of the commit of each): one
        # reference swapped by the emitter thread
        self._marks: tuple[int, float, dict[int, int], dict[int, int]] = (0, clock(), {}, {})
        # The group whose committed offsets confirm a mark (None: marks are trimmed to as
        # handed over), the emitter's token prefix, and the consumer that reads them back
        # (it never subscribes: it only sends OffsetFetch).
        self._group_id = group_id
        self._token_prefix = token_prefix
        self._offsets = (
            None
            if group_id is None
            else LazyConsumer(config, group_id, {"isolation.level": "read_committed"})
        )
        self._seasoned = Seasoned(lag)
        self._trimmed: dict[int, int] = {}  # partition -> mark the last trim reached
        self._starts: dict[int, int] = {}  # partition -> its log start after that trim
        self._stopping = threading.Event()
        self._reader = LazyConsumer(
            config,
            f"{topic}.watch",
            {
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                # One record is read (its timestamp): fetch one batch, not a megabyte, and
                # prefetch no more behind it.
                "max.partition.fetch.bytes": 1024,
                "queued.max.messages.kbytes": 64,
                "queued.min.messages": 1,
            },
        )

    def committed(self, marks: dict[int, int] | None, seqs: dict[int, int] | None = None) -> None:
        """The committed marks of the partitions owned now, and per mark the sequence of the
        commit that made it (0: recovered); None after a rewind: what was handed over before
        is not trimmed to unless it had ripened. Caller: the emitter thread (the only writer:
        one reference swap, read whole by this thread)."""
        generation = self._marks[0]
        if marks is None:
            self._marks = (generation + 1, self._clock(), {}, {})
        else:
            self._marks = (generation, self._clock(), marks, seqs or {})

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        """Trim and watch every ``INTERVAL`` until stopped. An error ends it with the
        exception; the service's supervisor runs it again (``supervise``)."""
        try:
            while not self._stopping.wait(INTERVAL):
                generation, at, latest, seqs = self._marks
                self._seasoned.observe(generation, at, latest, seqs)
                if self._group_id is None:
                    marks = self._seasoned.ripe(self._clock())
                else:  # only what the group's offsets confirm
                    committed = self._read_committed([p for p in latest if p >= 0])
                    ripe = self._seasoned.ripe(self._clock(), limits(committed))
                    marks = confirmed(ripe, committed)
                for partition in list(self._trimmed):
                    if partition not in latest:
                        del self._trimmed[partition]
                        self._starts.pop(partition, None)
                trimmed = marks if self.trim else {p: m for p, m in marks.items() if p < 0}
                if self.holding is None:
                    trimmed = {p: m for p, m in trimmed.items() if p >= 0}
                self._trim(trimmed)
                self._watch({p: m for p, m in latest.items() if p >= 0})
                if self.held is not None:
                    self.held.round(self._admin)
        finally:
            self._reader.close()  # a restarted run opens new ones
            if self._offsets is not None:
                self._offsets.close()

    def _read_committed(self, partitions: list[int]) -> dict[int, Committed]:
        """The group's committed offsets of ``partitions`` as its coordinator reports them,
        stable: a partition whose offset is pending in an open transaction
        (UNSTABLE_OFFSET_COMMIT), has none, or was not read in time is left out."""
        if not partitions:
            return {}
        assert self._offsets is not None  # with a group to read
        try:
            answer = self._offsets.get().committed(
                [TopicPartition(self.topic, p) for p in partitions], timeout=5
            )
        except KafkaException as exc:
            log.info("reading the group's offsets to confirm the marks to trim to: %s", exc)
            return {}
        return {
            tp.partition: Committed(tp.offset, token_seq(tp.metadata, self._token_prefix))
            for tp in answer
            if tp.error is None and tp.offset >= 0
        }

    def _trim(self, marks: dict[int, int]) -> None:
        due = [self._tp(p, m) for p, m in marks.items() if m > self._trimmed.get(p, -1)]
        if not due:
            return
        futures = self._admin.delete_records(due, request_timeout=15)
        for tp, future in futures.items():
            key = tp.partition if tp.topic == self.topic else ~tp.partition
            try:
                deleted = future.result(timeout=30)
            except Exception as exc:
                log.warning(
                    "trimming %s partition %d below %d: %s", tp.topic, tp.partition, tp.offset, exc
                )
                continue
            self._trimmed[key] = tp.offset
            if key < 0:
                continue  # the holding log: not counted as ingest records trimmed
            start = self._starts.get(key)
            if start is None:  # the partition's log start before our first trim
                start = self._low_watermark(key)
            self._starts[key] = deleted.low_watermark
            self.metrics.trimmed.inc(max(0, deleted.low_watermark - start))

    def _tp(self, key: int, offset: int) -> TopicPartition:
        if key < 0 and self.holding is not None:
            return TopicPartition(self.holding, ~key, offset)
        return TopicPartition(self.topic, key, offset)

    def _low_watermark(self, partition: int) -> int:
        low, _ = self._reader.get().get_watermark_offsets(
            TopicPartition(self.topic, partition), timeout=10, cached=False
        )
        return int(low)

    def _watch(self, marks: dict[int, int]) -> None:
        for partition, mark in marks.items():
            headroom = math.inf
            if self.retention_ms is not None:
                oldest = self._timestamp_at(partition, mark)
                if oldest is not None:
                    age_ms = time.time() * 1000 - oldest
                    headroom = (self.retention_ms - age_ms) / 1000
                    if headroom < self.retention_ms / 10_000:
                        log.warning(
                            "ingest partition %d: the oldest unsettled record is %.0f s old; "
                            "retention (%.0f s) deletes it in %.0f s. Raise retention.ms of %s "
                            "or the egress rate.",
                            partition,
                            age_ms / 1000,
                            self.retention_ms / 1000,
                            headroom,
                            self.topic,
                        )
            self.metrics.retention_headroom.labels(str(partition)).set(headroom)

    def _timestamp_at(self, partition: int, offset: int) -> int | None:
        reader = self._reader.get()
        reader.assign([TopicPartition(self.topic, partition, offset)])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for msg in reader.consume(num_messages=1, timeout=0.5):
                err = msg.error()
                if err is None:
                    return msg.timestamp()[1]
                if err.code() == KafkaError._PARTITION_EOF:
                    return None
        return None
