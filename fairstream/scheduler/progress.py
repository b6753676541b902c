"""What the scheduler persists: per ingest partition, how far its records are settled.

A record is *settled* once it has been emitted, dead-lettered, expired or purged. Settling
happens out of offset order (tenants are served round robin), so a partition's progress is
its *low-water mark* (the lowest offset not yet settled: everything below it is done) plus
the settled ranges above it. Offsets the consumer never sees (transaction markers, aborted
or compacted records) are settled as gaps when the next record shows up.

The low-water mark is committed as the consumer group's offset, in the same Kafka
transaction as the egress records that advanced it; the ranges above it travel in the same
transaction as a record of the progress topic (``encode``/``decode``), because commit
metadata is limited to 4 KB and a noisy tenant that pins the mark can make the set larger.
A settled offset never becomes unsettled again, so an older progress record is never wrong,
only incomplete.

Pure: no Kafka, no clock. Caller: the emitter thread, which owns every instance.
"""

from __future__ import annotations

from collections.abc import Iterable

from fairstream.errors import Error

FORMAT_VERSION = 1


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
        "_starts",
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
        self._starts: dict[int, int] = {}
        self._ends: dict[int, int] = {}
        # Ranges settled before a restart: the log is read again from the mark, and these
        # records are skipped as they come by.
        self._recovered = sorted((max(s, lwm), e) for s, e in settled if e > max(s, lwm))
        self._cursor = 0
        # Offsets at or past this were settled after no recovered range: no need to ask.
        self.replay_end = self._recovered[-1][1] if self._recovered else -1
        for start, end in self._recovered:
            self.settle_range(start, end)

    # -- reading the log ------------------------------------------------------------------

    def observe(self, offset: int) -> None:
        """The log delivered ``offset``: offsets skipped since the last one are gaps.

        Caller: the emitter, for every ingest record of the partition, in log order.
        Affects: ``next``; the settled ranges (gaps); possibly the low-water mark.
        """
        if offset > self.next:
            self.settle_range(self.next, offset)
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

    def settle(self, offset: int) -> None:
        """Mark one offset settled. Caller: the emitter, once its record is in a transaction
        (once per egress record, hence its own flat code)."""
        if offset < self.lwm:
            return
        self.changes += 1
        start, end = offset, offset + 1
        starts, ends = self._starts, self._ends
        # One offset can only touch the range ending at it and the one starting after it.
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
        """Mark ``[start, end)`` settled. Each offset is settled once (the emitter's rule);
        a range that overlaps settled ones (a recovered record's) is merged with them."""
        start = max(start, self.lwm)
        if end <= start:
            return
        if end - start == 1:
            self.settle(start)
            return
        self.changes += 1
        starts, ends = self._starts, self._ends
        for s in [s for s, e in starts.items() if s <= end and e >= start]:
            e = starts.pop(s)
            del ends[e]
            start, end = min(start, s), max(end, e)
        if start == self.lwm:
            self.lwm = end
            return
        starts[start] = end
        ends[end] = start

    # -- what is persisted ----------------------------------------------------------------

    def ranges(self) -> list[tuple[int, int]]:
        """The settled ranges above the low-water mark, in offset order."""
        return sorted(self._starts.items())

    @property
    def settled_above(self) -> int:
        """How many ranges are settled above the mark (what a progress record carries)."""
        return len(self._starts)

    def __repr__(self) -> str:
        return f"PartitionProgress(lwm={self.lwm}, next={self.next}, ranges={self.ranges()[:4]})"


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


def encode(token: str, lwm: int, ranges: Iterable[tuple[int, int]]) -> bytes:
    """A progress record: version, commit token, mark, then each range as two deltas.

    ``token`` ties the record to the offset commit of the same transaction (it is also the
    commit's metadata), so recovery can tell a record from an older transaction.
    """
    raw = token.encode("utf-8")
    out = bytearray([FORMAT_VERSION])
    _varint(len(raw), out)
    out += raw
    _varint(lwm, out)
    previous = lwm
    body = bytearray()
    count = 0
    for start, end in ranges:
        _varint(start - previous, body)
        _varint(end - start, body)
        previous = end
        count += 1
    _varint(count, out)
    out += body
    return bytes(out)


def decode(data: bytes) -> tuple[str, int, list[tuple[int, int]]]:
    """``(token, lwm, ranges)`` of a progress record. Raises ``ProgressFormatError``."""
    if not data or data[0] != FORMAT_VERSION:
        raise ProgressFormatError(
            f"progress record of format {data[0] if data else None}; this version reads "
            f"{FORMAT_VERSION}"
        )
    size, pos = _read_varint(data, 1)
    token = data[pos : pos + size].decode("utf-8", errors="replace")
    pos += size
    lwm, pos = _read_varint(data, pos)
    count, pos = _read_varint(data, pos)
    ranges: list[tuple[int, int]] = []
    previous = lwm
    for _ in range(count):
        gap, pos = _read_varint(data, pos)
        length, pos = _read_varint(data, pos)
        start = previous + gap
        ranges.append((start, start + length))
        previous = start + length
    if pos != len(data):
        raise ProgressFormatError(f"{len(data) - pos} bytes after the last range")
    return token, lwm, ranges
