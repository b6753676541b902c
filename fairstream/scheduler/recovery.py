"""Recovery: where each ingest partition resumes, from what the last transaction committed.

The consumer group's committed offset of an ingest partition is its low-water mark; the
offset's metadata is the commit token of the transaction that wrote it, and that transaction
also wrote a progress snapshot carrying the same token to the partition's progress-topic
partition: one or more chunks (``progress.encode_chunks``), all in that transaction (the
mark, the settled ranges above it, the holding log's, the budgets' spend). Recovery reads
the offset, then every chunk of that token (a set with a chunk missing is not used), then
the ingest thread reads the log again from the mark, and the holding log from its own mark,
and the emitter skips the settled ranges of each. Each partition's recovered progress comes
back under two keys: the partition (its ingest log) and ``holding_id(partition)`` (its
holding log, a ``HoldingProgress`` with the parked counts).

Both reads wait for transactions still open: the committed offsets are fetched with
``require_stable`` (librdkafka does under ``isolation.level=read_committed``, KIP-447), so a
crashed owner's unfinished transaction is resolved first, and the progress record is read
with read_committed.

An offset is trusted only with its snapshot. A broker can serve an aborted transaction's
offsets as committed: on Apache Kafka 3.7.2, a scheduler killed (-9) with a transaction
open had its offsets served after the broker wrote that transaction's abort marker, and the
records they covered were never on egress (found by the repeated kill -9 test). Such an
offset's snapshot was aborted with the rest. So when the progress partition holds no open
transaction and no complete snapshot of the offset's token, the offset is not believed:
recovery resumes from the latest committed snapshot (its mark, ranges and holding log), the
last transaction that did commit, and says so. (With no snapshot at all, or an offset
written before every commit wrote one, the offset is all there is.)

Caller: the ingest thread, inside the group's assignment callback and on a rewind.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from fairstream.config.topics import holding_topic, progress_topic
from fairstream.errors import Error
from fairstream.scheduler import progress as codec
from fairstream.scheduler.consumers import LazyConsumer
from fairstream.scheduler.progress import HoldingProgress, PartitionProgress, Snapshot

log = logging.getLogger("fairstream.recovery")

TOKEN_WAIT = 10.0  # seconds to wait for a progress record matching the committed token
WINDOW = 64  # progress records read back first, per partition (then 8 times more, and so on)


class RecoveryError(Error):
    """The committed progress could not be read within the deadline."""


def watermarks(consumer: Consumer, tp: TopicPartition, deadline: float) -> tuple[int, int]:
    """``tp``'s low and high watermarks, asked again while the broker answers with a
    retriable error (a topic just created has no leader yet: NOT_LEADER_FOR_PARTITION) until
    ``deadline`` (monotonic), then ``RecoveryError``."""
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            retriable = isinstance(err, KafkaError) and (
                err.retriable() or err.code() in _NO_LEADER_YET
            )
            if not retriable or time.monotonic() >= deadline:
                raise RecoveryError(
                    f"cannot read the offsets of {tp.topic} [{tp.partition}]: {exc}"
                ) from exc
            log.info("waiting for %s [%d]: %s", tp.topic, tp.partition, exc)
            time.sleep(0.2)


# What a partition without an elected leader answers (a topic just created, a broker
# restarting): it passes. librdkafka answers a partition whose leader moves to another node
# with "Local: Unknown partition" until its metadata catches up (seen in the soak on a
# cluster of three, one node restarting).
_NO_LEADER_YET = frozenset(
    {
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)


def holding_id(partition: int) -> int:
    """The key under which the holding log of ingest ``partition`` is tracked (progress,
    handoff queue, reader): ``~partition``, negative, so it never clashes with a partition,
    and ``holding_id(holding_id(p)) == p``."""
    return ~partition


class Recovery:
    """Reads committed marks (through the group consumer) and progress records."""

    def __init__(self, config: dict[str, Any], ingest_topic: str, app_id: str) -> None:
        self.ingest_topic = ingest_topic
        self.topic = progress_topic(app_id)
        self.holding = holding_topic(app_id)
        self._reader = LazyConsumer(
            config,
            f"{self.topic}.reader",
            {
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
            },
        )

    def _progress_reader(self) -> Consumer:
        return self._reader.get()

    def close(self) -> None:
        self._reader.close()

    def recover(
        self, consumer: Consumer, partitions: list[int], timeout: float = 120.0
    ) -> tuple[dict[int, PartitionProgress], int]:
        """Each partition's progress, and how many unsettled records retention deleted.

        ``consumer`` is the group member (its committed offsets are the marks).
        """
        deadline = time.monotonic() + timeout
        marks = self._committed(consumer, partitions, deadline)
        found = self._found(
            {partition: token for partition, (_, token) in marks.items() if token}, deadline
        )
        recovered: dict[int, PartitionProgress] = {}
        lost = 0
        for partition in partitions:
            mark, token = marks[partition]
            low, _high = watermarks(
                consumer, TopicPartition(self.ingest_topic, partition), deadline
            )
            if mark is None:
                mark = low  # never committed: everything still in the log is unsettled
            snapshot = Snapshot("", mark, [])
            if token:
                snapshot = found.get(partition) or self._snapshot(partition, token, mark, deadline)
                if snapshot.token != token and snapshot.token and snapshot.lwm < mark:
                    # Not the offset's own: that offset's transaction never committed.
                    mark = snapshot.lwm
            ranges = snapshot.ranges
            if low > mark:
                lost += self._deleted(partition, "ingest", low, mark, ranges)
                ranges = [(max(s, low), e) for s, e in ranges if e > low]
                mark = low
            recovered[partition] = PartitionProgress(mark, ranges)
            recovered[partition].budgets = snapshot.budgets  # the spend committed with it
            recovered[holding_id(partition)] = self._holding(
                consumer, partition, snapshot, deadline
            )
        return recovered, lost

    def _holding(
        self, consumer: Consumer, partition: int, snapshot: Snapshot, deadline: float
    ) -> HoldingProgress:
        """The holding log's progress: its mark, settled ranges and parked counts as the
        snapshot has them (from the log's start when there is none)."""
        low, _high = watermarks(consumer, TopicPartition(self.holding, partition), deadline)
        mark, ranges = snapshot.hold_lwm, snapshot.hold_ranges
        if low > mark:
            if snapshot.parked:  # records parked and never settled were deleted
                self._deleted(partition, "holding", low, mark, ranges)
            ranges = [(max(s, low), e) for s, e in ranges if e > low]
            mark = low
        return HoldingProgress(mark, ranges, snapshot.parked)

    def _deleted(
        self, partition: int, log_name: str, low: int, mark: int, ranges: list[tuple[int, int]]
    ) -> int:
        # Retention (or someone) deleted records that were never settled.
        missing = max(0, low - mark - sum(min(e, low) - s for s, e in ranges if s < low))
        log.error(
            "%s partition %d starts at offset %d but records from %d were not settled: %d "
            "were deleted before they could be emitted (check the topic's retention)",
            log_name,
            partition,
            low,
            mark,
            missing,
        )
        return missing

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

    def _found(self, tokens: dict[int, str], deadline: float) -> dict[int, Snapshot]:
        """The snapshots of ``tokens`` (progress partition -> commit token) that the last
        ``WINDOW`` records of each partition hold complete, read in one pass over all the
        partitions at once. Every commit writes one (``checkpoint``), so this is what a
        restart finds; read one partition after another, the reads took 0.5 s of a restart
        with 12 partitions. A partition whose token is not there complete is left to
        ``_snapshot`` (a larger window, a transaction still open, or not committed)."""
        if not tokens:
            return {}
        reader = self._progress_reader()
        starts = {}
        for partition in tokens:
            low, high = watermarks(reader, TopicPartition(self.topic, partition), deadline)
            starts[partition] = max(low, high - WINDOW)
        read, _ended = self._read(starts, deadline)
        found: dict[int, Snapshot] = {}
        for partition, chunks in read.items():
            token = tokens[partition]
            mine = {chunk.index: chunk for chunk in chunks if chunk.token == token}
            snapshot = codec.assemble(mine.values())
            if snapshot is not None:
                found[partition] = snapshot
        return found

    def _read(
        self, starts: dict[int, int], deadline: float
    ) -> tuple[dict[int, list[codec.Chunk]], dict[int, int]]:
        """Each progress partition's chunks from its offset in ``starts`` to where
        read_committed ends (the last stable offset: the first open transaction, else the
        high watermark), in offset order, read in one pass over them all; and the offset
        each ended at. Tombstones (chunks no longer used) are passed over, and so is a
        record that cannot be decoded, with an error in the log."""
        reader = self._progress_reader()
        reader.assign([TopicPartition(self.topic, p, start) for p, start in starts.items()])
        chunks: dict[int, list[codec.Chunk]] = {partition: [] for partition in starts}
        ended: dict[int, int] = {}
        while len(ended) < len(starts):
            if time.monotonic() >= deadline:
                waiting = sorted(set(starts) - set(ended))
                raise RecoveryError(f"cannot read progress partitions {waiting} in time")
            # A short wait: consume() waits its whole timeout unless 1,000 records come, and
            # the windows hold far fewer; a 1 s wait here cost every partition a second of
            # recovery (12 s to ready with 12 partitions).
            for msg in reader.consume(num_messages=1000, timeout=0.05):
                at, err = msg.partition(), msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    log.warning("reading the progress partitions: %s", err)
                    continue
                if at is None or at not in chunks:
                    continue
                if err is not None:  # the end
                    offset = msg.offset()
                    ended[at] = offset if offset is not None else -1
                    continue
                value = msg.value()
                if value is None:
                    continue  # a tombstone of a chunk no longer used
                try:
                    chunks[at].append(codec.decode_chunk(value))
                except codec.ProgressFormatError as exc:
                    log.error("progress record of partition %d unreadable: %s", at, exc)
        return chunks, ended

    def _snapshot(self, partition: int, token: str, mark: int, deadline: float) -> Snapshot:
        """The progress written with ``token`` (all of its chunks); else, once the partition
        holds no open transaction (or after ``TOKEN_WAIT``), the latest complete snapshot
        of another token, whose mark the caller resumes from when it is lower."""
        token_deadline = min(deadline, time.monotonic() + TOKEN_WAIT)
        while True:
            wanted, latest, settled = self._latest(partition, token, deadline)
            if wanted is not None:
                return wanted
            if settled or time.monotonic() >= token_deadline:
                # Nothing open on the partition (or too long): the offset's transaction did
                # not commit its snapshot, so it did not commit (see the module doc).
                log.warning(
                    "ingest partition %d: the committed offset %d (commit token %r) has no "
                    "committed progress record%s; resuming from %s",
                    partition,
                    mark,
                    token,
                    "" if settled else f" within {TOKEN_WAIT:.0f} s",
                    f"the latest one (token {latest.token!r}, offset {latest.lwm}): the "
                    "broker served the offset of a transaction that was not committed"
                    if latest is not None
                    else f"offset {mark}, with no settled ranges",
                )
                return latest if latest is not None else Snapshot("", mark, [])
            # The transaction's markers reach the progress partition a moment after its
            # offsets are committed: look again shortly.
            time.sleep(0.05)

    def _latest(
        self, partition: int, token: str, deadline: float
    ) -> tuple[Snapshot | None, Snapshot | None, bool]:
        """The snapshot of ``token`` if the partition holds all its chunks, the latest
        complete snapshot of any token, and whether the partition was read to its high
        watermark (read_committed stops at the first open transaction: True means none is
        open, so whatever was committed is there). Reads back from the end in growing
        windows."""
        reader = self._progress_reader()
        tp = TopicPartition(self.topic, partition)
        low, high = watermarks(reader, tp, deadline)
        window = WINDOW
        while True:
            start = max(low, high - window)
            read, ends = self._read({partition: start}, deadline)
            ended = ends[partition]  # where read_committed reached the end
            chunks: dict[str, dict[int, codec.Chunk]] = {}
            order: list[str] = []  # tokens by their last appearance
            for chunk in read[partition]:
                chunks.setdefault(chunk.token, {})[chunk.index] = chunk
                if order and order[-1] == chunk.token:
                    continue
                if chunk.token in order:
                    order.remove(chunk.token)
                order.append(chunk.token)
            wanted = codec.assemble(chunks.get(token, {}).values())
            latest = next(
                (s for t in reversed(order) if (s := codec.assemble(chunks[t].values()))),
                None,
            )
            # Read further back only for chunks of the token that the window cut off, or
            # while the window holds no complete record at all.
            partial = token in chunks and wanted is None
            if wanted is not None or start <= low or (latest is not None and not partial):
                if wanted is not None:
                    return wanted, latest, True
                # Only a token not found needs it: the high watermark asked again (records
                # may have come since the first ask), one more round trip per partition.
                settled = ended >= 0 and ended >= watermarks(reader, tp, deadline)[1]
                return wanted, latest, settled
            window *= 8
