"""What joins the emitter's backlog, and what leaves it other than by emission.

``index``: each parsed record the ingest thread hands over for an owned partition moves its
partition's progress on, then joins its tenant's backlog in the core (its payload held in
memory while ``--buffer-memory`` allows, else read back when it goes), or becomes a dead
letter (invalid, expired, purged, over its tenant's backlog limits). ``drop``: the records
of revoked partitions are forgotten. ``purge``: a tenant's records enqueued up to a time
become dead letters. ``send_letters``: dead letters go to the dead-letter topic, in the
open transaction, and settle their offsets.

Caller: the emitter thread (``Emitter``), the only owner of the core.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import TYPE_CHECKING

from fairstream import wire
from fairstream.core import FairScheduler
from fairstream.scheduler.egress import FOOTPRINT, dead_letter, footprint
from fairstream.scheduler.fetch import Gone
from fairstream.scheduler.handoff import Parsed
from fairstream.wire.dead_letter import expired_detail, lost_detail, purge_detail

if TYPE_CHECKING:
    from fairstream.scheduler.emit import Emitter, Entry

__all__ = ["drop", "index", "purge", "send_letters"]

log = logging.getLogger("fairstream.emitter")


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
    now = wire.now_ms()
    purges = em.policies.purges
    if em.rewinding:
        return
    # Room left in each tenant's backlog (records, cost) under its policy: worked out
    # once per batch, then counted down, instead of an admission decision per record.
    room: dict[str, list[float]] = {}
    cached = em.cached
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
        if invalid is not None or tenant is None:  # the ingest thread sets one of them
            entry: Entry = (partition, offset, enqueued, None, msg, 1)
            reason = invalid.reason if invalid else wire.INVALID_KEY
            letters.append((None, entry, reason, invalid.detail if invalid else ""))
            continue
        if deadline is not None or purges:
            refused = _refused(purges, tenant, deadline, enqueued, now)
            if refused is not None:
                entry = (partition, offset, enqueued, deadline, msg, cost)
                letters.append((tenant, entry, *refused))
                continue
        left = room.get(tenant)
        if left is None:
            left = room[tenant] = _room(core, tenant)
        if left[0] < 1 or left[1] < cost:
            decision = core.admit(tenant, cost)  # the exact reason and sentence
            letters.append(
                (
                    tenant,
                    (partition, offset, enqueued, deadline, msg, cost),
                    decision.reason or wire.BACKLOG_FULL,
                    decision.detail or "",
                )
            )
            continue
        left[0] -= 1
        left[1] -= cost
        size = FOOTPRINT + len(msg) if msg.headers() is None else footprint(msg)
        if cached + size <= budget:
            cached += size
            core.push(tenant, (partition, offset, enqueued, deadline, msg, cost), cost)
        else:
            core.push(tenant, (partition, offset, enqueued, deadline, None, cost), cost)
        pushed += 1
    em.cached = cached
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
            if entry[0] in gone:
                if entry[4] is not None:
                    em.cached -= footprint(entry[4])
            else:
                core.push(tenant, entry, entry[5])
    held = em.rule.pending
    if held is not None and held.item[0] in gone:
        em.rule.cancel()
        if held.item[4] is not None:
            em.cached -= footprint(held.item[4])
    em.letters = deque(letter for letter in em.letters if letter[1][0] not in gone)
    em.unread_letters = deque(letter for letter in em.unread_letters if letter[1][0] not in gone)


def purge(em: Emitter, tenant: str, before_ms: int) -> int:
    """Dead-letter ``tenant``'s buffered records enqueued up to ``before_ms``; how many of
    its records are kept. Affects: ``em``'s core, held pick, letters and cached bytes."""
    core = em.core
    kept = 0
    held = em.rule.pending
    if held is not None and held.tenant == tenant and held.item[2] <= before_ms:
        em.rule.cancel()
        core.push(tenant, held.item, held.cost)  # dead-lettered just below
    for entry in core.remove_tenant(tenant):
        if entry[2] > before_ms:
            core.push(tenant, entry, entry[5])
            kept += 1
            continue
        if entry[4] is not None:
            em.cached -= footprint(entry[4])
        em.letters.append((tenant, entry, wire.PURGED, purge_detail(tenant, before_ms)))
    return kept


def send_letters(em: Emitter, limit: int) -> None:
    """Produce up to ``limit`` of ``em``'s pending dead letters in its open transaction; a
    payload not held is read back first (gone from the log: the letter says ``lost``; not
    readable now: the letter waits in ``unread_letters`` for the fetcher's next try).

    Affects: ``em``'s letters, progress (settled) and dead letters counted per reason.
    """
    for _ in range(min(limit, len(em.letters))):
        letter = em.letters.popleft()
        tenant, entry, reason, detail = letter
        partition, offset, _enqueued, _deadline, msg, _cost = entry
        if msg is None and reason != wire.LOST:
            read = em.fetcher.get(partition, offset)
            if read is None:
                # Not readable now, still in the log: sent once the fetcher tries again.
                em.unread_letters.append(letter)
                continue
            if isinstance(read, Gone):
                reason, detail = wire.LOST, lost_detail(partition, offset, read.log_start)
            else:
                msg = read
        source = (em.ingest_topic, partition, offset)
        key, value, headers = dead_letter(tenant, msg, reason, detail, source, em.limits.dlq)
        em.txn.produce(em.dlq_topic, value, key, headers)
        prog = em.progress.get(partition)
        if prog is not None:
            prog.settle(offset)
        em._txn_letters[reason] = em._txn_letters.get(reason, 0) + 1
        log.debug("dead letter %d@%d: %s: %s", partition, offset, reason, detail)
