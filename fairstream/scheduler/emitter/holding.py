"""Parking: a tenant whose records pin its partition's low-water mark waits in the holding
topic, so that the mark moves on and nobody else pays for it.

Why: a paused tenant, a tenant at its rate cap or a starved low-priority class leaves
unsettled records between settled ones. The low-water mark stays at the oldest of them, so
the settled ranges above it grow with every record the busy neighbours send (the progress
snapshot with them), the ingest log cannot be trimmed, and a restart reads everything above
the mark again.

How (the emitter thread, which owns the core, the progress and the transaction):

- Each ingest partition ``p`` has a *holding log*: partition ``p`` of ``<app-id>-holding``,
  tracked like a second ingest log under ``holding_id(p)`` (``~p``): a ``HoldingProgress``
  (mark, settled ranges, parked counts), a handoff queue and a reader of the ingest thread.
  Its records are the ingest records (key, value, headers, with the enqueued time as their
  timestamp), plus a ``fairstream-request-id`` header when they had none, so the egress
  record and its request id are the same as if it had gone straight.
- ``park_stranded``, before each commit: when a log of a partition (ingest or holding) has
  ``--park-ranges`` settled ranges above its mark, or (the ingest log) ``--park-span``
  offsets between its mark and what was read, and the tenant whose record is at the mark
  is *held back* (paused, waiting for its rate cap's token, or in a class below one being
  served: ``FairScheduler.held_back``), that tenant is *parked*: every record of it from
  that partition in the core (oldest first) is written to the holding log's tail in the
  open transaction and its offset settled. The mark moves on; parking goes on (tenant
  after tenant at the new mark) while the next is held back too and the log is above half
  the limits. A tenant being served is never parked: it moves the mark itself.
- A served tenant's backlog can still be interleaved with settled records (the parked
  ones): while an ingest log has twice ``--park-ranges`` ranges above its mark, the emitter
  takes no more of its records (``ahead``; they wait in the log) until the served tenant
  has drained some. That bounds the ranges, hence the snapshot and its cost per commit.
- A tenant with a parked count (records in the holding log, unsettled) stays parked: each
  new ingest record of it is parked as it is indexed (``park_new``), so all of its records
  pass through the holding log, in order. The count falls as parked records settle
  (``HoldingProgress.settle``); at zero the tenant's records go straight again.
- The holding log is read back continuously, like the ingest log: its records join the
  core (admission, expiry and purges apply then) and go to egress when their turn comes.
  It is trimmed below its own mark (``retention.trim``).
- The progress snapshot of each partition (``progress.Snapshot``) carries both marks, both
  sets of ranges and the parked counts, committed with the egress records and offsets they
  describe: after a crash, recovery resumes both logs where the last transaction left them.

Bounds and limits:

- The ranges above each mark stay near ``--park-ranges`` (plus what one commit interval
  adds), so the snapshot stays small; it is cut into chunks besides (``encode_chunks``).
- A parked tenant in the holding log can pin *its* mark in turn (another parked tenant
  drains past it): it is parked again, which rewrites its records to the holding log's
  tail. That waits until all of its parked records have been read back (else the tail
  would overtake them), and costs one write per record of its parked backlog.
- Parked records are read back and held like any backlog (``--buffer-memory``): parking
  bounds what the ingest log and the progress keep, not the memory of a paused backlog.
"""

from __future__ import annotations

import logging
from typing import Protocol

from confluent_kafka import KafkaException

from fairstream import wire
from fairstream.config import Settings
from fairstream.config.topics import holding_topic
from fairstream.core import RecordClock
from fairstream.core.emission import EmissionRule
from fairstream.scheduler.emitter.egress import DefaultIds
from fairstream.scheduler.emitter.fetch import Gone, PayloadFetcher
from fairstream.scheduler.emitter.transaction import Transaction
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.progress import HoldingProgress, PartitionProgress
from fairstream.scheduler.records import Held, Parsed, held_headers, held_key, held_value
from fairstream.scheduler.recovery import holding_id
from fairstream.wire.dead_letter import HeaderList, lost_detail

__all__ = ["Owner", "Parking"]

log = logging.getLogger("fairstream.holding")

ROUNDS = 64  # tenants parked per log and commit at most (the rest waits for the next one)
RESEARCH = 1.0  # seconds before a mark where no tenant's head was found is searched again


class Owner(Protocol):
    """What parking is part of, the backlog (``backlog``): the rule, the progress per log,
    the fetcher and the clock it shares, and where what leaves the core otherwise goes."""

    rule: EmissionRule[Parsed]
    progress: dict[int, PartitionProgress]
    fetcher: PayloadFetcher
    metrics: Metrics
    clock: RecordClock

    def free(self, msg: Held) -> None: ...

    def keep(self, tenant: str, entry: Parsed) -> None: ...

    def letter(self, tenant: str | None, entry: Parsed, reason: str, detail: str) -> None: ...


class Parking:
    """The parked tenants' moves between the core and the holding logs, and the ingest
    partitions too far ahead of their marks to read more of (``ahead``).

    Shares its owner's (the backlog's) rule, progress per log (a live dict), fetcher and
    metrics; sends lost records and freed payloads back to it. Caller: the emitter thread.
    """

    def __init__(self, settings: Settings, owner: Owner) -> None:
        self.park_ranges, self.park_span = settings.park_ranges, settings.park_span
        self.rule, self.progress, self.fetcher = owner.rule, owner.progress, owner.fetcher
        self.metrics, self.clock = owner.metrics, owner.clock
        self.sink = owner
        self.default_id = DefaultIds(settings.topics.ingest)  # of records going to hold
        self.holding_topic = holding_topic(settings.app_id)
        self.ahead: set[int] = set()  # ingest partitions not taken from for now
        # Per log, the tenant found at its mark (offset, tenant or None, when searched).
        self._at: dict[int, tuple[int, str | None, float]] = {}

    def clear(self) -> None:
        """After an abort: no partition is ahead (recovery starts again)."""
        self.ahead = set()
        self._at = {}

    def parking(self) -> dict[int, dict[str, int]]:
        """Per ingest partition with parked tenants, their parked counts (live dicts).
        Caller: ``Backlog.index``, once per batch (usually empty: one test per record)."""
        out: dict[int, dict[str, int]] = {}
        for key, prog in self.progress.items():
            if key < 0 and isinstance(prog, HoldingProgress) and prog.parked:
                out[holding_id(key)] = prog.parked
        return out

    def park_stranded(self, txn: Transaction) -> int:
        """Park the held-back tenants that pin a mark past the limits, and say which ingest
        partitions are too far ahead to read more of (``ahead``); how many records were
        parked. Caller: the emitter, before it commits."""
        limit_ranges, limit_span = self.park_ranges, self.park_span
        parked = 0
        ahead: set[int] = set()
        # Only a held-back tenant is parked; finding whose record is at a mark costs
        # O(tenants) (``_tenant_at``), so not at all when nobody can be held back.
        holds = self.rule.core.holds_any_back() or self.rule.pending is not None
        for partition in [p for p in self.progress if p >= 0]:
            for key in (partition, holding_id(partition)):
                prog = self.progress.get(key)
                if not holds or prog is None or not _over(prog, limit_ranges, limit_span):
                    continue
                before = (prog.lwm, prog.settled_above)
                for _ in range(ROUNDS):
                    tenant = self._tenant_at(key, prog.lwm)
                    # A tenant being served moves the mark itself: only one that cannot be
                    # picked now (paused, capped, a starved class) is parked.
                    if tenant is None or not self.rule.core.held_back(tenant):
                        break
                    moved = self._park(txn, partition, tenant)
                    if moved == 0:
                        break
                    parked += moved
                    if not _over(prog, limit_ranges // 2, limit_span // 2):
                        break
                if prog.lwm != before[0]:
                    log.info(
                        "%s log of partition %d: parked the tenants pinning its mark at %d (%d "
                        "settled ranges above it); the mark is now %d with %d",
                        "holding" if key < 0 else "ingest",
                        partition,
                        before[0],
                        before[1],
                        prog.lwm,
                        prog.settled_above,
                    )
            prog = self.progress[partition]
            if prog.settled_above >= 2 * limit_ranges and prog.next >= prog.replay_end:
                # The tenant at the mark is being served (else it was parked): its backlog is
                # interleaved with settled records. Read no further until it has drained some,
                # so the ranges (and the progress snapshot) stay bounded. Not while the log is
                # read again after a restart: ranges recovered above what was read are not
                # backlog, and only reading on brings the records that move the mark.
                ahead.add(partition)
        if ahead != self.ahead:
            if ahead - self.ahead:  # on and off as the served tenant drains: debug, and a gauge
                log.debug(
                    "ingest partitions %s: %d settled ranges or more above the mark; reading "
                    "waits for the mark to move",
                    sorted(ahead - self.ahead),
                    2 * limit_ranges,
                )
            self.ahead = ahead
            self.metrics.held_partitions.set(len(ahead))
        if parked:
            self.metrics.parked.inc(parked)
        self.metrics.parked_tenants.set(sum(len(p) for p in self.parking().values()))
        return parked

    def _tenant_at(self, key: int, offset: int) -> str | None:
        """The tenant whose oldest record waiting in the core is the one at ``offset`` of log
        ``key``, if there is one. A record being sent or dead-lettered right now is not
        parked, nor is a tenant whose records are spread over partitions (a producer that
        does not partition by key) while its oldest is another partition's.

        O(tenants) the first time for a mark, then O(1) while the mark stays (a backlog at a
        rate's pace, whose tenant at the mark is not held back, keeps it for a while):
        the tenant found is remembered and checked again (``peek``); a search that found
        nobody is done again once ``RESEARCH`` seconds passed."""
        core = self.rule.core
        held = self.rule.pending
        if held is not None and held.item.partition == key and held.item.offset == offset:
            return held.tenant
        known = self._at.get(key)
        now = self.clock.now()
        if known is not None and known[0] == offset:
            tenant = known[1]
            if tenant is None:
                if now < known[2] + RESEARCH:
                    return None
            else:
                head = core.peek(tenant)
                if head is not None and head.partition == key and head.offset == offset:
                    return tenant
        found = None
        for tenant in core.tenants():
            head = core.peek(tenant)
            if head is not None and head.partition == key and head.offset == offset:
                found = tenant
                break
        self._at[key] = (offset, found, now)
        return found

    def _park(self, txn: Transaction, partition: int, tenant: str) -> int:
        """Move ``tenant``'s records of ``partition`` (ingest or holding) from the core to the
        holding log's tail; how many moved (0: not now, see the module docstring)."""
        hold = self.progress.get(holding_id(partition))
        if not isinstance(hold, HoldingProgress):
            return 0
        rule = self.rule
        core = rule.core
        back = holding_id(partition)
        items: list[Parsed] = []
        held = rule.pending
        if held is not None and held.tenant == tenant and held.item.partition in (partition, back):
            rule.cancel()
            items.append(held.item)  # the oldest: picked, waiting for its cost tokens
        items.extend(core.remove_tenant(tenant))
        mine = [e for e in items if e.partition in (partition, back)]
        waiting = hold.parked.get(tenant, 0)
        if not mine or sum(1 for e in mine if e.partition == back) != waiting:
            # Some of its parked records are still to be read back: written now, these would
            # overtake them. Put everything back, in order, and try at a later commit.
            for entry in items:
                self.sink.keep(tenant, entry)
            return 0
        for entry in items:
            if entry.partition not in (partition, back):
                self.sink.keep(tenant, entry)  # another partition's: stays
        for i, entry in enumerate(mine):
            if not self._write(txn, partition, hold, tenant, entry):
                # Its payload cannot be read back now (``fetch``): it and the rest stay in the
                # backlog, in order, ahead of what came back to the core above.
                for rest in reversed(mine[i:]):
                    core.push_front(tenant, rest, rest.cost)
                return i
        return len(mine)

    def park_new(self, txn: Transaction, entries: list[Parsed]) -> None:
        """Park records of parked tenants (of ingest partitions, payloads held, never counted
        in the backlog's memory) as they are indexed, in their order: written to their
        partition's holding log in the open transaction and settled in the ingest log.
        Caller: ``Backlog.index``, once per batch.

        Once per record of a paused tenant among busy ones, hence flat: each goes to the
        producer directly; anything the producer refuses goes through
        ``Transaction.produce``, which retries or says why. The holding logs' counts of
        parked records are added once per batch."""
        txn.begin()
        produce, topic, progress = txn.producer.produce, self.holding_topic, self.progress
        default_id, request_id = self.default_id, wire.REQUEST_ID
        prefixes = default_id.prefixes  # ``default_id`` inline: once per record
        parked: dict[tuple[int, str], int] = {}  # (partition, tenant) -> records parked
        inline = 0
        for entry in entries:
            partition, offset, tenant, _, _, enqueued, msg, _ = entry  # the order is Parsed's
            assert msg is not None  # as ``index`` hands them over: held,
            assert tenant is not None  # and valid
            headers: HeaderList | None
            key: bytes | None
            value: bytes | None
            if isinstance(msg, bytes):  # the common case: its value alone (``records.Held``),
                prefix = prefixes.get(partition) or default_id.prefix(partition)
                headers = [(request_id, prefix + b"%d" % offset)]  # ``_headers``
                key, value = tenant.encode(), msg
            else:
                headers = self._headers(msg, partition, offset)
                key, value = held_key(msg, tenant), held_value(msg)
            try:
                produce(
                    topic,
                    value,
                    key,
                    headers=headers,  # type: ignore[arg-type]  # confluent-kafka's is wider
                    partition=partition,
                    timestamp=enqueued,
                )
                txn.records += 1
                inline += 1
            except (BufferError, KafkaException):
                txn.produce(topic, value, key, headers, partition, timestamp=enqueued)
            progress[partition].settle(offset)
            parked[partition, tenant] = parked.get((partition, tenant), 0) + 1
        for (partition, tenant), count in parked.items():
            hold = progress[holding_id(partition)]
            assert isinstance(hold, HoldingProgress)
            hold.add_parked(tenant, count)
        txn.tally(inline)
        self.metrics.parked.inc(len(entries))

    def _write(
        self, txn: Transaction, partition: int, hold: HoldingProgress, tenant: str, entry: Parsed
    ) -> bool:
        """Write ``entry``'s record to the holding log of ingest ``partition`` in the open
        transaction and settle it where it was (the ingest log, or the holding log itself); a
        payload not held is read back first. False when it cannot be read back now (the log
        still holds it; nothing was written); gone from the log, it becomes a ``lost`` letter."""
        source, offset, enqueued, msg = entry.partition, entry.offset, entry.enqueued, entry.msg
        if msg is None:
            read = self.fetcher.get(source, offset)
            self.metrics.refetches.inc()
            if read is None:
                return False
            if isinstance(read, Gone):
                detail = lost_detail(source, offset, read.log_start)
                self.sink.letter(tenant, entry, wire.LOST, detail)
                return True
            msg = read
        else:
            self.sink.free(msg)
        headers = self._headers(msg, source, offset)
        key, value = held_key(msg, tenant), held_value(msg)
        txn.produce(self.holding_topic, value, key, headers, partition, timestamp=enqueued)
        self.progress[source].settle(offset)
        hold.add_parked(tenant)
        return True

    def _headers(self, msg: Held, source: int, offset: int) -> HeaderList | None:
        """``msg``'s headers in the holding log: its own, plus its default request id when it
        was read from the ingest log (``source`` >= 0) without one, so that its egress record
        carries the id it would have had going straight."""
        headers = held_headers(msg)
        if source < 0 or (headers and any(name == wire.REQUEST_ID for name, _ in headers)):
            return headers
        default: tuple[str, bytes | None] = (wire.REQUEST_ID, self.default_id(source, offset))
        return [default] if headers is None else [*headers, default]


def _over(prog: PartitionProgress, ranges: int, span: int) -> bool:
    # The span counts for the ingest log only (it is what cannot be trimmed and what a
    # restart reads again); in the holding log a long run of one parked tenant's records
    # is what it is there for, and parking it again would gain nothing.
    if prog.settled_above >= ranges:
        return True
    return not isinstance(prog, HoldingProgress) and prog.next - prog.lwm >= span
