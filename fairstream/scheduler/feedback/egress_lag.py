"""Credit from the egress consumer group's lag (``--egress-group``), for workers that send
no feedback.

A plain consumer of egress that commits its offsets (a confluent-kafka loop, a Faust app
without the SDK) reports nothing on the feedback topic, so the concurrency limit found from
the feedback (``fairstream.core.credit``) never applies, and workers slower than
``--rate`` let the backlog escape into egress, whose partitions are FIFO: a quiet tenant
waits behind a noisy one there. With ``--egress-group`` this thread reads that group's
committed offsets and the egress partitions' end offsets every ``INTERVAL`` seconds (one
AdminClient: ListOffsets and OffsetFetch) and turns them into a bound on what may wait
downstream (``fairstream.core.lagbound``: ``OffsetLag`` counts the lag, ``LagBound`` the
bound from the group's progress, Little's law over a short horizon).

Each sample reaches the emitter as a ``LagChange``: the bound becomes the group's
concurrency limit (``Pacing.lagged``: the lesser of it, a fixed ``--max-concurrency`` and
the one found from the feedback), and the lag frees the slots of what the group consumed:
of the slots this instance took before the sample (``at``), all but its part of the lag
are given back, oldest first. Slots taken after ``at`` are not in the sample's end offsets
yet, so they stay. The emitter refills up to the bound between samples, and no further:
lag plus released stays under it. Several instances: each holds its part of the bound
(by owned ingest partitions, as the concurrency limit is split) and takes that part of the
group's lag as its own.

Unknown is unlimited: when the group has committed no offset of egress (absent, or not
yet), or the offsets could not be read for ``STALE`` seconds, the bound is None and
``fairstream_egress_lag_bound`` says -1. A read that fails is counted
(``fairstream_egress_lag_errors_total``) and the last bound holds meanwhile.

Caller: ``SchedulerService`` runs ``run`` on a thread (restarted on failure). Affects: the
emitter, through the handoff (``LagChange``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from fairstream.adapters.admin import LATEST
from fairstream.core import RecordClock
from fairstream.core.lagbound import LagBound, LagSample, OffsetLag
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import LagChange
from fairstream.scheduler.metrics import Metrics

__all__ = ["EgressLagReader", "LagChange"]

log = logging.getLogger("fairstream.egress_lag")

# Seconds between two samples: the emitter frees slots once per sample, so what is released
# trails what the group consumed by about this much (plus a read, a commit and a fetch). At
# 0.1 s, a bound short enough to keep the quiet tenants' wait under 0.5 s (LagBound's
# horizon 0.25 s) left the consumers idle 9% of the time; at 0.05 s, 2-3% with 0.15 s.
INTERVAL = 0.05
STALE = 5.0  # seconds without a sample read after which the bound is dropped (unlimited)
# Seconds before a sample's reads that a released record is taken to be in its end
# offsets: a record reaches the partition leader a linger and a round trip after it was
# produced, and one not there yet must keep its slot.
MARGIN = 0.1
TIMEOUT = 5.0  # seconds an admin request may take
TOPIC_EVERY = 30.0  # seconds between two reads of the egress topic's partitions


class EgressLagReader:
    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        group: str,
        handoff: Handoff,
        metrics: Metrics,
        *,
        clock: RecordClock,
        bound: LagBound | None = None,
    ) -> None:
        """``config``: the librdkafka connection settings; ``topic``: egress; ``group``:
        the consumer group that reads it; ``clock``: the emitter's (slots are taken on
        it); ``bound``: the policy (default ``LagBound`` on ``clock``)."""
        self.topic = topic
        self.group = group
        self.handoff = handoff
        self.metrics = metrics
        self.clock = clock
        self.bound = bound or LagBound(clock)
        self._config = dict(config)
        self._stopping = threading.Event()
        self._offsets = OffsetLag()
        self._partitions: list[int] = []
        self._partitions_read = -TOPIC_EVERY
        self._last_read = clock.now()
        self._published: LagChange | None = None

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        """Sample every ``INTERVAL`` until stopped. An error ends it with the exception; the
        service's supervisor runs it again (``supervise``) with a new AdminClient."""
        admin = AdminClient(self._config)
        log.info("bounding egress by the lag of consumer group %r on %s", self.group, self.topic)
        while not self._stopping.wait(INTERVAL):
            self.sample(admin)

    def sample(self, admin: AdminClient) -> LagChange | None:
        """One sample, handed to the emitter when there is something to apply; the change
        handed over, if any."""
        now = self.clock.now()
        at = now - MARGIN  # before the reads: see MARGIN
        try:
            sample = self._read(admin, now)
        except KafkaException as exc:
            self.metrics.egress_lag_errors.inc()
            log.info("reading the lag of %r on %s: %s", self.group, self.topic, exc)
            if now - self._last_read < STALE:
                return None  # the last bound holds
            self._offsets.reset()
            sample = None
        else:
            self._last_read = now
        bound = self.bound.observe(sample, now)
        lag = None if sample is None else sample.lag
        self.metrics.egress_lag.set(-1 if lag is None else lag)
        self.metrics.egress_lag_bound.set(-1 if bound is None else bound)
        change = LagChange(bound, lag, at)
        last = self._published
        if lag is None and last is not None and last.bound is None:
            return None  # unknown and unlimited already: nothing to free or limit
        if last is None and bound is None:
            return None  # the emitter starts unlimited
        self._published = change
        self.handoff.put(change)
        return change

    def _read(self, admin: AdminClient, now: float) -> LagSample | None:
        if not self._partitions or now - self._partitions_read >= TOPIC_EVERY:
            self._partitions = self._read_partitions(admin)
            self._partitions_read = now
        if not self._partitions:
            return None  # no egress topic yet
        tps = [TopicPartition(self.topic, p) for p in self._partitions]
        ends_asked = admin.list_offsets(
            dict.fromkeys(tps, LATEST),
            isolation_level=IsolationLevel.READ_UNCOMMITTED,  # what was released, committed or not
            request_timeout=TIMEOUT,
        )
        committed_asked = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(self.group, tps)], request_timeout=TIMEOUT
        )
        ends = {tp.partition: f.result(timeout=TIMEOUT).offset for tp, f in ends_asked.items()}
        answer = committed_asked[self.group].result(timeout=TIMEOUT)
        committed = {
            tp.partition: tp.offset
            for tp in answer.topic_partitions or []
            if tp.error is None and tp.offset >= 0
        }
        return self._offsets.observe(ends, committed)

    def _read_partitions(self, admin: AdminClient) -> list[int]:
        metadata = admin.list_topics(self.topic, timeout=TIMEOUT)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None:
            return []
        return sorted(topic.partitions)
