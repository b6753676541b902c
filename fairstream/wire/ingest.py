"""The ingest contract: what a valid ingest record is, from both ends.

An ingest record is keyed by tenant id (UTF-8, 1 to 255 bytes); its value is opaque bytes;
``fairstream-*`` headers are optional and ASCII. ``validate_ingest`` turns a raw record into
the fields the scheduler needs, or into a dead-letter reason and a sentence;
``ingest_headers`` builds the headers of a record that passes it (the producer's side).
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from fairstream.wire.records import (
    COST,
    DEADLINE_MS,
    INVALID_HEADER,
    INVALID_KEY,
    INVALID_VALUE,
    MAX_COST,
    MAX_EPOCH_MS,
    REQUEST_ID,
    RESERVED_PREFIX,
    Headers,
)
from fairstream.wire.rules import (
    check_cost,
    check_request_id,
    deadline_ms,
    header_int,
    request_id_problem,
    tenant_of,
    tenant_problem,
)

__all__ = [
    "HeaderInput",
    "Invalid",
    "Valid",
    "default_request_id",
    "ingest_headers",
    "validate_ingest",
]

HeaderInput = Mapping[str, str | bytes] | Iterable[tuple[str, str | bytes]]


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


def validate_ingest(key: bytes | None, value: bytes | None, headers: Headers) -> Valid | Invalid:
    """Check an ingest record against the contract.

    Caller: the scheduler's ingest, for every record. Affects: nothing (pure).
    """
    if key is None:
        return Invalid(INVALID_KEY, "the record has no key; the key must be the tenant id")
    tenant = tenant_of(key)
    if tenant is None:
        return Invalid(INVALID_KEY, f"{tenant_problem(key)} (the record key)")
    if value is None:
        return Invalid(
            INVALID_VALUE,
            "the record value is null (a tombstone); send an empty value for an empty payload",
        )
    cost = 1
    deadline: int | None = None
    request_id: str | None = None
    for name, raw in headers:
        if not name.startswith(RESERVED_PREFIX):
            continue
        if name in (COST, DEADLINE_MS):
            parsed = header_int(name, raw, MAX_COST if name == COST else MAX_EPOCH_MS)
            if isinstance(parsed, str):
                return Invalid(INVALID_HEADER, parsed)
            if name == COST:
                cost = parsed
            else:
                deadline = parsed
        elif name == REQUEST_ID:
            if raw is None:
                return Invalid(INVALID_HEADER, f"header {name} has no value")
            try:
                text = raw.decode("ascii")
            except UnicodeDecodeError:
                return Invalid(INVALID_HEADER, f"header {name} is not ASCII: {raw[:40]!r}")
            problem = request_id_problem(text)
            if problem is not None:
                return Invalid(INVALID_HEADER, f"header {name}: {problem}")
            request_id = text
    return Valid(tenant, cost, deadline, request_id)


def default_request_id(topic: str, partition: int, offset: int) -> str:
    """The request id of a record that brought none: where it was ingested."""
    return f"{topic}-{partition}-{offset}"


def ingest_headers(
    *,
    cost: int = 1,
    request_id: str | None = None,
    deadline: datetime | int | None = None,
    headers: HeaderInput | None = None,
) -> list[tuple[str, bytes]]:
    """The headers of one ingest record: the caller's own, then the fairstream-* ones.

    ``fairstream-cost`` is always written (so a reader never has to know the default);
    ``fairstream-request-id`` and ``fairstream-deadline-ms`` only when given. Header names
    starting with ``fairstream-`` are reserved: pass cost/request_id/deadline instead.
    Raises TypeError/ValueError for what ``validate_ingest`` would refuse.
    Caller: Producer.submit, ``fairstream submit``. Affects: nothing (pure).
    """
    check_cost(cost)
    out: list[tuple[str, bytes]] = []
    items = headers.items() if isinstance(headers, Mapping) else (headers or ())
    for name, value in items:
        if not isinstance(name, str) or not name:
            raise ValueError(f"header names must be non-empty strings, got {name!r}")
        if name.startswith(RESERVED_PREFIX):
            raise ValueError(
                f"header {name} is reserved for fairstream; "
                "use the cost, request_id and deadline arguments"
            )
        if isinstance(value, str):
            out.append((name, value.encode("utf-8")))
        elif isinstance(value, bytes):
            out.append((name, value))
        else:
            raise TypeError(f"header {name} must be str or bytes, got {type(value).__name__}")
    out.append((COST, str(cost).encode("ascii")))
    if request_id is not None:
        out.append((REQUEST_ID, check_request_id(request_id).encode("ascii")))
    if deadline is not None:
        out.append((DEADLINE_MS, str(deadline_ms(deadline)).encode("ascii")))
    return out
