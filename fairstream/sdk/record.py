"""The ingest record every fairstream producer writes: ``fairstream.Producer``,
``fairstream.aio.AsyncProducer`` and ``fairstream.faust.IngestWriter``.

Key = tenant id (UTF-8), value = the payload bytes untouched, then the caller's headers and
the ``fairstream-*`` ones (``fairstream.wire.ingest_headers``). ``IngestOptions`` declares
once what a producer takes beside the tenant and the payload; the defaults are
``ingest_headers``'s. Pure: no Kafka client, so a Faust app builds its records without
loading confluent-kafka.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict, Unpack

from fairstream import wire

__all__ = ["IngestOptions", "ingest_record"]


class IngestOptions(TypedDict, total=False):
    """The keyword arguments of a submit (``Producer.submit``, ``IngestWriter.send``...).

    ``cost``: a positive integer (e.g. tokens), 1 when not given; ``request_id``: the
    idempotency key (ASCII; default ``<topic>-<partition>-<offset>`` of the ingest record);
    ``deadline``: an aware datetime or epoch milliseconds after which the scheduler
    dead-letters the request as expired; ``headers``: the caller's own headers, written
    first (names starting with ``fairstream-`` are reserved).
    """

    cost: int
    request_id: str | None
    deadline: datetime | int | None
    headers: wire.HeaderInput | None


def ingest_record(
    tenant: str, payload: bytes, **options: Unpack[IngestOptions]
) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """Key, value and headers of one ingest record, checked against the contract (raises
    ValueError/TypeError for a record the scheduler would dead-letter as invalid)."""
    key = wire.tenant_key(tenant)
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}; encode text first")
    return key, bytes(payload), wire.ingest_headers(**options)
