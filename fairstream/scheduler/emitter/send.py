"""Sending picked records to egress: the emitter's per-record path.

``emit_batch`` asks the emission rule (``fairstream.core.emission``) for up to
``EMIT_BATCH`` records and produces each into the open transaction, settling its offset:
the common case (payload held, transaction open, record fits) inline, with local names, as
it runs once per egress record; anything else (a payload to read back from the log, a
transaction to begin, a record too large, a lost one) through ``sendable`` first. Either way
the record is produced, settled and tallied (slot, cost, dwell) by the same lines.

Under a rate or cost limit a record is stamped (``fairstream-scheduled-ms``) with its slot
on the emission rule's virtual schedule (``EmissionRule.stamp_ms``): after a late moment
the missed slots are caught up back to back, each with its own stamp.

With ``--egress-spread backlogged`` under a rate (the records carry their start moment),
a backlogged tenant's record goes to the egress partition with the fewest records
outstanding (by the concurrency slots' request ids, pruned of the settled ones every
``PRUNE_EVERY``), then with the fewest recent releases, not only to its key's
(``fairstream.core.spread``): one noisy tenant then keeps every worker busy, not just the
one owning its key's partition. The count of egress partitions comes from the producer's
metadata, asked once. A quiet tenant's records, and every record without a rate, keep
their key's partition.

``prepare`` runs while a commit is in flight (the emitter thread would otherwise only wait
for the broker): without a rate limit it picks and stamps the next records of the next
transaction. Nothing it does is visible to the commit: the picks leave the core, but no
offset is settled until ``emit_batch`` produces them, right after the commit and before
anything else (a revocation, a purge, a tenant's pause) is applied. So what arrives during
a commit applies after at most one commit's worth of prepared records, ``PREPARE_MAX`` or
``--max-in-flight``, went out: a few tens of milliseconds of emission. An aborted commit
forgets them with the rest (the emitter rewinds).

Caller: the emitter thread (``Emitter``), the only owner of the core and the producer.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from functools import lru_cache
from typing import Any

from confluent_kafka import KafkaException

from fairstream import wire
from fairstream.config import Settings
from fairstream.core import Pick, RecordClock
from fairstream.core.budget import format_budget, scope_name
from fairstream.core.emission import EmissionRule, Exhausted, Expire, Wait
from fairstream.core.spread import EgressSpread
from fairstream.scheduler.emitter.backlog import Backlog
from fairstream.scheduler.emitter.checkpoint import Checkpoint
from fairstream.scheduler.emitter.egress import FOOTPRINT, Stamper, footprint
from fairstream.scheduler.emitter.fetch import Gone, PayloadFetcher
from fairstream.scheduler.emitter.transaction import Transaction
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.progress import PartitionProgress
from fairstream.scheduler.recent import RecentRequests
from fairstream.scheduler.records import Parsed, Prepared, held_headers, held_key, held_value, new
from fairstream.wire.dead_letter import HeaderList, budget_detail, expired_detail, lost_detail
from fairstream.wire.partition import partition_of_key

__all__ = ["EMIT_BATCH", "STALE_MS", "Sender", "home_partition", "request_id"]

log = logging.getLogger("fairstream.scheduler")

EMIT_BATCH = 256  # picks between two looks at the handoff queue
PREPARE_CHUNK = 64  # picks prepared between two looks at the commit in flight
PREPARE_MAX = 8192  # records prepared during one commit at most (and --max-in-flight)
_REQUEST_ID = wire.REQUEST_ID
STALE_MS = 1000  # a prepared record older than this (a commit retried) is stamped again
SPREAD_RETRY = 10.0  # seconds between two asks for the egress partitions, while unknown
ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: its partitioner chooses
PRUNE_EVERY = 0.02  # seconds between two prunes of the settled from the spread's outstanding


class Sender:
    """Picks records from the rule and produces them to egress, settling their offsets;
    owns the stamper and the records prepared during a commit.

    Holds the rule (its ``core``), the emitter's progress per log (a live dict), the
    backlog (payload bytes and dead letters), the checkpoint (the open transaction's
    tallies), the fetcher and the clock. Caller: the emitter thread.
    """

    def __init__(
        self,
        settings: Settings,
        rule: EmissionRule[Parsed],
        progress: dict[int, PartitionProgress],
        backlog: Backlog,
        checkpoint: Checkpoint,
        fetcher: PayloadFetcher,
        metrics: Metrics,
        clock: RecordClock,
        *,
        egress_limit: int,
        recent: RecentRequests | None = None,
    ) -> None:
        self.rule = rule
        self.progress = progress
        self.backlog = backlog
        self.checkpoint = checkpoint
        self.fetcher = fetcher
        self.metrics = metrics
        self.clock = clock
        self.egress_topic = settings.topics.egress
        self.max_in_flight = settings.max_in_flight
        # Records released on a rate's (or cost rate's) schedule: workers pace their calls.
        paced = settings.rate is not None or settings.cost_rate is not None
        self.stamper = Stamper(settings.topics.ingest, egress_limit, recent, paced=paced)
        # --egress-spread backlogged: only under a rate, where records carry their start
        # moment and paced workers keep a tenant's start order across partitions.
        self.spreads = paced and settings.egress_spread == "backlogged"
        self.spread: EgressSpread | None = None  # made once the egress partitions are known
        self._spread_asked = -math.inf  # when the producer was last asked for them
        self._pruned = -math.inf  # when the spread's outstanding records were last pruned
        # Picked and stamped while a commit was in flight, sent right after it.
        self.prepared: deque[Prepared] = deque()
        self.wait = 0.0  # seconds the rule last said to wait
        self.paced = False  # the last batch ended waiting on the rule (not for records)

    def emit_batch(self, txn: Transaction) -> int:  # noqa: PLR0915 (flat hot path)
        """Send up to EMIT_BATCH records into ``txn``, those prepared during the last commit
        first; how many it picked (sent or expired). When the rule says wait, ``wait`` tells
        how long and ``paced`` whether on the rate, a cap or a hold (not for records)."""
        rule, prepared = self.rule, self.prepared
        if prepared and not txn.open:
            txn.begin()
        direct = rule.direct()  # no limits: the core is asked directly (``EmissionRule.direct``)
        started = rule.started if rule.tracking else None  # concurrency slots, by request id
        decide, pick_next = rule.next, rule.core.pick
        stamp_headers = self.stamper.headers
        epoch_ms = self.clock.epoch_ms  # the wall clock, for deadlines and stamps
        produce, topic, progress = txn.producer.produce, self.egress_topic, self.progress
        tally = self.checkpoint.tally()  # the open transaction's, live
        tallied, dwelt = tally.tenants.append, tally.seconds.append
        max_records = self.max_in_flight
        spread = self._spread(txn) if self.spreads else None
        if spread is not None:
            choose, count, now_s = spread.choose, spread.partitions, self.clock.now
            waiting, holding = rule.core.backlog, rule.inflight.of
            if now_s() >= self._pruned + PRUNE_EVERY:  # O(outstanding): not every batch
                self._pruned = now_s()
                spread.prune(rule.inflight)  # settled or leased out: off their partitions
        picked = freed = cost_sum = inline = 0
        self.paced = False
        for _ in range(EMIT_BATCH):
            step: Any
            if prepared:
                step, stamp, key, value, headers = prepared.popleft()
                now_ms = epoch_ms()
                fresh = False
            else:
                now_ms = stamp = epoch_ms()  # for the deadline, and the scheduled-ms header
                step = pick_next() if direct else None
                if step is None:
                    step = decide(stamp)
                    if type(step) is not Pick:
                        if self._waits(step, stamp):
                            break
                        picked += 1
                        continue
                    stamp = rule.stamp_ms  # its slot: behind now when catching up
                fresh = True
            picked += 1
            tenant, entry, cost = step
            partition, offset, _, _, deadline, enqueued, msg, _ = entry  # the order is Parsed's
            # Prepared, the commit took longer than it had left? (The rule's picks passed.)
            if deadline is not None and now_ms > deadline:
                self.expire(Expire(*step), now_ms)
                continue
            if fresh:
                headers = None
                if msg is not None and txn.open:
                    if type(msg) is bytes:  # its value alone (``records.Held``)
                        key, value, own = tenant.encode(), msg, None
                    elif type(msg) is tuple:  # its value and headers (``records.Headed``)
                        key, value, own = tenant.encode(), msg[0], msg[1]
                    else:
                        key, value, own = msg.key(), msg.value(), msg.headers()
                    headers = stamp_headers(own, key, value, partition, offset, enqueued, stamp)
            elif headers is None or now_ms - stamp > STALE_MS:
                headers, stamp = None, now_ms  # read back, too large, or stamped long ago
            if headers is not None:
                freed += FOOTPRINT + len(msg) if type(msg) is bytes else footprint(msg)
            else:  # read back, a transaction to begin, or too large
                sendable = self.sendable(txn, step, stamp)
                if sendable is None:  # a dead letter now, or back in its tenant's queue
                    if txn.records >= max_records:
                        break
                    continue
                key, value, headers = sendable
            to = rid = None
            if started is not None:
                rid = request_id(headers, partition, offset)
            if spread is not None:
                # Backlogged: records of its own wait, or are out and not yet settled.
                more = holding(tenant) > 0 or waiting(tenant)[0] > 0
                # A tenant's records of one stamp (a burst) stay together.
                to = choose(
                    home_partition(key, count), more, now_s(), rid, tenant=tenant, stamp=stamp
                )
            try:
                # Every argument by position (partition, callback, on_delivery, timestamp,
                # headers; None and 0 are the client's defaults): confluent-kafka looks a
                # keyword up by building a str for each name before it, 0.4 us a record.
                where = ANY_PARTITION if to is None else to
                produce(topic, value, key, where, None, None, 0, headers)  # type: ignore[arg-type]
                txn.records += 1
                inline += 1
            except (BufferError, KafkaException):
                txn.produce(topic, value, key, headers, partition=to)  # retries, or says why
            progress[partition].settle(offset)
            if started is not None:
                started(tenant, rid)
            cost_sum += cost
            tallied(tenant)
            dwelt((stamp - enqueued) / 1000 if stamp > enqueued else 0.0)
            if txn.records >= max_records:
                break
        self._batch_done(txn, freed, cost_sum, inline)
        return picked

    def _spread(self, txn: Transaction) -> EgressSpread | None:
        """The egress partition chooser, made once the producer's metadata tells how many
        partitions egress has (asked at most every ``SPREAD_RETRY`` seconds until then); None
        while it does not say, or with a single partition (nothing to spread over)."""
        if self.spread is not None:
            return self.spread
        now = self.clock.now()
        if now - self._spread_asked < SPREAD_RETRY:
            return None
        self._spread_asked = now
        count = txn.partitions(self.egress_topic)
        if count is None:
            log.warning(
                "--egress-spread: the partitions of %s are unknown; records keep their key's "
                "partition for now",
                self.egress_topic,
            )
            return None
        if count == 1:
            self.spreads = False  # one partition: every record's is the same
            return None
        self.spread = EgressSpread(count)
        log.info("--egress-spread backlogged: over %d partitions of %s", count, self.egress_topic)
        return self.spread

    def _batch_done(self, txn: Transaction, freed: int, cost: int, inline: int) -> None:
        """A batch's tallies: ``freed`` payload bytes left the core, records of ``cost`` went
        out, ``inline`` of them produced past ``Transaction.produce``."""
        self.backlog.release(freed)
        self.checkpoint.emitted(cost)
        txn.tally(inline)  # counted for its polls

    def _waits(self, step: Expire[Parsed] | Exhausted[Parsed] | Wait, stamp: int) -> bool:
        """What the rule said instead of a pick: whether to wait (``wait``, ``paced``), else
        the expired pick, or the one its budget does not let go, made a dead letter."""
        if isinstance(step, Wait):
            self.wait = step.seconds
            self.paced = step.seconds != math.inf
            return True
        if isinstance(step, Exhausted):
            self.exhausted(step)
        else:
            self.expire(step, stamp)
        return False

    def exhausted(self, step: Exhausted[Parsed]) -> None:
        """A pick its budget does not let go, under a policy that dead-letters it
        (``budget-exhausted``)."""
        tenant, entry, cost, refusal = step
        if entry.msg is not None:
            self.backlog.free(entry.msg)
        detail = budget_detail(
            tenant,
            scope_name(refusal.scope),
            format_budget(refusal.budget),
            cost,
            refusal.remaining,
            refusal.fits_at_ms,
        )
        self.metrics.budget_refused.labels("dead-letter").inc()
        self.backlog.letter(tenant, entry, wire.BUDGET_EXHAUSTED, detail)

    def prepare(self) -> bool:
        """Pick and stamp up to PREPARE_CHUNK more records for the next transaction; whether
        more may be prepared. Only while the rule comes down to the fair pick (no rate limit,
        hold or pause to end) and no dead letter waits. Caller: the emitter, while its commit
        is in flight (``Transaction.commit``'s ``meanwhile``)."""
        prepared = self.prepared
        room = min(PREPARE_MAX, self.max_in_flight) - len(prepared)
        if room <= 0 or self.backlog.letters or not self.rule.direct():
            return False
        pick_next, stamp_headers = self.rule.core.pick, self.stamper.headers
        epoch_ms = self.clock.epoch_ms
        for _ in range(min(PREPARE_CHUNK, room)):
            stamp = epoch_ms()
            step = pick_next()
            if step is None:
                return False
            entry = step.item
            deadline = entry.deadline
            if deadline is not None and stamp > deadline:
                self.expire(Expire(*step), stamp)
                continue
            msg = entry.msg
            if msg is None:  # read back after the commit
                prepared.append(Prepared(step, stamp, None, None, None))
                return False
            key, value = held_key(msg, step.tenant), held_value(msg)
            headers = stamp_headers(
                held_headers(msg), key, value, entry.partition, entry.offset, entry.enqueued, stamp
            )
            prepared.append(new(Prepared, (step, stamp, key, value, headers)))
        return True

    def unread(self, pick: Pick[Parsed]) -> None:
        """A pick whose payload cannot be read back now (the broker is slow or away; the log
        still holds it): back to the head of its tenant's queue, and the tenant paused until
        the fetcher tries its partition again, so that its order holds and the others go on.
        Never a ``lost`` dead letter: that needs the log start past the record (``fetch``)."""
        tenant, entry, cost = pick
        self.rule.core.push_front(tenant, entry, cost)
        self.rule.refund(tenant, entry, cost, self.clock.epoch_ms())  # charged when it goes
        self.rule.pause(tenant, max(0.01, self.fetcher.retry_in(entry.partition)))

    def expire(self, step: Expire[Parsed], stamp: int) -> None:
        """A pick past its deadline becomes a dead letter (``expired``)."""
        tenant, entry, _ = step
        if entry.msg is not None:
            self.backlog.free(entry.msg)
        detail = expired_detail(tenant, entry.deadline or 0, stamp, buffered=True)
        self.backlog.letter(tenant, entry, wire.EXPIRED, detail)

    def sendable(
        self, txn: Transaction, pick: Pick[Parsed], stamp: int
    ) -> tuple[bytes | None, bytes | None, HeaderList] | None:
        """A pick's key, value and egress headers, whatever it takes: its payload read back
        from the log, the transaction begun. None when it cannot go now (back in its
        tenant's queue, ``unread``) or ever (a dead letter: lost, or too large)."""
        tenant, entry, cost = pick
        partition, offset, msg = entry.partition, entry.offset, entry.msg
        if msg is not None:
            self.backlog.free(msg)
        else:
            read = self.fetcher.get(partition, offset)
            if read is None:
                self.unread(pick)
                return None
            self.metrics.refetches.inc()
            if isinstance(read, Gone):
                detail = lost_detail(partition, offset, read.log_start)
                self.backlog.letter(tenant, entry, wire.LOST, detail)
                self.rule.refund(tenant, entry, cost, stamp)  # never sent: spends nothing
                return None
            msg = read
        key, value, own = held_key(msg, tenant), held_value(msg), held_headers(msg)
        headers = self.stamper.headers(own, key, value, partition, offset, entry.enqueued, stamp)
        if headers is None:
            detail = self.stamper.too_large(self.egress_topic)
            held = entry._replace(msg=msg)  # with its payload
            self.backlog.letter(tenant, held, wire.TOO_LARGE, detail)
            self.rule.refund(tenant, entry, cost, stamp)  # never sent: spends nothing
            return None
        txn.begin()
        return key, value, headers


def request_id(headers: HeaderList, partition: int, offset: int) -> bytes | tuple[int, int]:
    """The request id stamped in ``headers`` (what a worker's feedback names), the key of
    the record's concurrency slot; the ingest coordinates when there is none (that slot is
    then given back by its lease)."""
    for name, value in headers:
        if name == _REQUEST_ID:
            return value if value else (partition, offset)
    return (partition, offset)


@lru_cache(maxsize=65536)
def home_partition(key: bytes | None, partitions: int) -> int:
    """The egress partition a record keyed ``key`` hashes to: Kafka's murmur2, as the
    producer's ``murmur2_random`` partitioner places it (a record without a key, which the
    ingest contract does not allow, on partition 0). Cached: a tenant's key comes again and
    again, and the hash is Python."""
    if key is None:
        return 0
    return partition_of_key(key, partitions)
