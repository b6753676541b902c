"""The records the emitter writes: egress headers stamped and sized, dead letters fitted to
their topic, and what a held payload costs in memory.

The egress record keeps the ingest record's key, value and headers, drops any header a
producer set under a name fairstream stamps, adds a default request id when it has none,
then ``fairstream-tenant``, ``fairstream-enqueued-ms`` and ``fairstream-scheduled-ms``, and
under a rate or cost limit ``fairstream-start-ms``, the moment a worker starts the call
(paced starts, ``fairstream.sdk.worker.pacing``); ``fairstream.wire`` holds the names.
Caller: the emitter thread, once per record.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairstream import wire
from fairstream.scheduler.recent import RecentRequests
from fairstream.scheduler.records import (
    FOOTPRINT,
    Held,
    footprint_of,
    held_headers,
    held_key,
    held_value,
)
from fairstream.wire.dead_letter import RECORD_OVERHEAD, HeaderList, fit

__all__ = [
    "FOOTPRINT",
    "STAMPED",
    "DefaultIds",
    "Limits",
    "Stamper",
    "dead_letter",
    "footprint",
    "message_headers",
]

STAMPED = frozenset({wire.TENANT, wire.ENQUEUED_MS, wire.SCHEDULED_MS, wire.START_MS})
# The stamped header names as module constants: read once per egress record.
_REQUEST_ID, _TENANT = wire.REQUEST_ID, wire.TENANT
_ENQUEUED_MS, _SCHEDULED_MS, _START_MS = wire.ENQUEUED_MS, wire.SCHEDULED_MS, wire.START_MS


@dataclass(frozen=True)
class Limits:
    """Bytes a record may have on the egress and dead-letter topics (max.message.bytes)."""

    egress: int = 1_048_588
    dlq: int = 1_048_588


def footprint(msg: Held) -> int:
    """Memory a held payload costs, roughly (``records.footprint_of``); a ``Headed``
    record's was reckoned as it arrived (``records.headed``)."""
    if type(msg) is tuple:
        return msg[2]
    return footprint_of(held_value(msg), held_headers(msg))


def message_headers(msg: Held) -> HeaderList:
    """The record's own headers (none: an empty list)."""
    return held_headers(msg) or []


class DefaultIds:
    """``wire.default_request_id`` of records of ``ingest_topic``, as bytes, from a cached
    ``<topic>-<partition>-`` prefix: made once per egress (or parked) record. A caller on
    the hot path reads ``prefixes`` itself (a dict lookup is cheaper than this call) and
    calls ``prefix`` only on a miss."""

    __slots__ = ("ingest_topic", "prefixes")

    def __init__(self, ingest_topic: str) -> None:
        self.ingest_topic = ingest_topic
        self.prefixes: dict[int, bytes] = {}

    def prefix(self, partition: int) -> bytes:
        """``<topic>-<partition>-``, cached in ``prefixes``."""
        prefix = self.prefixes.get(partition)
        if prefix is None:
            prefix = self.prefixes[partition] = f"{self.ingest_topic}-{partition}-".encode()
        return prefix

    def __call__(self, partition: int, offset: int) -> bytes:
        return self.prefix(partition) + b"%d" % offset


class Stamper:
    """Builds the headers of egress records read from ``ingest_topic``, within ``limit``
    bytes (the egress topic's max.message.bytes). ``paced``: the records are released on a
    rate's schedule, so each also carries its start moment (``fairstream-start-ms``);
    without a rate, calls need no pacing and start as records arrive."""

    __slots__ = (
        "_default_id",
        "_enqueued",
        "_enqueued_header",
        "_prefixes",
        "_scheduled",
        "_scheduled_header",
        "_start_header",
        "ingest_topic",
        "limit",
        "paced",
        "recent",
        "size",
    )

    def __init__(
        self,
        ingest_topic: str,
        limit: int,
        recent: RecentRequests | None = None,
        *,
        paced: bool = False,
    ) -> None:
        self.ingest_topic = ingest_topic
        self.limit = limit
        self.paced = paced
        self.recent = recent  # request ids stamped, for the feedback reader (``recent``)
        self.size = 0  # of the last record found too large
        self._default_id = DefaultIds(ingest_topic)
        self._prefixes = self._default_id.prefixes
        # The last enqueued and scheduled moments' headers: neighbours in a batch mostly
        # share their milliseconds, so each header is formatted and built once per run of
        # them, and the egress records of the run share it (a tuple: nothing changes it).
        self._enqueued, self._enqueued_header = -1, (_ENQUEUED_MS, b"-1")
        self._scheduled, self._scheduled_header = -1, (_SCHEDULED_MS, b"-1")
        self._start_header = (_START_MS, b"-1")

    def headers(
        self,
        original: HeaderList | None,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        enqueued: int,
        stamp: int,
    ) -> HeaderList | None:
        """The egress headers of a record with headers ``original`` of its own (None: none),
        at ``partition``/``offset`` of the ingest topic, or None when the record would be
        larger than ``limit`` (``size`` says how large)."""
        size = len(key or b"") + len(value or b"") + RECORD_OVERHEAD
        if not original:
            # The common case, once per egress record: only the stamped headers.
            if size > self.limit:
                self.size = size
                return None
            prefix = self._prefixes.get(partition) or self._default_id.prefix(partition)
            default_id = prefix + b"%d" % offset
            if self.recent is not None:
                self.recent.add(default_id)
            if enqueued != self._enqueued:
                self._enqueued_header = (_ENQUEUED_MS, b"%d" % enqueued)
                self._enqueued = enqueued
            if stamp != self._scheduled:
                self._stamped(stamp)
            if self.paced:
                return [
                    (_REQUEST_ID, default_id),
                    (_TENANT, key),
                    self._enqueued_header,
                    self._scheduled_header,
                    self._start_header,
                ]
            return [
                (_REQUEST_ID, default_id),
                (_TENANT, key),
                self._enqueued_header,
                self._scheduled_header,
            ]
        # A record with headers of its own (a cost, a trace context): once per egress record
        # of cost-weighted producers, so one pass keeps them, sizes them and finds a request
        # id. The headers fairstream stamps replace any a producer set under the same names.
        headers: HeaderList = []
        request_id: bytes | None = None
        for header in original:
            name, given = header
            if name in STAMPED:
                continue
            headers.append(header)
            size += len(name)
            if given is not None:
                size += len(given)
                if request_id is None and name == _REQUEST_ID:
                    request_id = given
        if request_id is None:
            prefix = self._prefixes.get(partition) or self._default_id.prefix(partition)
            request_id = prefix + b"%d" % offset
            headers.append((_REQUEST_ID, request_id))
        if size > self.limit:
            self.size = size
            return None
        if self.recent is not None:
            self.recent.add(request_id)
        if enqueued != self._enqueued:
            self._enqueued_header = (_ENQUEUED_MS, b"%d" % enqueued)
            self._enqueued = enqueued
        if stamp != self._scheduled:
            self._stamped(stamp)
        headers.append((_TENANT, key))
        headers.append(self._enqueued_header)
        headers.append(self._scheduled_header)
        if self.paced:
            headers.append(self._start_header)
        return headers

    def _stamped(self, stamp: int) -> None:
        """The scheduled moment's headers (and the start's, the same moment) for ``stamp``."""
        formatted = b"%d" % stamp
        self._scheduled, self._scheduled_header = stamp, (_SCHEDULED_MS, formatted)
        self._start_header = (_START_MS, formatted)

    def too_large(self, egress_topic: str) -> str:
        """The dead letter's detail for the last record ``headers`` refused."""
        return (
            f"the egress record would be about {self.size} bytes; {egress_topic} takes at "
            f"most {self.limit} (max.message.bytes)"
        )


def dead_letter(
    tenant: str | None,
    msg: Held | None,
    reason: str,
    detail: str,
    source: tuple[str, int, int],
    limit: int,
) -> tuple[bytes | None, bytes | None, HeaderList]:
    """Key, value and headers of the dead letter of ``msg`` (None: lost, only the tenant is
    known) read at ``source`` (topic, partition, offset), fitted within ``limit`` bytes."""
    key: bytes | None
    value: bytes | None
    original: HeaderList
    if msg is None:
        key, value, original = (tenant.encode() if tenant else None), None, []
    else:
        key, value, original = held_key(msg, tenant), held_value(msg), message_headers(msg)
    headers = wire.dead_letter_headers(original, reason, detail, source)
    headers, value = fit(key, value, headers, limit)
    return key, value, headers
