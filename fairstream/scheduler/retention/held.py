"""Transactions left open where nobody will close them: watching the partitions we write.

A transaction's markers close it on each partition it wrote; until they come, read_committed
readers of that partition stop at its first record (the partition's last stable offset).
Markers can be lost: a single broker's controlled shutdown logged a commit complete and
dropped them (see ``trim``). The partition then stays held until the same producer id writes
there again (a marker of a later transaction of the id closes it), which an instance that got
other partitions, or left, may never do: in the soak an egress partition and the group's
offsets were held for minutes, workers and recovery waiting behind them.

No instance may close such a transaction for the producer that wrote it. It cannot be done
without a visible record, and how it must end is not known here. The coordinator decided
commit or abort, and either choice made blindly can lose records: an abort if a later
commit of the producer already committed the transaction's offsets, a commit if the
transaction was aborted. So this watch makes it seen.

Every round of the trim thread it reads the last stable offset and the end of every
partition of the topics the instance writes (egress, dead letters, progress, holding). A
partition whose last stable offset stood still behind its end for ``patience`` seconds is
held:
- it is logged once per hold, with the commands that find and end it;
- it is counted (``fairstream_held_output_partitions``);
- ``/readyz`` says ``degraded: held-output`` while any partition is held.

Threads: ``HeldWatch`` is pure (the caller's clock); ``HeldReader.round`` runs on the trim
thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from fairstream.adapters.admin import latest_offsets
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Conditions

__all__ = ["HeldReader", "HeldWatch", "held_patience"]

log = logging.getLogger("fairstream.held")

TOPICS_EVERY = 60.0  # seconds between two reads of the topics' partition counts
TIMEOUT = 10.0  # seconds an offsets request may take

Key = tuple[str, int]  # topic, partition


def held_patience(transaction_timeout: float) -> float:
    """How long a last stable offset may stand behind its end before it counts as held. An
    open transaction, a live instance's or a crashed one's, holds it at most the transaction
    timeout (then the coordinator aborts it). Instances configured with longer timeouts than
    this one hold longer, so three timeouts, and never under 30 s."""
    return max(30.0, 3 * transaction_timeout)


class HeldWatch:
    """Which partitions are held: behind their end, at the same last stable offset, for
    ``patience`` seconds. Each hold (a partition at one last stable offset) is reported once:
    when it joins ``held``, which it leaves as soon as that offset moves."""

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self._since: dict[Key, tuple[int, float]] = {}  # last stable offset, since when
        self.held: set[Key] = set()

    def observe(self, now: float, stable: Mapping[Key, int], ends: Mapping[Key, int]) -> list[Key]:
        """The partitions that became held with this reading."""
        new: list[Key] = []
        for gone in [k for k in self._since if k not in ends]:  # a topic deleted, say
            del self._since[gone]
        self.held &= ends.keys()
        for key, end in ends.items():
            lso = stable.get(key)
            if lso is None or lso >= end:
                self._since.pop(key, None)
                self.held.discard(key)
                continue
            first = self._since.get(key)
            if first is None or first[0] != lso:
                self._since[key] = (lso, now)
                self.held.discard(key)
                continue
            if now - first[1] >= self.patience and key not in self.held:
                self.held.add(key)
                new.append(key)
        return new


class HeldReader:
    """Reads the offsets for ``HeldWatch`` and says what it finds (the trim thread)."""

    def __init__(
        self,
        topics: tuple[str, ...],
        patience: float,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        conditions: Conditions | None = None,
    ) -> None:
        self.topics = topics
        self._conditions = conditions  # /readyz: degraded while a partition is held
        self.watch = HeldWatch(patience)
        self.metrics = metrics
        self._clock = clock
        self._partitions: list[TopicPartition] = []
        self._partitions_read = -TOPICS_EVERY

    def round(self, admin: AdminClient) -> None:
        now = self._clock()
        if now - self._partitions_read >= TOPICS_EVERY:
            self._partitions = self._read_partitions(admin)
            self._partitions_read = now
        if not self._partitions:
            return
        try:
            ends = latest_offsets(admin, self._partitions, IsolationLevel.READ_UNCOMMITTED, TIMEOUT)
            stable = latest_offsets(admin, self._partitions, IsolationLevel.READ_COMMITTED, TIMEOUT)
        except (KafkaException, TimeoutError) as exc:
            log.info("reading the last stable offsets of the topics written: %s", exc)
            return
        new = self.watch.observe(now, stable, ends)
        held = self.watch.held
        self.metrics.held_output.set(len(held))
        if self._conditions is not None:
            if held:
                where = ", ".join(f"{t}[{p}] at {stable[(t, p)]}" for t, p in sorted(held))
                self._conditions.set(
                    "held-output",
                    f"partitions held by a transaction left open, read_committed readers "
                    f"waiting: {where}",
                )
            else:
                self._conditions.clear("held-output")
        for key in new:
            self._report(key, stable[key], ends[key])

    def _report(self, key: Key, stable: int, end: int) -> None:
        topic, partition = key
        log.error(
            "%s partition %d: read_committed readers have stood at offset %d for %.0f s, %d "
            "records short of its end: a transaction is open there that no coordinator will "
            "close (its markers were lost, as a broker's controlled shutdown was seen to do). "
            "It closes when the producer that wrote it writes to this partition again. "
            "Otherwise find its producer with kafka-transactions.sh --bootstrap-server "
            "<servers> describe-producers --topic %s --partition %d. Check whether its "
            "offsets on the group were committed since: aborting it (kafka-transactions.sh "
            "abort --topic %s --partition %d --start-offset %d) drops records whose offsets "
            "were committed.",
            topic,
            partition,
            stable,
            self.watch.patience,
            end - stable,
            topic,
            partition,
            topic,
            partition,
            stable,
        )

    def _read_partitions(self, admin: AdminClient) -> list[TopicPartition]:
        found: list[TopicPartition] = []
        try:
            metadata: Any = admin.list_topics(timeout=TIMEOUT)
        except KafkaException as exc:
            log.info("reading the partitions of the topics written: %s", exc)
            return self._partitions
        for topic in self.topics:
            info = metadata.topics.get(topic)
            if info is not None and info.error is None:
                found.extend(TopicPartition(topic, p) for p in sorted(info.partitions))
        return found
