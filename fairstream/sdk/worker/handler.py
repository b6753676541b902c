"""What a handler sees, raises and returns: ``Request`` (one egress record), ``Handler``,
``RateLimited`` (the paid API refused the call), ``Usage`` (the real cost of a call).

Light on purpose: ``fairstream.Request``, ``RateLimited`` and ``Usage`` import without
confluent-kafka.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fairstream import wire
from fairstream.errors import Error
from fairstream.wire.feedback import Scope

if TYPE_CHECKING:
    from confluent_kafka import Message

__all__ = [
    "Handler",
    "RateLimited",
    "RawHeaders",
    "Request",
    "Usage",
    "coordinates",
    "request_from_message",
    "request_of",
    "where",
]

RawHeaders = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Request:
    """One egress record, as the handler sees it."""

    tenant: str
    payload: bytes
    request_id: str
    cost: int
    headers: tuple[tuple[str, bytes | None], ...]
    enqueued_ms: int | None  # when the scheduler ingested it
    scheduled_ms: int | None  # when the scheduler released it
    deadline_ms: int | None
    topic: str
    partition: int
    offset: int
    attempt: int = 1  # 1 on the first call, 2 on the first retry...
    # When its call may start (under a rate limit only): workers pace calls by it.
    start_ms: int | None = None

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name``, or None."""
        for key, value in reversed(self.headers):
            if key == name:
                return value
        return None


# Returns None (or a ``Usage``), or an awaitable of it for async handlers.
Handler = Callable[[Request], Any]


def _int_header(
    last: dict[str, bytes | None], name: str, limit: int = wire.MAX_EPOCH_MS
) -> int | None:
    """The header's value under the contract's rule, None when missing or outside it."""
    value = wire.header_int(name, last.get(name), limit)
    return value if isinstance(value, int) else None


def request_of(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes,
    headers: RawHeaders,
    attempt: int = 1,
) -> Request:
    """The handler's view of an egress record from its parts, whichever client read it
    (missing headers get the defaults; of a header given twice the last value counts)."""
    last: dict[str, bytes | None] = dict(headers)  # later duplicates win
    raw_id = last.get(wire.REQUEST_ID)
    request_id = (
        raw_id.decode("ascii", "replace")
        if raw_id
        else wire.default_request_id(topic, partition, offset)
    )
    return Request(
        tenant=key.decode("utf-8", "replace") if key is not None else "",
        payload=value,
        request_id=request_id,
        cost=_int_header(last, wire.COST, wire.MAX_COST) or 1,
        headers=tuple(headers),
        enqueued_ms=_int_header(last, wire.ENQUEUED_MS),
        scheduled_ms=_int_header(last, wire.SCHEDULED_MS),
        deadline_ms=_int_header(last, wire.DEADLINE_MS),
        topic=topic,
        partition=partition,
        offset=offset,
        attempt=attempt,
        start_ms=_int_header(last, wire.START_MS),
    )


def request_from_message(msg: Message) -> Request:
    """Build the handler's view of an egress record (missing headers get defaults)."""
    topic, partition, offset = coordinates(msg)
    # A consumer's header values are bytes (or None); the stubs allow str too.
    raw = msg.headers() or []
    items = raw.items() if isinstance(raw, dict) else raw
    headers: RawHeaders = [(k, _bytes(v)) for k, v in items]
    return request_of(topic, partition, offset, msg.key(), msg.value() or b"", headers)


class RateLimited(Error):
    """Raised by a handler when the paid API refused the call as rate-limited (HTTP 429).

    The worker calls the handler again for the same request after ``retry_after`` seconds
    (the API's Retry-After), or after the usual backoff when it is None or 0. A rate-limited
    call does not use up one of ``max_attempts``; the request is retried until its deadline
    (``fairstream-deadline-ms``), if it has one, and then dead-lettered as ``expired``.
    Each one is reported on the feedback topic at once, with ``scope``:

    - ``"api"``: the whole API pushed back (the scheduler slows the egress down);
    - ``"tenant"``: only this tenant's upstream quota did (the scheduler pauses the tenant).
    """

    def __init__(self, retry_after: float | None = None, scope: str = "api") -> None:
        if retry_after is not None:
            if isinstance(retry_after, bool) or not isinstance(retry_after, int | float):
                raise TypeError(f"retry_after must be seconds or None, got {retry_after!r}")
            if not math.isfinite(retry_after) or retry_after < 0:
                raise ValueError(f"retry_after must be finite and at least 0, got {retry_after!r}")
        try:
            checked = Scope(scope)
        except ValueError:
            raise ValueError(f"scope must be 'api' or 'tenant', got {scope!r}") from None
        self.retry_after: float | None = None if retry_after is None else float(retry_after)
        self.scope: str = checked.value
        after = "" if retry_after is None else f", retry after {retry_after:g} s"
        super().__init__(f"rate-limited ({self.scope}{after})")

    def __repr__(self) -> str:
        return f"RateLimited(retry_after={self.retry_after!r}, scope={self.scope!r})"


@dataclass(frozen=True, slots=True)
class Usage:
    """What a handler may return to report the real cost of its request.

    ``cost`` is a positive integer in the unit the requests declare theirs in
    (``fairstream-cost``), e.g. tokens used or milliseconds of API time. It goes to the
    feedback topic with the declared cost, so the scheduler can charge the difference.
    """

    cost: int

    def __post_init__(self) -> None:
        if type(self.cost) is not int or not 1 <= self.cost <= wire.MAX_COST:
            raise ValueError(
                f"Usage.cost must be an integer from 1 to {wire.MAX_COST}, got {self.cost!r}"
            )


def coordinates(msg: Message) -> tuple[str, int, int]:
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    assert topic is not None
    assert partition is not None
    assert offset is not None
    return topic, partition, offset


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode("utf-8") if isinstance(value, str) else value


def where(request: Request) -> str:
    return (
        f"request {request.request_id} of tenant {request.tenant!r} "
        f"at {request.topic}[{request.partition}]@{request.offset}"
    )
