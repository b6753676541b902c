"""The records the scheduler's stages pass on, one type per stage, with named fields.

``Parsed``: an ingest record the ingest thread read and checked (``handoff``; there also a
run of records it passed over, ``passed_over``); the same
object then waits in its tenant's backlog in the core (``backlog``), its payload dropped
(``msg`` None) when ``--buffer-memory`` is spent. Its payload (``Held``) is its value alone
without headers, a ``Headed`` with headers, and the consumer's message only when it is
invalid or was read back. ``Letter``: a dead letter to be written
(``backlog``, ``send``, ``holding``). ``Prepared``: a record picked and stamped while a
commit was in flight (``send``).

They are NamedTuples: a field is read by name at the cost of a tuple index, and a record
costs what a tuple costs in memory. Building one costs more than a bare tuple (measured:
0.34 us for ``Parsed(...)``, 0.20 us for ``new(Parsed, (...))`` (``tuple.__new__``, no
Python frame), 0.04 us for a tuple), so the per-record path builds one record per ingest
record, with ``new``, and the backlog keeps that record rather than building another.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final, NamedTuple, cast

from confluent_kafka import Message

from fairstream import wire
from fairstream.wire.dead_letter import HeaderList

if TYPE_CHECKING:
    from fairstream.core import Pick

__all__ = [
    "FOOTPRINT",
    "HEADER_FOOTPRINT",
    "Headed",
    "Held",
    "Letter",
    "Parsed",
    "Prepared",
    "enqueued_of",
    "footprint_of",
    "headed",
    "held_headers",
    "held_key",
    "held_value",
    "new",
    "pack",
    "passed_over",
    "stored",
    "unpack",
    "unread",
]

new = tuple.__new__  # new(Parsed, (partition, offset, ...)): a Parsed, with no Python frame


# What a held payload costs besides its value, in bytes (the tuples and objects that hold it
# in the backlog), and what each header of its own adds besides its name and value.
FOOTPRINT: Final = 456
HEADER_FOOTPRINT: Final = 64


# A valid record with headers of its own (a cost, a trace context), as the backlog holds it:
# ``(value, headers, size)``, its value, its headers as the consumer gave them, and its
# footprint (bytes it costs in memory, roughly: ``--buffer-memory``'s count), reckoned once
# as it arrives (``headed``). Its key is its tenant id (``Parsed.tenant``). A plain tuple,
# told apart by its type (``type(msg) is tuple``): compiled, one is built in place, where a
# NamedTuple went through ``tuple.__new__`` (0.27 us against about 0.1 us for ``headed``).
Headed = tuple[bytes | None, HeaderList, int]


# A record as the backlog holds it: for a valid record without headers, its value alone; for
# a valid record with headers, a ``Headed``; the consumer's message only for a record that
# breaks the ingest contract (a dead letter to be, whose key may be no tenant id) or one read
# back. A message costs 248 bytes beyond its value (the object, its key, a topic string of
# its own), which a million one-record tenants paid a million times. Records with headers
# are cost-weighted producers' every record: held as messages, each emission read the message
# and walked its headers for the footprint long after it arrived, out of the CPU's caches,
# as their tenants drained at different speeds.
Held = Message | bytes | Headed


def footprint_of(value: bytes | None, headers: HeaderList | None) -> int:
    """Memory a held payload of ``value`` and ``headers`` costs, roughly: the value, the key
    (at most 255 bytes), the objects, and the headers when there are some. The one formula
    for every form a payload is held in (``egress.footprint``)."""
    size = FOOTPRINT if value is None else FOOTPRINT + len(value)
    if headers:
        size += HEADER_FOOTPRINT * len(headers)
        for _, given in headers:  # a loop, not sum(...): a list made first, compiled
            if given:
                size += len(given)
    return size


def headed(value: bytes | None, headers: HeaderList) -> Headed:
    """A valid record with headers of its own as the backlog holds it, its footprint
    reckoned once, as it arrives. Caller: the ingest thread, once per such record."""
    return (value, headers, footprint_of(value, headers))


class Parsed(NamedTuple):
    """An ingest record read and checked, then (valid) in its tenant's backlog. ``tenant``
    is None and ``invalid`` says why when it breaks the ingest contract. ``msg`` is None
    only in the backlog, for a payload not held in memory (read back when it goes)."""

    partition: int  # the ingest partition, or its holding log's id (negative)
    offset: int
    tenant: str | None
    cost: int
    deadline: int | None  # epoch ms
    enqueued: int  # epoch ms
    msg: Held | None
    invalid: wire.Invalid | None


def passed_over(partition: int, first: int, tenant: str, count: int) -> Parsed:
    """A run of ``count`` records of ``tenant`` at consecutive offsets from ``first`` that the
    ingest thread read and passed over without parsing them: they wait in the ingest log,
    and the emitter reads them again when their tenant's turn nears (``emitter.spill``).

    In the handoff queue only, it is the one ``Parsed`` without a payload (``msg`` None), and
    its ``cost`` is the run's length: a record in the queue costs one tuple, and a run of a
    bursting tenant's records (thousands in a row) costs one too."""
    return new(Parsed, (partition, first, tenant, count, None, 0, None, None))


def unread(partition: int, offset: int, tenant: str, msg: Held | None = None) -> Parsed:
    """One record of ``tenant`` known by its place alone: an offset of a run in the log (a
    refused run's next letter, a record gone from the log), to be read back when it is
    written; or, with ``msg``, what that read gave. Cost 1, no deadline, never enqueued."""
    return new(Parsed, (partition, offset, tenant, 1, None, 0, msg, None))


def held_value(msg: Held) -> bytes | None:
    """The record's value."""
    if type(msg) is bytes:
        return msg
    if type(msg) is tuple:
        return msg[0]
    return cast(Message, msg).value()


def held_headers(msg: Held) -> HeaderList | None:
    """The record's own headers (None: it has none)."""
    if type(msg) is bytes:
        return None
    if type(msg) is tuple:
        return msg[1]
    return cast("HeaderList | None", cast(Message, msg).headers())


def held_key(msg: Held, tenant: str | None) -> bytes | None:
    """The record's key: a valid record's is its tenant id."""
    if type(msg) is bytes or type(msg) is tuple:
        assert tenant is not None  # only a valid record is held without its message
        return tenant.encode()
    return cast(Message, msg).key()


# A valid record without headers as it waits in the core by the hundred thousand (``pack``):
# its partition, offset and enqueued ms, then its value, in one bytes object. Waiting as a
# ``Parsed``, it costs the tuple (112 bytes), its offset (an int of 32) and its value's own
# object (33 bytes besides the value); packed, 53 bytes besides the value. A million
# one-record tenants buffered saved about 120 MB. Packing and unpacking cost about 0.4 us a
# record, which is why only records that wait in such numbers are packed (``backlog``).
_PACKED = struct.Struct("<iqq")
_PACK, _UNPACK, _AT = _PACKED.pack, _PACKED.unpack_from, _PACKED.size


def pack(partition: int, offset: int, enqueued: int, value: bytes) -> bytes:
    """A valid record without headers (its ``msg`` its value alone), packed: what ``unpack``
    makes a ``Parsed`` again, given its tenant."""
    return _PACK(partition, offset, enqueued) + value


def stored(entry: Parsed) -> Parsed | bytes:
    """``entry`` packed (``pack``) if it is what ``unpack`` rebuilds (its value alone, cost
    1, no deadline); else ``entry`` as it is."""
    msg = entry.msg
    if type(msg) is bytes and entry.cost == 1 and entry.deadline is None:
        return pack(entry.partition, entry.offset, entry.enqueued, msg)
    return entry


def unpack(tenant: str, stored: Parsed | bytes) -> Parsed:
    """The ``Parsed`` record ``pack`` packed (cost 1, no deadline); a ``Parsed`` as it is.
    Caller: the core (``FairScheduler.store_as``), as a record leaves it."""
    if type(stored) is not bytes:
        return cast(Parsed, stored)
    partition, offset, enqueued = _UNPACK(stored)
    return new(Parsed, (partition, offset, tenant, 1, None, enqueued, stored[_AT:], None))


_ENQUEUED_AT = struct.Struct("<q").unpack_from, struct.calcsize("<iq")


def enqueued_of(stored: Parsed | bytes) -> int:
    """A record's enqueued ms, packed (``pack``) or not, without unpacking the rest."""
    if type(stored) is bytes:
        return cast(int, _ENQUEUED_AT[0](stored, _ENQUEUED_AT[1])[0])
    return cast(Parsed, stored).enqueued


class Letter(NamedTuple):
    """A dead letter to be written: the record, why (a ``fairstream-dlq-reason`` word) and a
    sentence. ``tenant`` is None for a record whose key is no tenant id."""

    tenant: str | None
    entry: Parsed
    reason: str
    detail: str


class Prepared(NamedTuple):
    """A pick stamped while a commit was in flight. ``headers`` is None when the sender
    must decide after the commit (a payload to read back, a record too large)."""

    pick: Pick[Parsed]
    stamp: int  # epoch ms
    key: bytes | None
    value: bytes | None
    headers: HeaderList | None
