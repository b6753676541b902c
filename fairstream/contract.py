"""The record contracts users rely on: header names, dead-letter reasons, ingest validation.

An ingest record is keyed by tenant id (UTF-8, 1 to 255 bytes); its value is opaque bytes;
``fairstream-*`` headers are optional and ASCII. Validation here is pure: it turns a raw
record into the fields the scheduler needs, or into a dead-letter reason and a sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Ingest headers (all optional).
REQUEST_ID = "fairstream-request-id"
COST = "fairstream-cost"
DEADLINE_MS = "fairstream-deadline-ms"
# Added on egress.
TENANT = "fairstream-tenant"
ENQUEUED_MS = "fairstream-enqueued-ms"
SCHEDULED_MS = "fairstream-scheduled-ms"
# Added on dead letters.
DLQ_REASON = "fairstream-dlq-reason"
DLQ_DETAIL = "fairstream-dlq-detail"
# Where a dead letter's record was read (the ingest log keeps it until it is trimmed).
DLQ_TOPIC = "fairstream-dlq-topic"
DLQ_PARTITION = "fairstream-dlq-partition"
DLQ_OFFSET = "fairstream-dlq-offset"
# On a dead letter cut to fit the dead-letter topic: the original value's size, and how many
# original headers were left out.
DLQ_VALUE_BYTES = "fairstream-dlq-value-bytes"
DLQ_HEADERS_DROPPED = "fairstream-dlq-headers-dropped"

# Dead-letter reasons: short machine words.
INVALID_KEY = "invalid-key"
INVALID_HEADER = "invalid-header"
INVALID_VALUE = "invalid-value"
BACKLOG_FULL = "backlog-full"
EXPIRED = "expired"
PURGED = "purged"
HANDLER_FAILED = "handler-failed"
TOO_LARGE = "too-large"  # does not fit on the egress (or dead-letter) topic
LOST = "lost"  # deleted from the ingest log (retention) before it could be emitted

MAX_TENANT_BYTES = 255
MAX_REQUEST_ID_BYTES = 1024
MAX_COST = 2**31 - 1
MAX_EPOCH_MS = 2**63 - 1

Headers = Sequence[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Valid:
    """An ingest record that may be buffered."""

    tenant: str
    cost: int
    deadline_ms: int | None
    request_id: str | None  # None: the default ``<topic>-<partition>-<offset>`` applies


@dataclass(frozen=True, slots=True)
class Invalid:
    """An ingest record that goes to the dead-letter topic."""

    reason: str
    detail: str


def _ascii(name: str, raw: bytes | None) -> str | Invalid:
    if raw is None:
        return Invalid(INVALID_HEADER, f"header {name} has no value")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        return Invalid(INVALID_HEADER, f"header {name} is not ASCII: {raw[:40]!r}")


def _positive_int(name: str, text: str, limit: int) -> int | Invalid:
    stripped = text.strip()
    if not stripped.isdigit():
        return Invalid(
            INVALID_HEADER, f"header {name} must be a positive integer, got {text[:40]!r}"
        )
    # Length first: int() refuses (raises on) strings of more than 4,300 digits.
    if len(stripped) > len(str(limit)) or not 1 <= int(stripped) <= limit:
        return Invalid(
            INVALID_HEADER, f"header {name} must be between 1 and {limit}, got {stripped[:40]}"
        )
    return int(stripped)


def validate_ingest(key: bytes | None, value: bytes | None, headers: Headers) -> Valid | Invalid:
    """Check an ingest record against the contract.

    Caller: the ingest agent, for every record. Affects: nothing (pure).
    """
    if key is None:
        return Invalid(INVALID_KEY, "the record has no key; the key must be the tenant id")
    if not 1 <= len(key) <= MAX_TENANT_BYTES:
        return Invalid(
            INVALID_KEY,
            f"the tenant id (record key) must be 1 to {MAX_TENANT_BYTES} bytes, got {len(key)}",
        )
    try:
        tenant = key.decode("utf-8")
    except UnicodeDecodeError:
        return Invalid(INVALID_KEY, f"the tenant id (record key) is not valid UTF-8: {key[:40]!r}")
    if value is None:
        return Invalid(
            INVALID_VALUE,
            "the record value is null (a tombstone); send an empty value for an empty payload",
        )
    cost = 1
    deadline_ms: int | None = None
    request_id: str | None = None
    for name, raw in headers:
        if not name.startswith("fairstream-"):
            continue
        if name in (COST, DEADLINE_MS):
            text = _ascii(name, raw)
            if isinstance(text, Invalid):
                return text
            parsed = _positive_int(name, text, MAX_COST if name == COST else MAX_EPOCH_MS)
            if isinstance(parsed, Invalid):
                return parsed
            if name == COST:
                cost = parsed
            else:
                deadline_ms = parsed
        elif name == REQUEST_ID:
            text = _ascii(name, raw)
            if isinstance(text, Invalid):
                return text
            if not text:
                return Invalid(INVALID_HEADER, f"header {name} is empty")
            if len(text) > MAX_REQUEST_ID_BYTES:
                return Invalid(
                    INVALID_HEADER,
                    f"header {name} is {len(text)} bytes; at most {MAX_REQUEST_ID_BYTES} allowed",
                )
            request_id = text
    return Valid(tenant, cost, deadline_ms, request_id)


def default_request_id(topic: str, partition: int, offset: int) -> str:
    """The request id of a record that brought none: where it was ingested."""
    return f"{topic}-{partition}-{offset}"


def dead_letter_headers(
    headers: Headers,
    reason: str,
    detail: str,
    source: tuple[str, int, int] | None = None,
) -> list[tuple[str, bytes | None]]:
    """The original headers, as they were (null values too), plus reason and sentence, and
    the ingest coordinates ``(topic, partition, offset)`` when the record came from there."""
    out: list[tuple[str, bytes | None]] = list(headers)
    out.append((DLQ_REASON, reason.encode()))
    out.append((DLQ_DETAIL, detail.encode("utf-8")))
    if source is not None:
        topic, partition, offset = source
        out.append((DLQ_TOPIC, topic.encode("utf-8")))
        out.append((DLQ_PARTITION, str(partition).encode()))
        out.append((DLQ_OFFSET, str(offset).encode()))
    return out
