"""Keys and values of the per-tenant buffer table.

A buffered record is one table entry. Its key is ``b"r" + len(tenant) + tenant + offset``
(the ingest offset as 8 big-endian bytes), so a store iterated in key order yields each
tenant's records in FIFO order, and writing the same ingest record twice (a replay after a
crash) writes the same key: buffering is idempotent. The per-partition watermark
``b"w" + partition`` records the highest ingest offset already buffered; replayed records at
or below it are skipped, so a record that was emitted and popped is never buffered again.

Values are a small fixed binary layout rather than Avro: this runs twice per record on the
hot path (buffer, emit), where the pure-Python Avro encoder would cap throughput.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

RECORD_PREFIX = b"r"
WATERMARK_PREFIX = b"w"
VERSION = 1

_OFFSET = struct.Struct(">Q")
_PARTITION = struct.Struct(">I")
# version, enqueued_ms, deadline_ms (-1: none), cost, source partition, header count
_HEAD = struct.Struct(">BqqIIH")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")


def record_key(tenant: bytes, offset: int) -> bytes:
    """The table key of the ingest record of ``tenant`` (UTF-8 bytes) at ``offset``."""
    return RECORD_PREFIX + bytes((len(tenant),)) + tenant + _OFFSET.pack(offset)


def parse_record_key(key: bytes) -> tuple[bytes, int]:
    """(tenant bytes, ingest offset) of a record key."""
    if key[:1] != RECORD_PREFIX:
        raise ValueError(f"not a record key: {key!r}")
    tenant = record_tenant(key)
    return tenant, _OFFSET.unpack_from(key, 2 + len(tenant))[0]


def record_tenant(key: bytes) -> bytes:
    """The tenant id (the ingest record's key, as it came in) of a record key."""
    return key[2 : 2 + key[1]]


def watermark_key(partition: int) -> bytes:
    return WATERMARK_PREFIX + _PARTITION.pack(partition)


def encode_offset(offset: int) -> bytes:
    return _OFFSET.pack(offset)


def decode_offset(raw: bytes) -> int:
    return int(_OFFSET.unpack(raw)[0])


def peek_cost(raw: bytes) -> int:
    """The cost of an encoded envelope, without decoding the rest (used when rebuilding)."""
    return int(_HEAD.unpack_from(raw)[3])


@dataclass(frozen=True, slots=True)
class Envelope:
    """A buffered ingest record: everything egress needs, the value byte-identical."""

    enqueued_ms: int
    deadline_ms: int | None
    cost: int
    partition: int
    request_id: str
    headers: list[tuple[str, bytes | None]]
    value: bytes

    def encode(self) -> bytes:
        parts = [
            _HEAD.pack(
                VERSION,
                self.enqueued_ms,
                -1 if self.deadline_ms is None else self.deadline_ms,
                self.cost,
                self.partition,
                len(self.headers),
            )
        ]
        rid = self.request_id.encode("utf-8")
        parts += (_U32.pack(len(rid)), rid)
        for name, raw in self.headers:
            encoded = name.encode("utf-8")
            parts += (_U32.pack(len(encoded)), encoded)
            if raw is None:
                parts.append(_I32.pack(-1))
            else:
                parts += (_I32.pack(len(raw)), raw)
        parts.append(self.value)
        return b"".join(parts)

    @classmethod
    def decode(cls, raw: bytes) -> Envelope:
        version, enqueued_ms, deadline_ms, cost, partition, n_headers = _HEAD.unpack_from(raw)
        if version != VERSION:
            raise ValueError(f"unknown buffer envelope version {version}")
        pos = _HEAD.size
        (n,) = _U32.unpack_from(raw, pos)
        pos += 4
        request_id = raw[pos : pos + n].decode("utf-8")
        pos += n
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(n_headers):
            (n,) = _U32.unpack_from(raw, pos)
            pos += 4
            name = raw[pos : pos + n].decode("utf-8")
            pos += n
            (size,) = _I32.unpack_from(raw, pos)
            pos += 4
            if size < 0:
                headers.append((name, None))
            else:
                headers.append((name, raw[pos : pos + size]))
                pos += size
        return cls(
            enqueued_ms=enqueued_ms,
            deadline_ms=None if deadline_ms < 0 else deadline_ms,
            cost=cost,
            partition=partition,
            request_id=request_id,
            headers=headers,
            value=raw[pos:],
        )
