"""The dead-letter contract: what goes to the dead-letter topic, and cut to fit it.

A dead letter carries the original key, value and headers, the reason and a sentence, and
the ingest coordinates (``dead_letter_headers``). When it would not fit the dead-letter
topic (``max.message.bytes``) its value is cut (possibly to nothing) and original headers
are left out, counted in ``fairstream-dlq-value-bytes`` and
``fairstream-dlq-headers-dropped``. Pure.
"""

from __future__ import annotations

from fairstream.wire import records
from fairstream.wire.records import Headers

__all__ = [
    "RECORD_OVERHEAD",
    "HeaderList",
    "dead_letter_headers",
    "expired_detail",
    "fit",
    "header_bytes",
    "lost_detail",
    "purge_detail",
]

HeaderList = list[tuple[str, bytes | None]]

RECORD_OVERHEAD = 512  # bytes a record adds to its key, value and headers, rounded up


def dead_letter_headers(
    headers: Headers,
    reason: str,
    detail: str,
    source: tuple[str, int, int] | None = None,
) -> HeaderList:
    """The original headers, as they were (null values too), plus reason and sentence, and
    the ingest coordinates ``(topic, partition, offset)`` when the record came from there."""
    out: HeaderList = list(headers)
    out.append((records.DLQ_REASON, reason.encode()))
    out.append((records.DLQ_DETAIL, detail.encode("utf-8")))
    if source is not None:
        topic, partition, offset = source
        out.append((records.DLQ_TOPIC, topic.encode("utf-8")))
        out.append((records.DLQ_PARTITION, str(partition).encode()))
        out.append((records.DLQ_OFFSET, str(offset).encode()))
    return out


def header_bytes(header: tuple[str, bytes | None]) -> int:
    return len(header[0]) + (len(header[1]) if header[1] else 0) + 8


def fit(
    key: bytes | None, value: bytes | None, headers: HeaderList, limit: int
) -> tuple[HeaderList, bytes | None]:
    """Headers and value of a dead letter cut to fit ``limit`` bytes: as much of the value
    as fits (possibly none), and the original headers as long as they fit."""
    fixed = len(key or b"") + RECORD_OVERHEAD + 64
    total = fixed + sum(header_bytes(h) for h in headers)
    if total > limit:
        # Keep every fairstream-dlq-* header, then the originals in order while they fit.
        ours = [h for h in headers if h[0].startswith("fairstream-dlq-")]
        room = limit - fixed - sum(header_bytes(h) for h in ours)
        kept: HeaderList = []
        for h in headers:
            if h[0].startswith("fairstream-dlq-"):
                continue
            if header_bytes(h) > room:
                break
            room -= header_bytes(h)
            kept.append(h)
        dropped = len(headers) - len(ours) - len(kept)
        headers = [*kept, *ours, (records.DLQ_HEADERS_DROPPED, str(dropped).encode())]
        total = limit - room + 40
    if value is not None and total + len(value) > limit:
        room = max(0, limit - total - 40)
        headers = [*headers, (records.DLQ_VALUE_BYTES, str(len(value)).encode())]
        value = value[:room] if room else None
    return headers, value


def purge_detail(tenant: str, before_ms: int) -> str:
    return (
        f"tenant {tenant!r} was purged: records enqueued up to {before_ms} (epoch ms) moved "
        "to the dead-letter topic"
    )


def budget_detail(
    tenant: str, scope: str, budget: str, cost: int, remaining: int, fits_at_ms: int
) -> str:
    """Why a record did not fit a budget (``scope``: the tenant, or ``group:`` and its
    tenant group; ``budget`` in its text form)."""
    whose = f"tenant {tenant!r}" if scope == tenant else f"{scope} (of tenant {tenant!r})"
    return (
        f"the budget {budget} of {whose} has {remaining} left, the record costs {cost}; "
        f"it has room again at {fits_at_ms} (epoch ms)"
    )


def lost_detail(partition: int, offset: int, log_start: int | None = None) -> str:
    where = "" if log_start is None else f" (the partition's log starts at {log_start} now)"
    return (
        f"ingest record {partition}@{offset} was deleted from the log{where} (retention or "
        "delete_records) before it could be emitted"
    )


def expired_detail(tenant: str, deadline: int, now: int, buffered: bool) -> str:
    if not buffered:
        return f"the deadline {deadline} passed {now - deadline} ms before the record was buffered"
    return (
        f"deadline {deadline} passed {now - deadline} ms before tenant {tenant!r}'s record "
        "could be sent"
    )
