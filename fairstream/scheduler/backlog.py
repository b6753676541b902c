"""What joins the emitter's backlog, and what leaves it other than by emission.

``index``: each parsed record the ingest thread hands over for an owned partition moves its
partition's progress on, then joins its tenant's backlog in the core (its payload held in
memory while ``--buffer-memory`` allows, else read back when it goes), or becomes a dead
letter (invalid, expired, purged, over its tenant's backlog limits). ``drop``: the records
of revoked partitions are forgotten. ``purge``: a tenant's records enqueued up to a time
become dead letters. ``send_letters``: dead letters go to the dead-letter topic, in the
open transaction, and settle their offsets.

A flood over a tenant's backlog cap is *overflow*: its dead letters (``backlog-full``, and
the other admission refusals) wait in a queue of their own (``Overflow``), behind the
other dead letters, and the emitter sends them in bounded turns after each round of emission
(issue 22: written first, 900,000 of them held every quiet tenant 11 s). While they wait,
their payloads are held within ``Overflow.budget`` bytes (an eighth of
``--buffer-memory``); beyond that a letter is kept without its payload and read back from
the log when it is written, as a backlog entry beyond ``--buffer-memory`` is.

Caller: the emitter thread (``Emitter``), the only owner of the core.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import TYPE_CHECKING

from confluent_kafka import Message

from fairstream import wire
from fairstream.core import FairScheduler
from fairstream.scheduler import holding
from fairstream.scheduler.egress import FOOTPRINT, dead_letter, footprint
from fairstream.scheduler.fetch import Gone
from fairstream.scheduler.records import Entry, Letter, Parsed, new
from fairstream.wire.dead_letter import (
    RECORD_OVERHEAD,
    expired_detail,
    header_bytes,
    lost_detail,
    purge_detail,
)

if TYPE_CHECKING:
    from fairstream.scheduler.emit import Emitter

__all__ = ["Overflow", "drop", "index", "purge", "send_letters"]

log = logging.getLogger("fairstream.emitter")


class Overflow:
    """The dead letters of records refused by their tenant's backlog limits, in ingest
    order, and the bytes of the payloads they hold (at most ``budget``)."""

    __slots__ = ("budget", "held", "letters")

    def __init__(self, budget: int) -> None:
        self.letters: deque[Letter] = deque()
        self.held = 0
        self.budget = budget

    def __len__(self) -> int:
        return len(self.letters)

    def clear(self) -> None:
        self.letters.clear()
        self.held = 0

    def drop(self, gone: set[int]) -> None:
        """Forget the letters of the partitions in ``gone``."""
        self.letters = deque(x for x in self.letters if x.entry.partition not in gone)
        self.held = sum(_held(letter.entry.msg) for letter in self.letters)


def index(em: Emitter, records: list[Parsed]) -> None:  # noqa: PLR0915 (flat hot path)
    """Index handed-over records in ``em``'s core, or turn them into dead letters.

    Affects: ``em``'s progress, core, letters, cached bytes, warming partitions, metrics.
    """
    progress = em.progress
    core = em.core
    letters = em.letters
    budget = em.budget
    warming = em.warming
    pushed = 0
    now = em.clock.epoch_ms()
    purges = em.policies.purges
    if em.rewinding:
        return
    # Room left in each tenant's backlog (records, cost) under its policy: worked out
    # once per batch, then counted down, instead of an admission decision per record.
    room: dict[str, list[float]] = {}
    # Why a tenant's next record is refused, once per batch: a flood's overflow is a run of
    # records refused for one reason, and the sentence is the same for the whole run.
    refusal: dict[str, tuple[str, str]] = {}
    overflow = em.overflow.letters
    held = em.overflow.held
    held_budget = em.overflow.budget
    cached = em.cached
    # Partitions with parked tenants (``holding``): their new records are parked too.
    parking = holding.parking(em)
    for item in records:
        partition, offset, tenant, cost, deadline, enqueued, msg, invalid = item
        prog = progress.get(partition)
        if prog is None or offset < prog.next:
            continue  # not ours (any more), or already seen
        if warming:
            warming.discard(partition)
        if offset < prog.replay_end and prog.recovered(offset):
            prog.observe(offset)  # settled before the restart
            continue
        if offset == prog.next:
            prog.next = offset + 1
        else:
            prog.observe(offset)  # a gap first (transaction markers, aborted records)
        if partition < 0 and tenant is not None:
            prog.own(offset, tenant)  # type: ignore[attr-defined]  # a HoldingProgress
        if invalid is not None or tenant is None:  # the ingest thread sets one of them
            entry = Entry(partition, offset, enqueued, None, msg, 1)
            reason = invalid.reason if invalid else wire.INVALID_KEY
            letters.append(Letter(None, entry, reason, invalid.detail if invalid else ""))
            continue
        if deadline is not None or purges:
            refused = _refused(purges, tenant, deadline, enqueued, now)
            if refused is not None:
                entry = Entry(partition, offset, enqueued, deadline, msg, cost)
                letters.append(Letter(tenant, entry, *refused))
                continue
        if parking:
            parked = parking.get(partition)
            if parked is not None and tenant in parked:
                holding.park_new(
                    em, tenant, Entry(partition, offset, enqueued, deadline, msg, cost)
                )
                continue
        left = room.get(tenant)
        if left is None:
            left = room[tenant] = _room(core, tenant)
        if left[0] < 1 or left[1] < cost:
            why = refusal.get(tenant) if left[0] < 1 else None
            if why is None:
                decision = core.admit(tenant, cost)  # the exact reason and sentence
                why = (decision.reason or wire.BACKLOG_FULL, decision.detail or "")
                if left[0] < 1:  # a cost refusal depends on the record's cost: not kept
                    refusal[tenant] = why
            size = FOOTPRINT + len(msg) if msg.headers() is None else footprint(msg)
            if held + size <= held_budget:
                held += size
                entry = new(Entry, (partition, offset, enqueued, deadline, msg, cost))
                overflow.append(new(Letter, (tenant, entry, *why)))
            else:  # read back when its letter is written
                entry = new(Entry, (partition, offset, enqueued, deadline, None, cost))
                overflow.append(new(Letter, (tenant, entry, *why)))
            continue
        left[0] -= 1
        left[1] -= cost
        size = FOOTPRINT + len(msg) if msg.headers() is None else footprint(msg)
        if cached + size <= budget:
            cached += size
            core.push(tenant, new(Entry, (partition, offset, enqueued, deadline, msg, cost)), cost)
        else:
            core.push(tenant, new(Entry, (partition, offset, enqueued, deadline, None, cost)), cost)
        pushed += 1
    em.cached = cached
    em.overflow.held = held
    if pushed:
        em.metrics.ingested.inc(pushed)


def _refused(
    purges: dict[str, int], tenant: str, deadline: int | None, enqueued: int, now: int
) -> tuple[str, str] | None:
    """Why a record is dead-lettered as it is read (expired, purged), if it is."""
    if deadline is not None and now > deadline:
        return wire.EXPIRED, expired_detail(tenant, deadline, now, buffered=False)
    before = purges.get(tenant)
    if before is not None and enqueued <= before:
        return wire.PURGED, purge_detail(tenant, before)
    return None


def _room(core: FairScheduler[Entry], tenant: str) -> list[float]:
    """Records and cost ``tenant`` may still add to its backlog under its policy."""
    policy = core.policy(tenant)
    records, cost = core.backlog(tenant)
    return [
        math.inf if policy.max_backlog is None else policy.max_backlog - records,
        math.inf if policy.max_backlog_cost is None else policy.max_backlog_cost - cost,
    ]


def drop(em: Emitter, gone: set[int]) -> None:
    """Forget the buffered records (and dead letters to be) of the partitions in ``gone``.

    Affects: ``em``'s core, held pick, letters and cached bytes.
    """
    core = em.core
    for tenant in list(core.tenants()):
        for entry in core.remove_tenant(tenant):
            if entry.partition in gone:
                if entry.msg is not None:
                    em.cached -= footprint(entry.msg)
            else:
                core.push(tenant, entry, entry.cost)
    held = em.rule.pending
    if held is not None and held.item.partition in gone:
        em.rule.cancel()
        if held.item.msg is not None:
            em.cached -= footprint(held.item.msg)
    em.letters = deque(x for x in em.letters if x.entry.partition not in gone)
    em.overflow.drop(gone)
    em.unread_letters = deque(x for x in em.unread_letters if x.entry.partition not in gone)


def purge(em: Emitter, tenant: str, before_ms: int) -> int:
    """Dead-letter ``tenant``'s buffered records enqueued up to ``before_ms``; how many of
    its records are kept. Affects: ``em``'s core, held pick, letters and cached bytes."""
    core = em.core
    kept = 0
    held = em.rule.pending
    if held is not None and held.tenant == tenant and held.item.enqueued <= before_ms:
        em.rule.cancel()
        core.push(tenant, held.item, held.cost)  # dead-lettered just below
    for entry in core.remove_tenant(tenant):
        if entry.enqueued > before_ms:
            core.push(tenant, entry, entry.cost)
            kept += 1
            continue
        if entry.msg is not None:
            em.cached -= footprint(entry.msg)
        em.letters.append(Letter(tenant, entry, wire.PURGED, purge_detail(tenant, before_ms)))
    return kept


def send_letters(em: Emitter, limit: int) -> int:
    """Produce up to ``limit`` of ``em``'s pending dead letters in its open transaction, the
    overflow's last; a payload not held is read back first (gone from the log: the letter
    says ``lost``; not readable now: the letter waits in ``unread_letters`` for the
    fetcher's next try). How many it took.

    Affects: ``em``'s letters and overflow (with its held bytes), progress (settled) and
    dead letters counted per reason.
    """
    sent = 0
    letters = em.letters
    while letters and sent < limit:
        _send_letter(em, *letters.popleft())
        sent += 1
    overflow = em.overflow.letters
    if not overflow or sent >= limit:
        return sent
    # The overflow's run: one tenant, one reason, one sentence, no headers of its own
    # usually. Its headers but the coordinates are built once per run, and a letter that
    # plainly fits its topic is not fitted again (``fit``'s arithmetic, done once).
    produce = em.txn.produce
    progress = em.progress
    topic, ingest_topic, limit_bytes = em.dlq_topic, em.ingest_topic, em.limits.dlq
    counts: dict[str, int] = {}  # per reason, handed to the checkpoint
    run: tuple[str, str] | None = None
    fixed: list[tuple[str, bytes | None]] = []
    room = 0
    held = em.overflow.held
    while overflow and sent < limit:
        letter = overflow.popleft()
        sent += 1
        _tenant, entry, reason, detail = letter
        partition, offset, _enqueued, _deadline, msg, _cost = entry
        if msg is not None:
            held -= _held(msg)
        if msg is None or partition < 0 or msg.headers() is not None:
            # To read back, from the holding log, or with headers of its own.
            _send_letter(em, *letter)
            continue
        key, value = msg.key(), msg.value()
        if run != (reason, detail):
            run = (reason, detail)
            fixed = wire.dead_letter_headers([], reason, detail, (ingest_topic, 0, 0))[:-2]
            room = limit_bytes - (RECORD_OVERHEAD + 64 + 255 + 2 * 64)
            room -= sum(header_bytes(h) for h in fixed)
        if len(value or b"") + len(key or b"") > room:
            _send_letter(em, *letter)  # fitted to the topic
            continue
        headers = [
            *fixed,
            (wire.DLQ_PARTITION, b"%d" % partition),
            (wire.DLQ_OFFSET, b"%d" % offset),
        ]
        produce(topic, value, key, headers)
        prog = progress.get(partition)
        if prog is not None:
            prog.settle(offset)
        counts[reason] = counts.get(reason, 0) + 1
    em.overflow.held = max(0, held)
    for reason, count in counts.items():
        em.checkpoint.lettered(reason, count)
    return sent


def _send_letter(em: Emitter, tenant: str | None, entry: Entry, reason: str, detail: str) -> None:
    """One dead letter, read back if need be, fitted to its topic, and its offset settled.
    A payload the log still holds but cannot give now: the letter waits in
    ``unread_letters`` (never a ``lost`` one: that needs the log start past the record)."""
    partition, offset, _enqueued, _deadline, msg, _cost = entry
    if msg is None and reason != wire.LOST:
        read = em.fetcher.get(partition, offset)
        if read is None:
            em.unread_letters.append(Letter(tenant, entry, reason, detail))
            return
        if isinstance(read, Gone):
            reason, detail = wire.LOST, lost_detail(partition, offset, read.log_start)
        else:
            msg = read
    source = (
        (em.ingest_topic, partition, offset)
        if partition >= 0
        else (em.holding_topic, ~partition, offset)  # read back from the holding log
    )
    key, value, headers = dead_letter(tenant, msg, reason, detail, source, em.limits.dlq)
    em.txn.produce(em.dlq_topic, value, key, headers)
    prog = em.progress.get(partition)
    if prog is not None:
        prog.settle(offset)
    em.checkpoint.lettered(reason)
    log.debug("dead letter %d@%d: %s: %s", partition, offset, reason, detail)


def _held(msg: Message | None) -> int:
    """Bytes an overflow letter's payload counts against ``Overflow.budget``."""
    if msg is None:
        return 0
    return FOOTPRINT + len(msg) if msg.headers() is None else footprint(msg)
