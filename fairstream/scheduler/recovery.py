"""Recovery: where each ingest partition resumes, from what the last transaction committed.

The consumer group's committed offset of an ingest partition is its low-water mark; the
offset's metadata is the commit token of the transaction that wrote it, and when settled
ranges lay above the mark, that transaction also wrote a progress record carrying the same
token to the partition's progress-topic partition. Recovery reads both, then the ingest
thread reads the log again from the mark and the emitter skips the settled ranges.

Both reads wait for transactions still open: the committed offsets are fetched with
``require_stable`` (librdkafka does under ``isolation.level=read_committed``, KIP-447), so a
crashed owner's unfinished transaction is resolved first, and the progress record is read
with read_committed.

Caller: the ingest thread, inside the group's assignment callback and on a rewind.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from fairstream.adapters.clients import assigned_consumer_config
from fairstream.errors import Error
from fairstream.scheduler import progress as codec
from fairstream.scheduler.progress import PartitionProgress

log = logging.getLogger("fairstream.recovery")

TOKEN_WAIT = 10.0  # seconds to wait for a progress record matching the committed token


class RecoveryError(Error):
    """The committed progress could not be read within the deadline."""


def progress_topic(app_id: str) -> str:
    """The compacted topic of progress records, co-partitioned with the ingest topic."""
    return f"{app_id}-progress"


class Recovery:
    """Reads committed marks (through the group consumer) and progress records."""

    def __init__(self, config: dict[str, Any], ingest_topic: str, app_id: str) -> None:
        self.ingest_topic = ingest_topic
        self.topic = progress_topic(app_id)
        self._config = config
        self._reader: Consumer | None = None

    def _progress_reader(self) -> Consumer:
        if self._reader is None:
            self._reader = Consumer(
                assigned_consumer_config(
                    self._config,
                    f"{self.topic}.reader",
                    {
                        "isolation.level": "read_committed",
                        "enable.partition.eof": True,
                        "fetch.wait.max.ms": 10,
                    },
                )
            )
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def recover(
        self, consumer: Consumer, partitions: list[int], timeout: float = 120.0
    ) -> tuple[dict[int, PartitionProgress], int]:
        """Each partition's progress, and how many unsettled records retention deleted.

        ``consumer`` is the group member (its committed offsets are the marks).
        """
        deadline = time.monotonic() + timeout
        marks = self._committed(consumer, partitions, deadline)
        recovered: dict[int, PartitionProgress] = {}
        lost = 0
        for partition in partitions:
            mark, token = marks[partition]
            low, _high = consumer.get_watermark_offsets(
                TopicPartition(self.ingest_topic, partition), timeout=30, cached=False
            )
            if mark is None:
                mark = low  # never committed: everything still in the log is unsettled
            ranges: list[tuple[int, int]] = []
            if token:
                ranges = self._ranges(partition, token, mark, deadline)
            if low > mark:
                # Retention (or someone) deleted records that were never settled.
                missing = low - mark - sum(min(e, low) - s for s, e in ranges if s < low)
                lost += max(0, missing)
                log.error(
                    "ingest partition %d starts at offset %d but records from %d were not "
                    "settled: %d were deleted before they could be emitted (check the ingest "
                    "topic's retention)",
                    partition,
                    low,
                    mark,
                    missing,
                )
                ranges = [(max(s, low), e) for s, e in ranges if e > low]
                mark = low
            recovered[partition] = PartitionProgress(mark, ranges)
        return recovered, lost

    def _committed(
        self, consumer: Consumer, partitions: list[int], deadline: float
    ) -> dict[int, tuple[int | None, str]]:
        wanted = [TopicPartition(self.ingest_topic, p) for p in partitions]
        while True:
            try:
                answer = consumer.committed(wanted, timeout=10)
                errors = [tp.error for tp in answer if tp.error is not None]
                if not errors:
                    return {
                        tp.partition: (tp.offset if tp.offset >= 0 else None, tp.metadata or "")
                        for tp in answer
                    }
                problem: object = errors[0]
            except KafkaException as exc:
                problem = exc
            # UNSTABLE_OFFSET_COMMIT: a transaction of the previous owner is still open; it
            # is committed or aborted (at the latest by its timeout) before we read.
            if time.monotonic() >= deadline:
                raise RecoveryError(f"cannot read the committed low-water marks: {problem}")
            log.info("waiting for committed offsets: %s", problem)
            time.sleep(0.2)

    def _ranges(
        self, partition: int, token: str, mark: int, deadline: float
    ) -> list[tuple[int, int]]:
        """The settled ranges of the progress record written with ``token``."""
        token_deadline = min(deadline, time.monotonic() + TOKEN_WAIT)
        while True:
            found = self._latest(partition, deadline)
            if found is not None and found[0] == token:
                return found[2]
            if time.monotonic() >= token_deadline:
                # An older record is never wrong, only incomplete (records of the last
                # transaction may be emitted again): say so and go on.
                log.warning(
                    "ingest partition %d: no progress record with commit token %r (latest: "
                    "%r); resuming from offset %d with %s",
                    partition,
                    token,
                    found[0] if found else None,
                    mark,
                    "an older record" if found else "no settled ranges",
                )
                return found[2] if found is not None else []
            # The transaction's markers reach the progress partition a moment after its
            # offsets are committed: look again shortly.
            time.sleep(0.05)

    def _latest(
        self, partition: int, deadline: float
    ) -> tuple[str, int, list[tuple[int, int]]] | None:
        reader = self._progress_reader()
        tp = TopicPartition(self.topic, partition)
        low, high = reader.get_watermark_offsets(tp, timeout=30, cached=False)
        window = 64
        while True:
            start = max(low, high - window)
            reader.assign([TopicPartition(self.topic, partition, start)])
            latest: bytes | None = None
            while time.monotonic() < deadline:
                # A short wait: consume() waits its whole timeout unless 1,000 records
                # come, and the window holds far fewer; a 1 s wait here cost every
                # partition a second of recovery (12 s to ready with 12 partitions).
                batch = reader.consume(num_messages=1000, timeout=0.05)
                done = False
                for msg in batch:
                    err = msg.error()
                    if err is None:
                        latest = msg.value()
                    elif err.code() == KafkaError._PARTITION_EOF:
                        done = True
                    else:
                        log.warning("reading progress partition %d: %s", partition, err)
                if done:
                    break
            else:
                raise RecoveryError(f"cannot read progress partition {partition} in time")
            if latest is not None:
                try:
                    return codec.decode(latest)
                except codec.ProgressFormatError as exc:
                    log.error("progress record of partition %d unreadable: %s", partition, exc)
                    return None
            if start <= low:
                return None
            window *= 8
