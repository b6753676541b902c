"""What the scheduler persists: per ingest partition, how far its records are settled.

A record is *settled* once it has been emitted, dead-lettered, expired or purged. Settling
happens out of offset order (tenants are served round robin), so a partition's progress is
its *low-water mark* (the lowest offset not yet settled: everything below it is done) plus
the settled ranges above it. Offsets the consumer never sees (transaction markers, aborted
or compacted records) are settled as gaps when the next record shows up.

The low-water mark is committed as the consumer group's offset, in the same Kafka
transaction as the egress records that advanced it; the ranges above it travel in the same
transaction as a *snapshot* in the progress topic, because commit metadata is limited to
4 KB. A snapshot (``Snapshot``) also carries the partition's holding log (``holding``):
its mark, its settled ranges and how many records of each parked tenant wait in it
(``HoldingProgress``); and (format 3) what the partition's records spent of their budgets
(``fairstream.core.budget.BudgetLedger.export``, each entry compact JSON), so that the spend
is committed exactly once with the records that made it. It is cut into chunk records of at
most ``CHUNK_BYTES`` (``encode_chunks``; each names its token, its index and the chunk count,
so recovery uses a set only when it is complete), well under the progress topic's
``max.message.bytes`` (``PROGRESS_TOPIC_BYTES``, set when the topic is created; both are in
``fairstream.config.topics``). Ranges are delta and varint coded. A settled offset never
becomes unsettled again, so an older snapshot is never wrong about the ingest log, only
incomplete.

Costs: ``settle`` is O(1) (two dicts map each range's start to its end and back); the
gaps ``observe`` settles are cut around the recovered ranges by binary search; building a
``PartitionProgress`` from recovered ranges is one sort and one pass. Only the general
``settle_range`` (no caller on the emission or recovery path) searches every range.

Pure: no Kafka, no clock. Caller: the emitter thread, which owns every instance.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fairstream.config.topics import CHUNK_BYTES
from fairstream.errors import Error

FORMAT_VERSION = 3  # 3 adds the budgets' spend; 1 and 2 are still read


class ProgressFormatError(Error, ValueError):
    """A progress record that this version cannot read."""


class PartitionProgress:
    """Low-water mark and settled ranges of one ingest partition.

    Ranges are half-open ``[start, end)`` and kept merged: two dicts map each range's start
    to its end and its end to its start, so settling one offset is O(1) whatever the order.
    """

    __slots__ = (
        "_cursor",
        "_ends",
        "_recovered",
        "_recovered_starts",
        "_starts",
        "budgets",
        "changes",
        "lwm",
        "next",
        "replay_end",
    )

    def __init__(self, lwm: int, settled: Iterable[tuple[int, int]] = ()) -> None:
        if lwm < 0:
            raise ValueError(f"the low-water mark is an offset, got {lwm}")
        self.lwm = lwm
        self.next = lwm  # the next offset the log may deliver (everything below was seen)
        self.changes = 0  # bumped by every settlement: what a commit compares
        # The budgets' spend of this partition's records as recovered (``BudgetLedger``
        # entries), for the emitter to restore; empty once restored or when none.
        self.budgets: list[Any] = []
        # Ranges settled before a restart: the log is read again from the mark, and these
        # records are skipped as they come by. Sorted and merged once, O(n log n), then
        # loaded as they are: rebuilding them one settle_range at a time was quadratic.
        recovered = _merged(sorted((max(s, lwm), e) for s, e in settled if e > max(s, lwm)))
        self._recovered = recovered
        self._recovered_starts = [s for s, _ in recovered]
        self._cursor = 0
        # Offsets at or past this were settled after no recovered range: no need to ask.
        self.replay_end = recovered[-1][1] if recovered else -1
        stored = recovered
        if recovered and recovered[0][0] == lwm:
            self.lwm = recovered[0][1]  # the mark moves over a run that starts at it
            stored = recovered[1:]
        self._starts: dict[int, int] = dict(stored)
        self._ends: dict[int, int] = {e: s for s, e in stored}

    # -- reading the log ------------------------------------------------------------------

    def observe(self, offset: int) -> None:
        """The log delivered ``offset``: offsets skipped since the last one are gaps.

        Caller: the emitter, for every ingest record of the partition, in log order.
        Affects: ``next``; the settled ranges (gaps); possibly the low-water mark.
        """
        if offset > self.next:
            self._settle_gap(self.next, offset)
        if offset >= self.next:
            self.next = offset + 1

    def recovered(self, offset: int) -> bool:
        """Whether ``offset`` was settled before the restart this progress was recovered from.

        Offsets must be asked in increasing order (the log's): a cursor walks the recovered
        ranges once. Caller: the emitter, for each record read again after recovery.
        """
        ranges = self._recovered
        while self._cursor < len(ranges) and ranges[self._cursor][1] <= offset:
            self._cursor += 1
        return self._cursor < len(ranges) and ranges[self._cursor][0] <= offset

    # -- settling -------------------------------------------------------------------------

    def settle(self, offset: int, end: int | None = None) -> None:
        """Mark one offset settled (with ``end``: ``[offset, end)``, none of it settled yet,
        at or above the mark). O(1): a new range can only touch the range ending at its
        start and the one starting at its end. Caller: the emitter, once a record is in a
        transaction (once per egress record, hence flat code), and ``_settle_gap``."""
        if offset < self.lwm:
            return
        self.changes += 1
        start = offset
        if end is None:
            end = offset + 1
        starts, ends = self._starts, self._ends
        left = ends.pop(start, None)
        if left is not None:
            del starts[left]
            start = left
        right = starts.pop(end, None)
        if right is not None:
            del ends[right]
            end = right
        if start == self.lwm:
            self.lwm = end  # the mark moves over everything settled behind it
            return
        starts[start] = end
        ends[end] = start

    def settle_range(self, start: int, end: int) -> None:
        """Mark ``[start, end)`` settled, merging it with any settled range it overlaps.

        The general case, O(ranges): nothing on the emission or recovery path calls it
        (``settle``, ``observe`` and the constructor never need an overlap search)."""
        start = max(start, self.lwm)
        if end <= start:
            return
        self.changes += 1
        starts, ends = self._starts, self._ends
        for s in [s for s, e in starts.items() if s <= end and e >= start]:
            e = starts.pop(s)
            del ends[e]
            start, end = min(start, s), max(end, e)
        self._store(start, end)

    def _settle_gap(self, start: int, end: int) -> None:
        """Settle the offsets of ``[start, end)`` the log skipped (``start`` is ``next``).

        Above ``next`` only recovered ranges can be settled already, so the gap is cut
        around them (a binary search in the sorted recovered ranges) and each piece is new:
        it can only touch the range ending at its start and the one starting at its end.
        O(log recovered ranges + pieces), whatever the number of ranges."""
        start = max(start, self.lwm)
        if end <= start:
            return
        if start >= self.replay_end:
            self._settle_new(start, end)
            return
        ranges = self._recovered
        i = max(0, bisect_right(self._recovered_starts, start) - 1)
        while start < end and i < len(ranges):
            s, e = ranges[i]
            if s >= end:
                break
            if e > start:
                if s > start:
                    self._settle_new(start, s)
                start = max(start, e)
            i += 1
        if start < end:
            self._settle_new(max(start, self.lwm), end)

    def _settle_new(self, start: int, end: int) -> None:
        """Settle ``[start, end)``, none of it settled yet, if not empty: this class's
        ``settle`` (a gap is nobody's record; a subclass's bookkeeping is not for it)."""
        if end > start:
            PartitionProgress.settle(self, start, end)

    def _store(self, start: int, end: int) -> None:
        if start <= self.lwm:
            self.lwm = max(self.lwm, end)  # the mark moves over everything settled behind it
            return
        self._starts[start] = end
        self._ends[end] = start

    # -- what is persisted ----------------------------------------------------------------

    def ranges(self) -> list[tuple[int, int]]:
        """The settled ranges above the low-water mark, in offset order.

        Once per commit for each partition that changed, over all its ranges: thousands
        when tenants drain at different speeds (weights, costs, a burst), their records'
        offsets settled far apart. The starts are sorted as ints, then paired: sorting the
        pairs compared tuples, several times slower. Typed ``Any``, the compiled build
        pairs the int objects the dict holds: typed ``int``, it unboxed each offset, then
        boxed it into a new object."""
        starts: dict[Any, Any] = self._starts
        order: list[Any] = sorted(starts)
        return [(start, starts[start]) for start in order]

    @property
    def settled_above(self) -> int:
        """How many ranges are settled above the mark (what a progress record carries)."""
        return len(self._starts)

    def __repr__(self) -> str:
        return f"PartitionProgress(lwm={self.lwm}, next={self.next}, ranges={self.ranges()[:4]})"


class HoldingProgress(PartitionProgress):
    """Progress of a partition's holding log (``holding``), plus who is parked in it.

    ``parked`` counts, per tenant, the records the holding log holds for it that are not
    settled yet: a tenant with a count is *parked* (its new records go to the holding log
    too, so that its order holds). The count rises as records are parked (``add_parked``)
    and falls as they settle: ``own`` tells which tenant each record read back belongs to,
    and ``settle`` looks it up, so no caller of ``settle`` needs to know.
    """

    __slots__ = ("owners", "parked")

    def __init__(
        self,
        lwm: int,
        settled: Iterable[tuple[int, int]] = (),
        parked: dict[str, int] | None = None,
    ) -> None:
        super().__init__(lwm, settled)
        self.parked: dict[str, int] = {t: n for t, n in (parked or {}).items() if n > 0}
        self.owners: dict[int, str] = {}  # offset -> tenant of records read back, unsettled

    def own(self, offset: int, tenant: str) -> None:
        """Record ``offset`` (read back from the holding log) as ``tenant``'s."""
        self.owners[offset] = tenant

    def add_parked(self, tenant: str, count: int = 1) -> None:
        """``count`` more records of ``tenant`` were written to the holding log."""
        self.parked[tenant] = self.parked.get(tenant, 0) + count
        self.changes += count

    def settle(self, offset: int, end: int | None = None) -> None:
        """Settle a parked record's offset (one less parked for its tenant), or a range."""
        tenant = self.owners.pop(offset, None) if end is None else None
        if tenant is not None:
            left = self.parked.get(tenant, 0) - 1
            if left > 0:
                self.parked[tenant] = left
            else:
                self.parked.pop(tenant, None)
        super().settle(offset, end)


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted half-open ranges with overlapping and touching ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in ranges:
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


# -- the progress record ------------------------------------------------------------------


def _varint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ProgressFormatError("progress record ends inside a number")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 70:
            raise ProgressFormatError("progress record has a number of more than 64 bits")


def _ranges_bytes(base: int, ranges: list[tuple[int, int]], out: bytearray) -> None:
    """Each range as two deltas (from the previous range's end, then its length)."""
    flat: list[int] = []
    previous = base
    small = True  # every delta fits one byte: checked here, not by a max() over ``flat``
    for start, end in ranges:
        gap = start - previous
        length = end - start
        if gap >= 0x80 or length >= 0x80:
            small = False
        flat.append(gap)
        flat.append(length)
        previous = end
    if small:
        out += bytes(flat)  # the common case: small deltas, one byte each, no loop per byte
        return
    for value in flat:
        _varint(value, out)


@dataclass(frozen=True)
class Snapshot:
    """What one commit persisted for one ingest partition (possibly over several chunks):
    the ingest log's mark and settled ranges, the holding log's (``holding``), and how many
    records of each parked tenant the holding log holds unsettled."""

    token: str
    lwm: int
    ranges: list[tuple[int, int]]
    hold_lwm: int = 0
    hold_ranges: list[tuple[int, int]] = field(default_factory=list)
    parked: dict[str, int] = field(default_factory=dict)
    # The spend of the partition's records under budgets (``BudgetLedger.export``).
    budgets: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Chunk:
    """One progress record: chunk ``index`` of ``count`` of the snapshot ``token`` names."""

    token: str
    index: int
    count: int
    lwm: int
    hold_lwm: int
    ranges: list[tuple[int, int]]
    hold_ranges: list[tuple[int, int]]
    parked: dict[str, int]
    budgets: list[Any] = field(default_factory=list)


def chunk_key(partition: int, index: int) -> bytes:
    """The key of chunk ``index`` of a partition's progress (compaction keeps the latest of
    each): the partition number alone for the first, as format 1 wrote it."""
    return b"%d" % partition if index == 0 else b"%d.%d" % (partition, index)


def encode_chunks(snapshot: Snapshot, limit: int = CHUNK_BYTES) -> list[bytes]:
    """The progress records of ``snapshot``, each at most about ``limit`` bytes.

    Ranges are cut into runs that fit; every chunk repeats the token, both marks and the
    chunk count, so recovery can tell a complete set (all ``count`` chunks of one token)
    from a partial or older one. The parked counts travel in the first chunk.
    """
    token = snapshot.token.encode("utf-8")
    head_room = 64 + len(token)
    parked = bytearray()
    for tenant, count in sorted(snapshot.parked.items()):
        raw = tenant.encode("utf-8")
        _varint(len(raw), parked)
        parked += raw
        _varint(count, parked)
    if head_room + len(parked) > limit:
        raise ValueError(f"{len(snapshot.parked)} parked tenants do not fit {limit} bytes")
    # A range takes at most 20 bytes (two 10-byte varints): runs sized for the worst case.
    per_chunk = max(1, (limit - head_room - len(parked)) // 20)
    runs: list[tuple[list[tuple[int, int]], list[tuple[int, int]]]] = []
    ingest, holding = snapshot.ranges, snapshot.hold_ranges
    i = j = 0
    while True:
        take = ingest[i : i + per_chunk]
        i += len(take)
        rest = per_chunk - len(take)
        held = holding[j : j + rest] if rest else []
        j += len(held)
        runs.append((take, held))
        if i >= len(ingest) and j >= len(holding):
            break
    spends = _spend_chunks(snapshot.budgets, runs, limit - head_room, len(parked))
    runs += [([], [])] * (len(spends) - len(runs))
    out: list[bytes] = []
    for index, (take, held) in enumerate(runs):
        record = bytearray([FORMAT_VERSION])
        _varint(len(token), record)
        record += token
        _varint(index, record)
        _varint(len(runs), record)
        _varint(snapshot.lwm, record)
        _varint(snapshot.hold_lwm, record)
        _varint(len(snapshot.parked) if index == 0 else 0, record)
        if index == 0:
            record += parked
        _varint(len(take), record)
        _ranges_bytes(snapshot.lwm, take, record)
        _varint(len(held), record)
        _ranges_bytes(snapshot.hold_lwm, held, record)
        entries = spends[index] if index < len(spends) else []
        _varint(len(entries), record)
        for entry in entries:
            _varint(len(entry), record)
            record += entry
        out.append(bytes(record))
    return out


def _spend_chunks(
    budgets: list[Any],
    runs: list[tuple[list[tuple[int, int]], list[tuple[int, int]]]],
    room: int,
    parked: int,
) -> list[list[bytes]]:
    """The budget entries (each as compact JSON) per chunk: into the room the ranges leave
    in each chunk, then in chunks of their own."""
    if not budgets:
        return []
    encoded = deque(json.dumps(e, separators=(",", ":")).encode("utf-8") for e in budgets)
    chunks: list[list[bytes]] = []
    for index in range(len(runs) + len(encoded)):
        if not encoded:
            break
        used = 20 * (len(runs[index][0]) + len(runs[index][1])) if index < len(runs) else 0
        left = room - used - (parked if index == 0 else 0)
        here: list[bytes] = []
        while encoded and (not here or len(encoded[0]) + 10 <= left):
            entry = encoded.popleft()
            if len(entry) + 10 > room:
                raise ValueError(f"a budget entry of {len(entry)} bytes does not fit a chunk")
            here.append(entry)
            left -= len(entry) + 10
        chunks.append(here)
    return chunks


def decode_chunk(data: bytes) -> Chunk:
    """One progress record (format 1, 2 or 3). Raises ``ProgressFormatError``."""
    version = data[0] if data else None
    if version not in (1, 2, FORMAT_VERSION):
        raise ProgressFormatError(
            f"progress record of format {version}; this version reads 1 to {FORMAT_VERSION}"
        )
    size, pos = _read_varint(data, 1)
    if pos + size > len(data):
        raise ProgressFormatError("progress record ends inside its token")
    token = data[pos : pos + size].decode("utf-8", errors="replace")
    pos += size
    index, count, hold_lwm = 0, 1, 0
    parked: dict[str, int] = {}
    if version >= 2:
        index, pos = _read_varint(data, pos)
        count, pos = _read_varint(data, pos)
        if index >= count:
            raise ProgressFormatError(f"chunk {index} of {count}")
    lwm, pos = _read_varint(data, pos)
    if version >= 2:
        hold_lwm, pos = _read_varint(data, pos)
        tenants, pos = _read_varint(data, pos)
        for _ in range(tenants):
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise ProgressFormatError("progress record ends inside a tenant id")
            tenant = data[pos : pos + size].decode("utf-8", errors="replace")
            pos += size
            parked[tenant], pos = _read_varint(data, pos)
    ranges, pos = _read_ranges(data, pos, lwm)
    hold_ranges: list[tuple[int, int]] = []
    if version >= 2:
        hold_ranges, pos = _read_ranges(data, pos, hold_lwm)
    budgets: list[Any] = []
    if version >= 3:
        entries, pos = _read_varint(data, pos)
        for _ in range(entries):
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise ProgressFormatError("progress record ends inside a budget entry")
            try:
                budgets.append(json.loads(data[pos : pos + size]))
            except ValueError as exc:
                raise ProgressFormatError(f"a budget entry is not JSON: {exc}") from None
            pos += size
    if pos != len(data):
        raise ProgressFormatError(f"{len(data) - pos} bytes after the last range")
    return Chunk(token, index, count, lwm, hold_lwm, ranges, hold_ranges, parked, budgets)


def _read_ranges(data: bytes, pos: int, base: int) -> tuple[list[tuple[int, int]], int]:
    count, pos = _read_varint(data, pos)
    if count > len(data) - pos:  # two bytes a range at least: refuse before allocating
        raise ProgressFormatError(f"{count} ranges announced, {len(data) - pos} bytes left")
    ranges: list[tuple[int, int]] = []
    previous = base
    for _ in range(count):
        gap, pos = _read_varint(data, pos)
        length, pos = _read_varint(data, pos)
        start = previous + gap
        ranges.append((start, start + length))
        previous = start + length
    return ranges, pos


def assemble(chunks: Iterable[Chunk]) -> Snapshot | None:
    """The snapshot of a complete set of chunks of one token (any order), else None."""
    parts = {c.index: c for c in chunks}
    if not parts:
        return None
    first = parts.get(0)
    if first is None or len(parts) != first.count:
        return None
    ordered = [parts[i] for i in range(first.count)]
    return Snapshot(
        first.token,
        first.lwm,
        [r for c in ordered for r in c.ranges],
        first.hold_lwm,
        [r for c in ordered for r in c.hold_ranges],
        dict(first.parked),
        [e for c in ordered for e in c.budgets],
    )


def encode(token: str, lwm: int, ranges: Iterable[tuple[int, int]]) -> bytes:
    """One progress record of ingest ranges only (a snapshot small enough for one chunk)."""
    records = encode_chunks(Snapshot(token, lwm, list(ranges)), limit=1 << 62)
    return records[0]


def decode(data: bytes) -> tuple[str, int, list[tuple[int, int]]]:
    """``(token, lwm, ranges)`` of a one-chunk progress record. Raises
    ``ProgressFormatError``."""
    chunk = decode_chunk(data)
    if chunk.count != 1:
        raise ProgressFormatError(f"chunk {chunk.index} of {chunk.count}, not a whole record")
    return chunk.token, chunk.lwm, chunk.ranges
