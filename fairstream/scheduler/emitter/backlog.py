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
(written first, 900,000 of them held every quiet tenant 11 s). While they wait,
their payloads are held within ``Overflow.budget`` bytes (an eighth of
``--buffer-memory``); beyond that a letter is kept without its payload and read back from
the log when it is written, as a backlog entry beyond ``--buffer-memory`` is.

``Backlog.cached``, the payload bytes held in the core, changes here only: the sender and
the parking report what leaves through ``free`` and ``release``.

Caller: the emitter thread (``Emitter``), the only owner of the core.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, Protocol

from fairstream import wire
from fairstream.config import Settings
from fairstream.config.topics import holding_topic
from fairstream.core import Core, FairScheduler, RecordClock
from fairstream.core.admission import NO_ROOM, backlog_full
from fairstream.core.emission import EmissionRule
from fairstream.scheduler.emitter.checkpoint import Checkpoint
from fairstream.scheduler.emitter.egress import FOOTPRINT, dead_letter, footprint
from fairstream.scheduler.emitter.fetch import PATIENT, Gone, PayloadFetcher
from fairstream.scheduler.emitter.holding import Parking
from fairstream.scheduler.emitter.spill import Spill
from fairstream.scheduler.emitter.transaction import Transaction
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.policies.tenant_groups import GroupRoom
from fairstream.scheduler.progress import PartitionProgress
from fairstream.scheduler.records import (
    Held,
    Letter,
    Parsed,
    held_headers,
    held_key,
    held_value,
    new,
    stored,
    unpack,
    unread,
)
from fairstream.wire.dead_letter import (
    RECORD_OVERHEAD,
    expired_detail,
    header_bytes,
    lost_detail,
    purge_detail,
)

__all__ = ["Backlog", "Overflow", "Refused"]

log = logging.getLogger("fairstream.emitter")

# Records waiting in a flat core from which new ones wait packed (``records.pack``), when
# they will wait COMPACT_WAIT seconds or more at the rate records have been leaving it: a few
# hundred thousand cost tens of MB more unpacked, and packing costs about 0.4 us a record,
# which a backlog drained at full speed (100,000 records or more a few seconds) would pay
# for nothing.
COMPACT_AT = 100_000
COMPACT_WAIT = 10.0


def worth_packing(waiting: int, leaving: float) -> bool:
    """Whether the next records are packed, with ``waiting`` records in the core and
    ``leaving`` records/s leaving it: COMPACT_AT or more wait, and the next ones would wait
    COMPACT_WAIT seconds or more."""
    return waiting >= COMPACT_AT and waiting >= leaving * COMPACT_WAIT


class LeavingRate(Protocol):
    """What ``Backlog.index`` asks of ``Departures``: a test gives its own (records leaving
    slowly, so that they are packed)."""

    def before(self, waiting: int, now: float, configured: float | None) -> float: ...

    def after(self, waiting: int) -> None: ...


class Departures:
    """How fast records leave the core (records/s), worked out about every second in which
    some left, from how many waited after one batch was indexed and before the next; until
    then, the rate the emission rule sends at (``None``: unlimited). Caller:
    ``Backlog.index``, on the emitter thread, with its clock."""

    __slots__ = ("_after", "_left", "_measured", "_since")

    def __init__(self) -> None:
        self._after = 0  # records waiting once the last batch was indexed
        self._left = 0  # records that left since ``_since``
        self._since: float | None = None
        self._measured: float | None = None

    def before(self, waiting: int, now: float, configured: float | None) -> float:
        """Records/s leaving, as a batch is about to be indexed with ``waiting`` waiting."""
        if self._since is None:
            self._since = now
        self._left += max(0, self._after - waiting)
        if now - self._since >= 1.0:
            # A second in which none left says nothing of how fast records go: the emitter
            # warming up after a start (records wait for every partition's end), or none
            # allowed to go for now. Measured then, a backlog about to be drained at full
            # speed was packed, and every pick paid for unpacking until it was empty.
            if self._left:
                self._measured = self._left / (now - self._since)
            self._left, self._since = 0, now
        if self._measured is not None:
            return self._measured
        return math.inf if configured is None else configured

    def after(self, waiting: int) -> None:
        """The batch is indexed: ``waiting`` wait now."""
        self._after = waiting


class Refused(NamedTuple):
    """The dead letters of a run of records the ingest thread passed over (``spill``) and
    their tenant's backlog limit refused: ``entry`` the first (without its payload), ``end``
    the offset past the last. Each letter is made, its payload read back, as it is written
    (``Backlog.send_letters``): a flood's 900,000 refused records made at once held the
    emitter for seconds."""

    tenant: str
    entry: Parsed
    reason: str
    detail: str
    end: int


class Overflow:
    """The dead letters of records refused by their tenant's backlog limits (a letter each,
    or a ``Refused`` run), in ingest order, and the bytes of the payloads they hold (at most
    ``budget``)."""

    __slots__ = ("budget", "held", "letters")

    def __init__(self, budget: int) -> None:
        self.letters: deque[Letter | Refused] = deque()
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


class Backlog:
    """What waits in the core and in the dead-letter queues, and the payload bytes held.

    Holds the emission rule (whose ``core`` is the one in use, replaced on a rewind), the
    emitter's progress per log and warming partitions, and the purges in force (live
    containers the emitter owns and never replaces), and owns ``cached``, the dead-letter
    queues and the parking (``holding.Parking``). Caller: the emitter thread.
    """

    def __init__(
        self,
        settings: Settings,
        rule: EmissionRule[Parsed],
        progress: dict[int, PartitionProgress],
        fetcher: PayloadFetcher,
        checkpoint: Checkpoint,
        metrics: Metrics,
        clock: RecordClock,
        *,
        warming: set[int],
        purges: dict[str, int],
        dlq_limit: int,
        spill: Spill,
    ) -> None:
        self.rule = rule
        self.spill = spill  # tenants far behind, whose records wait in the log
        self.progress = progress
        self.fetcher = fetcher
        self.checkpoint = checkpoint
        self.metrics = metrics
        self.clock = clock
        self.warming = warming
        self.purges = purges
        self.ingest_topic = settings.topics.ingest
        self.dlq_topic = settings.topics.dlq
        self.holding_topic = holding_topic(settings.app_id)
        self.dlq_limit = dlq_limit
        self.budget = settings.buffer_memory
        self.cached = 0  # bytes of payloads held by entries in the core
        # Dead letters to send, and those whose payload could not be read back yet
        # (``fetch``): back into ``letters`` when the fetcher tries again.
        self.letters: deque[Letter] = deque()
        self.unread_letters: deque[Letter] = deque()
        # A flood's overflow (refused by its tenant's backlog limits): written after the
        # other letters, in bounded turns, its payloads held within a budget.
        self.overflow = Overflow(settings.buffer_memory // 8)
        self.parking = Parking(settings, self)
        # How fast records leave a flat core: whether records are packed.
        self.departures: LeavingRate = Departures()
        self.packing = False  # whether the last batch was indexed packed (``keep``)

    @property
    def waiting(self) -> bool:
        """Whether dead letters wait to be sent (the overflow's included)."""
        return bool(self.letters or self.overflow.letters)

    def retry_unread(self) -> None:
        """The fetcher tries again: the letters it could not read back go back in line."""
        if self.unread_letters:
            self.letters.extend(self.unread_letters)
            self.unread_letters.clear()

    def free(self, msg: Held) -> None:
        """A held payload leaves the core (sent, parked, dead-lettered)."""
        self.cached -= footprint(msg)

    def release(self, size: int) -> None:
        """Held payloads of ``size`` bytes in all left the core. Caller: the sender."""
        self.cached -= size

    def letter(self, tenant: str | None, entry: Parsed, reason: str, detail: str) -> None:
        """A dead letter to send (its payload, if held, still counted in ``cached``)."""
        self.letters.append(Letter(tenant, entry, reason, detail))

    def clear(self) -> None:
        """After an abort: nothing waits, nothing is held (the core is replaced)."""
        self.letters.clear()
        self.unread_letters.clear()
        self.overflow.clear()
        self.cached = 0
        self.parking.clear()
        self.spill.clear()
        self.packing = False
        self.departures.after(0)  # the new core holds nothing: none left the old one

    def index(  # noqa: PLR0915 (flat hot path)
        self, records: list[Parsed], txn: Transaction, *, again: bool = False
    ) -> None:
        """Index handed-over records in the core, or turn them into dead letters; a parked
        tenant's are parked (written to the holding log in ``txn``). A run of records the
        ingest thread passed over joins its tenant's runs in the log (``spill``), and so
        does a record of a tenant with runs waiting. ``again``: records of such runs, read
        again from the log (their progress was counted when they were passed over).

        Affects: the progress, the core, ``letters``, ``overflow``, ``cached``, the warming
        partitions, the spill's runs, the metrics.
        """
        progress, letters, warming, purges = self.progress, self.letters, self.warming, self.purges
        spill = self.spill
        runs = spill.runs  # tenants with records waiting in the log (usually none)
        # Paced, a tenant whose backlog reaches the depth has its next records passed over:
        # which tenants were indexed is noted as it changes (a burst's batch names one).
        depth = None if again else spill.depth()
        touched: list[tuple[int, str]] = []
        last: str | None = None
        core, budget, cached = self.rule.core, self.budget, self.cached
        flood, held = self.overflow, self.overflow.held  # a flood's overflow (and bytes held)
        pushed = 0
        now = self.clock.epoch_ms()
        # A flat core checks a tenant's limits itself as it pushes (``push_admitted``).
        flat = core if type(core) is FairScheduler else None
        # A record is pushed as a Parsed or, packed, as bytes (``store_as``).
        admit: Callable[[str, Parsed | bytes, int], int] | None = None
        # Where records wait by the hundred thousand, a flat core keeps those without headers
        # packed (``records.pack``): memory, not CPU, is then what runs out.
        compact = False
        if flat is not None:
            admit = flat.push_admitted  # type: ignore[assignment]  # the stored form too
            waiting = len(flat)
            leaving = self.departures.before(waiting, self.clock.now(), self.rule.rate)
            if worth_packing(waiting, leaving):
                compact = True
                flat.store_as(unpack)
            elif not waiting:
                flat.store_as(None)  # none waits packed: they leave as they are, unchecked
        self.packing = compact
        # With tenant groups, the room left in each tenant's backlog (records, cost) under
        # its policy is worked out once per batch, then counted down, as is its group's.
        room: dict[str, list[float]] = {}
        in_group = GroupRoom()  # and in each tenant group's with a cap, shared by its members
        # Why a tenant's next record is refused, once per batch: a flood's overflow is a run of
        # records refused for one reason, and the sentence is the same for the whole run.
        refusal: dict[str, tuple[str, str]] = {}
        # Partitions with parked tenants (``holding``): their new records are parked too.
        parking = self.parking.parking()
        to_park: list[Parsed] = []  # their records, parked after the batch, in order
        for item in records:
            # Every field is read: unpacked at once (the order is ``Parsed``'s).
            partition, offset, tenant, cost, deadline, enqueued, msg, invalid = item
            prog = progress.get(partition)
            if prog is None:
                continue  # not ours (any more)
            if msg is None:  # a run passed over (``records.passed_over``): cost is its length
                assert tenant is not None
                over = spill.passed(prog, partition, offset, tenant, cost, core.room(tenant)[0])
                if over:  # beyond its backlog limit (in memory and in the log): overflow
                    refusal[tenant] = _full(core, tenant)
                for start, end in over:  # lettered as written, each read back then
                    first = unread(partition, start, tenant)
                    flood.letters.append(Refused(tenant, first, *refusal[tenant], end))
                continue
            if not again:
                if offset < prog.next:
                    continue  # already seen
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
                reason = invalid.reason if invalid else wire.INVALID_KEY
                letters.append(Letter(None, item, reason, invalid.detail if invalid else ""))
                continue
            if runs and not again and (partition, tenant) in runs:
                # Behind its runs, in log order, if its backlog limit leaves room.
                if not spill.join(partition, offset, tenant, core.room(tenant)[0]):
                    refusal[tenant] = _full(core, tenant)
                    size = FOOTPRINT + len(msg) if type(msg) is bytes else footprint(msg)
                    held = self._overflow(item, True, size, held, refusal)
                continue
            if deadline is not None or purges:
                refused = _refused(purges, tenant, deadline, enqueued, now)
                if refused is not None:
                    letters.append(Letter(tenant, item, *refused))
                    continue
            if parking:
                parked = parking.get(partition)
                if parked is not None and tenant in parked:
                    to_park.append(item)
                    continue
            size = FOOTPRINT + len(msg) if type(msg) is bytes else footprint(msg)  # inlined
            if admit is not None:
                if cached + size <= budget:
                    verdict = admit(tenant, stored(item) if compact else item, cost)
                    if not verdict:
                        cached += size
                else:  # read back when it goes
                    bare = (partition, offset, tenant, cost, deadline, enqueued, None, None)
                    verdict = admit(tenant, new(Parsed, bare), cost)
                if verdict:  # over its backlog limits: overflow
                    held = self._overflow(item, verdict == NO_ROOM, size, held, refusal)
                    continue
                pushed += 1
                if depth is not None and tenant is not last:
                    touched.append((partition, tenant))
                    last = tenant
                continue
            left = room.get(tenant)
            if left is None:
                left = room[tenant] = core.room(tenant)
                in_group.add(core, tenant)
            # Over its backlog limits, or its group's: overflow.
            if left[0] < 1 or left[1] < cost or (in_group.of and in_group.full(tenant, cost)):
                held = self._overflow(item, left[0] < 1, size, held, refusal)
                continue
            left[0] -= 1
            left[1] -= cost
            if in_group.of:
                in_group.take(tenant, cost)
            if cached + size <= budget:
                cached += size
                core.push(tenant, item, cost)
            else:  # read back when it goes
                bare = (partition, offset, tenant, cost, deadline, enqueued, None, None)
                core.push(tenant, new(Parsed, bare), cost)
            pushed += 1
            if depth is not None and tenant is not last:
                touched.append((partition, tenant))
                last = tenant
        self.cached, flood.held = cached, held
        if touched:
            spill.consider(touched, depth)  # type: ignore[arg-type]  # set when touched
        if flat is not None:
            self.departures.after(len(flat))
        if to_park:
            self.parking.park_new(txn, to_park)
        if pushed:
            self.metrics.ingested.inc(pushed)

    def _overflow(
        self,
        item: Parsed,
        no_room: bool,
        size: int,
        held: int,
        refusal: dict[str, tuple[str, str]],
    ) -> int:
        """``item`` is over its tenant's (or group's) backlog limits (``no_room``: out of
        records, else of cost): an overflow letter (``Overflow``), with its payload while the
        overflow's budget lasts, else bare (read back when its letter is written). Returns
        the payload bytes the overflow holds now. Caller: ``index``, for each such record."""
        tenant = item.tenant
        assert tenant is not None
        why = refusal.get(tenant) if no_room else None
        if why is None:  # a refusal for its cost depends on the cost: not kept
            why = _refusal(self.rule.core, tenant, item.cost, refusal if no_room else None)
        letters = self.overflow.letters
        if held + size <= self.overflow.budget:
            letters.append(new(Letter, (tenant, item, *why)))
            return held + size
        letters.append(new(Letter, (tenant, new(Parsed, (*item[:6], None, None)), *why)))
        return held

    def keep(self, tenant: str, entry: Parsed) -> None:
        """Put ``entry``, taken out of the core (``remove_tenant``), back at its tenant's tail:
        packed again while records are indexed packed (``records.pack``), so that moving
        records out and back (a revocation, a purge, a park put off) does not unpack them for
        good. Caller: this backlog and its parking."""
        item = stored(entry) if self.packing else entry
        self.rule.core.push(tenant, item, entry.cost)  # type: ignore[arg-type]  # stored form

    def drop(self, gone: set[int]) -> None:
        """Forget the buffered records (and dead letters to be) of the partitions in ``gone``.

        Affects: the core, the rule's held pick, ``letters``, ``cached``.
        """
        core = self.rule.core
        for tenant in list(core.tenants()):
            for entry in core.remove_tenant(tenant):
                if entry.partition in gone:
                    if entry.msg is not None:
                        self.cached -= footprint(entry.msg)
                else:
                    self.keep(tenant, entry)
        held = self.rule.pending
        if held is not None and held.item.partition in gone:
            self.rule.cancel()
            if held.item.msg is not None:
                self.cached -= footprint(held.item.msg)
        for queue in (self.letters, self.unread_letters):
            kept = [x for x in queue if x.entry.partition not in gone]
            queue.clear()
            queue.extend(kept)
        self.overflow.drop(gone)
        self.spill.drop(gone)

    def purge(self, tenant: str, before_ms: int) -> int:
        """Dead-letter ``tenant``'s buffered records enqueued up to ``before_ms``; how many of
        its records are kept. Affects: the core, the rule's held pick, ``letters``, ``cached``."""
        core = self.rule.core
        kept = 0
        held = self.rule.pending
        if held is not None and held.tenant == tenant and held.item.enqueued <= before_ms:
            self.rule.cancel()
            core.push(tenant, held.item, held.cost)  # dead-lettered just below
        for entry in core.remove_tenant(tenant):
            if entry.enqueued > before_ms:
                self.keep(tenant, entry)
                kept += 1
                continue
            if entry.msg is not None:
                self.cached -= footprint(entry.msg)
            self.letters.append(Letter(tenant, entry, wire.PURGED, purge_detail(tenant, before_ms)))
        return kept

    def send_letters(self, txn: Transaction, limit: int) -> int:
        """Produce up to ``limit`` of the pending dead letters in ``txn``, the
        overflow's last; a payload not held is read back first (gone from the log: the letter
        says ``lost``; not readable now: the letter waits in ``unread_letters`` for the
        fetcher's next try). How many it took.

        Affects: ``letters``, ``unread_letters``, ``overflow`` (with its held bytes), the
        progress (settled), the checkpoint's dead letters per reason.
        """
        sent = 0
        letters = self.letters
        while letters and sent < limit:
            self._send_letter(txn, *letters.popleft())
            sent += 1
        overflow = self.overflow.letters
        if not overflow or sent >= limit:
            return sent
        # The overflow's run: one tenant, one reason, one sentence, no headers of its own
        # usually. Its headers but the coordinates are built once per run, and a letter that
        # plainly fits its topic is not fitted again (``fit``'s arithmetic, done once).
        produce = txn.produce
        progress = self.progress
        topic, ingest_topic, limit_bytes = self.dlq_topic, self.ingest_topic, self.dlq_limit
        counts: dict[str, int] = {}  # per reason, handed to the checkpoint
        run: tuple[str, str] | None = None
        fixed: list[tuple[str, bytes | None]] = []
        room = 0
        held = self.overflow.held
        while overflow and sent < limit:
            letter = overflow.popleft()
            if isinstance(letter, Refused):
                taken, stalled = self._send_refused(txn, letter, limit - sent)
                sent += taken
                if stalled:
                    break  # its next payload cannot be read now: the run waits, at the head
                continue
            sent += 1
            _tenant, entry, reason, detail = letter
            partition, offset, msg = entry.partition, entry.offset, entry.msg
            if msg is not None:
                held -= _held(msg)
            if msg is None or partition < 0 or held_headers(msg) is not None:
                # To read back, from the holding log, or with headers of its own.
                self._send_letter(txn, *letter)
                continue
            key, value = held_key(msg, _tenant), held_value(msg)
            if run != (reason, detail):
                run = (reason, detail)
                fixed, room = _run_headers(ingest_topic, limit_bytes, reason, detail)
            if len(value or b"") + len(key or b"") > room:
                self._send_letter(txn, *letter)  # fitted to the topic
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
        self.overflow.held = max(0, held)
        for reason, count in counts.items():
            self.checkpoint.lettered(reason, count)
        return sent

    def _send_refused(self, txn: Transaction, refused: Refused, most: int) -> tuple[int, bool]:
        """Up to ``most`` letters of a ``Refused`` run, its first ones, each payload read back
        (``fetch``); the rest stays at the overflow's head. How many were written, and
        whether a read could not be done now (the run waits for the fetcher's next try).

        A run is one tenant, one reason, one sentence: its headers but the coordinates are
        built once, as for the overflow's letters with payloads (``send_letters``); a record
        with headers of its own, or too large to go as it is, takes ``_send_letter``."""
        tenant, entry, reason, detail, end = refused
        partition, start = entry.partition, entry.offset
        stop = min(end, start + most)
        fetcher, produce, topic = self.fetcher, txn.produce, self.dlq_topic
        prog = self.progress.get(partition)
        # Built at the first payload read, not at each turn the fetcher keeps the run waiting.
        fixed: list[tuple[str, bytes | None]] | None = None
        room = 0
        written = 0
        at = start
        stalled = False
        while at < stop:
            read = fetcher.get(partition, at, PATIENT)  # a letter holds no one up
            if read is None:
                stalled = True
                break
            if isinstance(read, Gone):
                bare = unread(partition, at, tenant)
                lost = lost_detail(partition, at, read.log_start)
                self._send_letter(txn, tenant, bare, wire.LOST, lost)
            else:
                if fixed is None:
                    fixed, room = _run_headers(self.ingest_topic, self.dlq_limit, reason, detail)
                key, value = read.key(), read.value()
                if read.headers() is not None or len(value or b"") + len(key or b"") > room:
                    held = unread(partition, at, tenant, read)
                    self._send_letter(txn, tenant, held, reason, detail)
                else:
                    coordinates = [(wire.DLQ_PARTITION, b"%d" % partition)]
                    coordinates.append((wire.DLQ_OFFSET, b"%d" % at))
                    produce(topic, value, key, [*fixed, *coordinates])
                    if prog is not None:
                        prog.settle(at)
                    written += 1
            at += 1
        if written:
            self.checkpoint.lettered(reason, written)
        if at < end:
            rest = unread(partition, at, tenant)
            self.overflow.letters.appendleft(Refused(tenant, rest, reason, detail, end))
        return at - start, stalled

    def _send_letter(
        self, txn: Transaction, tenant: str | None, entry: Parsed, reason: str, detail: str
    ) -> None:
        """One dead letter, read back if need be, fitted to its topic, and its offset settled.
        A payload the log still holds but cannot give now: the letter waits in
        ``unread_letters`` (never a ``lost`` one: that needs the log start past the record)."""
        partition, offset, msg = entry.partition, entry.offset, entry.msg
        if msg is None and reason != wire.LOST:
            read = self.fetcher.get(partition, offset)
            if read is None:
                self.unread_letters.append(Letter(tenant, entry, reason, detail))
                return
            if isinstance(read, Gone):
                reason, detail = wire.LOST, lost_detail(partition, offset, read.log_start)
            else:
                msg = read
        source = (
            (self.ingest_topic, partition, offset)
            if partition >= 0
            else (self.holding_topic, ~partition, offset)  # read back from the holding log
        )
        key, value, headers = dead_letter(tenant, msg, reason, detail, source, self.dlq_limit)
        txn.produce(self.dlq_topic, value, key, headers)
        prog = self.progress.get(partition)
        if prog is not None:
            prog.settle(offset)
        self.checkpoint.lettered(reason)
        log.debug("dead letter %d@%d: %s: %s", partition, offset, reason, detail)


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


def _run_headers(
    ingest_topic: str, limit_bytes: int, reason: str, detail: str
) -> tuple[list[tuple[str, bytes | None]], int]:
    """A run of overflow letters' headers but the coordinates (one tenant, one reason, one
    sentence: built once per run), and the key and value bytes a letter of the run may
    hold and still plainly fit the dead-letter topic (``fit``'s arithmetic, done once)."""
    fixed = wire.dead_letter_headers([], reason, detail, (ingest_topic, 0, 0))[:-2]
    room = limit_bytes - (RECORD_OVERHEAD + 64 + 255 + 2 * 64)
    room -= sum(header_bytes(h) for h in fixed)
    return fixed, room


def _full(core: Core[Parsed], tenant: str) -> tuple[str, str]:
    """The refusal of a record of ``tenant`` whose backlog, in the core and in the log
    (``spill``), holds as many records as its policy allows."""
    cap = core.policy(tenant).max_backlog
    decision = backlog_full(f"tenant {tenant!r}", cap or 0, cap)
    return (decision.reason or wire.BACKLOG_FULL, decision.detail or "")


def _refusal(
    core: Core[Parsed], tenant: str, cost: int, runs: dict[str, tuple[str, str]] | None
) -> tuple[str, str]:
    """The reason and sentence of a refusal by ``tenant``'s backlog limits (the core's own
    admission decision), kept in ``runs`` for the rest of the batch when given."""
    decision = core.admit(tenant, cost)
    why = (decision.reason or wire.BACKLOG_FULL, decision.detail or "")
    if runs is not None:
        runs[tenant] = why
    return why


def _held(msg: Held | None) -> int:
    """Bytes an overflow letter's payload counts against ``Overflow.budget``."""
    return 0 if msg is None else footprint(msg)
