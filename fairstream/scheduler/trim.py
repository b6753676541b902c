"""Keeping the ingest topic to the backlog, and watching that retention never eats it.

After commits, the committed low-water marks of owned partitions are handed here; every
``INTERVAL`` seconds this thread deletes the ingest records below them (AdminClient
``delete_records``), so the ingest topic holds what is still buffered, plus ``TRIM_LAG``
seconds: a mark is trimmed to once it has stood that long without a rewind (``Seasoned``).
A rewind (an abort, a replaced producer) forgets the marks not yet trimmed to. Why: in the
soak, a broker restart came a second after a commit, the emitter aborted and rewound 17 s
later, and the group's committed offset was one record short of the mark trimmed to right
after that commit: an unsettled record was gone. With
``--no-trim`` it only watches. The holding topic of parked records (``holding``; its marks
come under negative keys, ``holding_id``) is internal: it is trimmed below its own marks
whatever ``--no-trim`` says.

It also watches the other way round: when the ingest topic has a finite ``retention.ms``, it
reads the timestamp of each partition's oldest unsettled record (the one at the mark) and
exports how long retention leaves it (``fairstream_ingest_retention_headroom_seconds``),
warning below a tenth of the retention. ``fairstream topics create`` sets ``retention.ms=-1``
so nothing buffered can expire.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from fairstream.adapters.clients import assigned_consumer_config
from fairstream.metrics import Metrics

log = logging.getLogger("fairstream.trim")

INTERVAL = 2.0  # seconds between two rounds
TRIM_LAG = 20.0  # seconds a committed mark stands, with no rewind, before it is trimmed to


class Seasoned:
    """The committed marks old enough to trim to. Pure; the trimmer thread's own.

    ``observe`` takes each hand-over of the emitter's committed marks (with the generation
    the emitter bumps at each rewind, and when they were handed over); ``ripe(now)`` says, per
    partition still handed over, the newest mark that has stood for ``lag`` seconds. A new
    generation forgets the marks that had not ripened yet: they came from before a rewind.
    """

    def __init__(self, lag: float = TRIM_LAG) -> None:
        self.lag = lag
        self._generation = 0
        self._unripe: dict[int, deque[tuple[float, int]]] = {}  # partition -> (at, mark)
        self._ripe: dict[int, int] = {}

    def observe(self, generation: int, at: float, marks: dict[int, int]) -> None:
        if generation != self._generation:
            self._generation = generation
            self._unripe = {}
        for partition in [p for p in self._unripe if p not in marks]:
            del self._unripe[partition]
        for partition in [p for p in self._ripe if p not in marks]:
            del self._ripe[partition]
        for partition, mark in marks.items():
            waiting = self._unripe.setdefault(partition, deque())
            newest = waiting[-1][1] if waiting else self._ripe.get(partition, -1)
            if mark > newest:
                waiting.append((at, mark))

    def ripe(self, now: float) -> dict[int, int]:
        for partition, waiting in self._unripe.items():
            while waiting and waiting[0][0] <= now - self.lag:
                _at, mark = waiting.popleft()
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
    ) -> None:
        self.topic = topic
        self.holding = holding
        self.metrics = metrics
        self.trim = trim
        self.retention_ms = retention_ms if retention_ms and retention_ms > 0 else None
        self._config = config
        self._admin = AdminClient(config)
        self._clock = clock
        # (generation, when handed over, marks): one reference swapped by the emitter thread
        self._marks: tuple[int, float, dict[int, int]] = (0, clock(), {})
        self._seasoned = Seasoned(lag)
        self._trimmed: dict[int, int] = {}  # partition -> mark the last trim reached
        self._starts: dict[int, int] = {}  # partition -> its log start after that trim
        self._stopping = threading.Event()
        self._reader: Consumer | None = None

    def committed(self, marks: dict[int, int] | None) -> None:
        """The committed marks of the partitions owned now; None after a rewind: what was
        handed over before is not trimmed to unless it had ripened. Caller: the emitter
        thread (the only writer: one reference swap, read whole by this thread)."""
        generation = self._marks[0]
        if marks is None:
            self._marks = (generation + 1, self._clock(), {})
        else:
            self._marks = (generation, self._clock(), marks)

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        """Trim and watch every ``INTERVAL`` until stopped. An error ends it with the
        exception; the service's supervisor runs it again (``supervise``)."""
        try:
            while not self._stopping.wait(INTERVAL):
                generation, at, latest = self._marks
                self._seasoned.observe(generation, at, latest)
                marks = self._seasoned.ripe(self._clock())
                for partition in list(self._trimmed):
                    if partition not in latest:
                        del self._trimmed[partition]
                        self._starts.pop(partition, None)
                trimmed = marks if self.trim else {p: m for p, m in marks.items() if p < 0}
                if self.holding is None:
                    trimmed = {p: m for p, m in trimmed.items() if p >= 0}
                self._trim(trimmed)
                self._watch({p: m for p, m in latest.items() if p >= 0})
        finally:
            if self._reader is not None:
                self._reader.close()
                self._reader = None  # a restarted run opens a new one

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
        low, _ = self._watcher().get_watermark_offsets(
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

    def _watcher(self) -> Consumer:
        if self._reader is None:
            self._reader = Consumer(
                assigned_consumer_config(
                    self._config,
                    f"{self.topic}.watch",
                    {
                        "enable.partition.eof": True,
                        "auto.offset.reset": "earliest",
                        # One record is read (its timestamp): fetch one batch, not a
                        # megabyte, and prefetch no more behind it.
                        "max.partition.fetch.bytes": 1024,
                        "queued.max.messages.kbytes": 64,
                        "queued.min.messages": 1,
                    },
                )
            )
        return self._reader

    def _timestamp_at(self, partition: int, offset: int) -> int | None:
        reader = self._watcher()
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
