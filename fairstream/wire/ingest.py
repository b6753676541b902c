"""The ingest contract's producer side: the headers of an ingest record (``ingest_headers``)
and the request id of one that brought none.

An ingest record is keyed by tenant id (UTF-8, 1 to 255 bytes); its value is opaque bytes;
``fairstream-*`` headers are optional and ASCII. Whether a raw record keeps that contract,
and the fields the scheduler needs from it, is ``verdicts.validate_ingest``'s to say; a
record built here passes it. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from fairstream.wire.records import COST, DEADLINE_MS, REQUEST_ID, RESERVED_PREFIX
from fairstream.wire.rules import check_cost, check_request_id, deadline_ms

__all__ = ["HeaderInput", "default_request_id", "ingest_headers"]

HeaderInput = Mapping[str, str | bytes] | Iterable[tuple[str, str | bytes]]


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
