"""The feedback contract: what workers tell the scheduler about each request they called the
paid API for. Sans-IO: records, validation, encoding; no Kafka here.

Topic ``fairstream.feedback`` (``DEFAULT_FEEDBACK_TOPIC``), as many partitions as egress.

- key: the tenant id, UTF-8 (``feedback_key``), so one tenant's feedback stays in order;
- value: a ``Feedback`` record in Avro single-object encoding: ``C3 01``, the 8-byte
  little-endian CRC-64-AVRO fingerprint of ``schemas/Feedback.avsc``, then the Avro binary
  body. Any Avro reader with that schema decodes it; no schema registry is needed.
  Records are written with the current schema (``released/Feedback.v2.avsc``); those of
  workers that predate it (``released/Feedback.v1.avsc``, no ``egress_topic``) are still
  read, by their own fingerprint.

``egress_topic`` names the egress topic the worker read the request from. Deployments on
one cluster that keep the default feedback topic share it; a scheduler uses only the
records of its own egress topic (and those that name none, from v1 workers).

A worker writes one record per settled request (outcome ``ok`` or ``dead-lettered``), plus
one per attempt the API refused (``rate-limited``) or that failed and will be tried again
(``failed``), as they happen, so an adaptive rate sees 429s without waiting for the request
to settle.

The body is encoded and decoded here by hand for this one schema rather than with the
``avro`` library: the pure-Python encoder does about 24k records/s, and a scheduler reads
every worker's feedback. The unit tests check the bytes against the ``avro`` library in
both directions and pin the fingerprint. ``decode_feedback`` raises ``FeedbackError`` and
nothing else, whatever the bytes: a reader counts those and carries on.
"""

from __future__ import annotations

import enum
import math
import struct
from dataclasses import dataclass
from typing import Final

from fairstream.errors import Error
from fairstream.wire.records import MAX_COST, MAX_EPOCH_MS, MAX_REQUEST_ID_BYTES, MAX_TENANT_BYTES
from fairstream.wire.rules import utf8_bytes

__all__ = [
    "DEFAULT_FEEDBACK_TOPIC",
    "FINAL_OUTCOMES",
    "FINGERPRINT",
    "FINGERPRINT_V1",
    "MAGIC",
    "SCHEMA_NAME",
    "Feedback",
    "FeedbackError",
    "Outcome",
    "Scope",
    "decode_feedback",
    "encode_feedback",
    "feedback_key",
]

DEFAULT_FEEDBACK_TOPIC = "fairstream.feedback"
SCHEMA_NAME = "Feedback"
MAGIC: Final = b"\xc3\x01"
# CRC-64-AVRO of the Parsing Canonical Form of schemas/Feedback.avsc (released as v2), and
# of released/Feedback.v1.avsc, which old workers still write; tests/unit/wire/
# test_feedback.py recomputes both from the files.
FINGERPRINT: Final = 0x14FB9A5F53378EBC
FINGERPRINT_V1: Final = 0xC7C270A52676EEBD
_HEADER: Final = MAGIC + FINGERPRINT.to_bytes(8, "little")
_HEADER_V1: Final = MAGIC + FINGERPRINT_V1.to_bytes(8, "little")
MAX_ATTEMPT: Final = 2**31 - 1
# Kafka's rule for a topic name: 1 to 249 of these characters.
_TOPIC_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_MAX_TOPIC_CHARS: Final = 249


class FeedbackError(Error, ValueError):
    """A feedback value that cannot be used: not ours, truncated, or out of the contract."""


class Outcome(enum.StrEnum):
    """What happened to a request (or to one attempt of it)."""

    OK = "ok"  # the handler succeeded: final
    RATE_LIMITED = "rate-limited"  # one call refused by the API: the request is retried
    FAILED = "failed"  # one call failed otherwise: the request is retried (or dead-lettered)
    DEAD_LETTERED = "dead-lettered"  # written to the dead-letter topic: final


class Scope(enum.StrEnum):
    """What a rate limit applies to."""

    API = "api"  # the whole API pushed back
    TENANT = "tenant"  # only this tenant's upstream quota did


FINAL_OUTCOMES: Final = frozenset({Outcome.OK, Outcome.DEAD_LETTERED})

# Avro enum symbols, in schema order: the index is what goes on the wire.
_OUTCOMES: Final = (Outcome.OK, Outcome.RATE_LIMITED, Outcome.FAILED, Outcome.DEAD_LETTERED)
_OUTCOME_INDEX: Final = {o: i for i, o in enumerate(_OUTCOMES)}
_SCOPES: Final = (Scope.API, Scope.TENANT)
_SCOPE_INDEX: Final = {s: i for i, s in enumerate(_SCOPES)}

_DOUBLE = struct.Struct("<d")


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise FeedbackError(f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


def _check_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FeedbackError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise FeedbackError(f"{name} must be finite and at least 0, got {value!r}")
    return float(value)


def _check_text(name: str, value: object, limit: int) -> bytes:
    if not isinstance(value, str):
        raise FeedbackError(f"{name} must be a string, got {type(value).__name__}")
    try:
        raw = utf8_bytes(name, value, limit)
    except ValueError as exc:
        raise FeedbackError(str(exc)) from None
    return raw


def _check_topic(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise FeedbackError(f"{name} must be a string, got {type(value).__name__}")
    if not 1 <= len(value) <= _MAX_TOPIC_CHARS or not _TOPIC_CHARS.issuperset(value):
        raise FeedbackError(
            f"{name} must be a Kafka topic name (1 to {_MAX_TOPIC_CHARS} of a-z A-Z 0-9 . _ -), "
            f"got {value[:60]!r}"
        )


@dataclass(frozen=True, slots=True)
class Feedback:
    """One feedback record. Construction validates it (``FeedbackError``).

    ``latency`` and ``retry_after`` are seconds; ``reported_at_ms`` and
    ``scheduled_at_ms`` epoch milliseconds. ``scope`` is required for a rate-limited outcome
    and refused for the others, as is ``retry_after``. ``cost`` is what the handler reported
    (``fairstream.Usage``), None when it reported nothing. ``egress_topic`` is the topic
    the worker read the request from (None: unknown, as from a v1 worker).
    """

    request_id: str
    tenant: str
    outcome: Outcome
    declared_cost: int
    reported_at_ms: int
    attempt: int = 1
    cost: int | None = None
    latency: float = 0.0
    scheduled_at_ms: int | None = None
    scope: Scope | None = None
    retry_after: float | None = None
    egress_topic: str | None = None

    def __post_init__(self) -> None:
        _check_text("request_id", self.request_id, MAX_REQUEST_ID_BYTES)
        _check_text("tenant", self.tenant, MAX_TENANT_BYTES)
        try:
            outcome = Outcome(self.outcome)
        except ValueError:
            raise FeedbackError(
                f"outcome must be one of {', '.join(o.value for o in Outcome)}, "
                f"got {self.outcome!r}"
            ) from None
        object.__setattr__(self, "outcome", outcome)
        _check_int("declared_cost", self.declared_cost, 1, MAX_COST)
        _check_int("reported_at_ms", self.reported_at_ms, 0, MAX_EPOCH_MS)
        _check_int("attempt", self.attempt, 1, MAX_ATTEMPT)
        if self.cost is not None:
            _check_int("cost", self.cost, 1, MAX_COST)
        object.__setattr__(self, "latency", _check_seconds("latency", self.latency))
        if self.scheduled_at_ms is not None:
            _check_int("scheduled_at_ms", self.scheduled_at_ms, 0, MAX_EPOCH_MS)
        if outcome is Outcome.RATE_LIMITED:
            if self.scope is None:
                raise FeedbackError("a rate-limited outcome needs a scope (api or tenant)")
            try:
                object.__setattr__(self, "scope", Scope(self.scope))
            except ValueError:
                raise FeedbackError(
                    f"scope must be 'api' or 'tenant', got {self.scope!r}"
                ) from None
            if self.retry_after is not None:
                object.__setattr__(
                    self, "retry_after", _check_seconds("retry_after", self.retry_after)
                )
        elif self.scope is not None or self.retry_after is not None:
            raise FeedbackError(
                f"scope and retry_after belong to rate-limited outcomes, not {outcome.value}"
            )
        if self.egress_topic is not None:
            _check_topic("egress_topic", self.egress_topic)

    @property
    def final(self) -> bool:
        """True for the one record that settles the request (ok, dead-lettered)."""
        return self.outcome in FINAL_OUTCOMES


def feedback_key(record: Feedback) -> bytes:
    """The record key: the tenant id in UTF-8 (the partitioning key, as on ingest)."""
    return record.tenant.encode("utf-8")


# -- Avro binary, for this one schema ----------------------------------------------------


def _long(out: bytearray, n: int) -> None:
    """Append ``n`` as an Avro long: zig-zag, then a little-endian base-128 varint."""
    z = (n << 1) ^ (n >> 63)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _string(out: bytearray, raw: bytes) -> None:
    _long(out, len(raw))
    out += raw


def encode_feedback(record: Feedback) -> bytes:
    """The single-object encoding of ``record`` (``C3 01``, fingerprint, Avro body), with
    the current schema (v2).

    Caller: the worker, once per outcome. Affects: nothing.
    """
    out = bytearray(_HEADER)
    _string(out, record.request_id.encode("utf-8"))
    _string(out, record.tenant.encode("utf-8"))
    _long(out, _OUTCOME_INDEX[record.outcome])
    _long(out, record.attempt)
    _long(out, record.declared_cost)
    if record.cost is None:
        out.append(0)  # union branch 0: null
    else:
        out.append(2)  # union branch 1 (zig-zag 1 == 2)
        _long(out, record.cost)
    out += _DOUBLE.pack(record.latency)
    _long(out, record.reported_at_ms)
    if record.scheduled_at_ms is None:
        out.append(0)
    else:
        out.append(2)
        _long(out, record.scheduled_at_ms)
    if record.scope is None:
        out.append(0)
    else:
        out.append(2)
        _long(out, _SCOPE_INDEX[record.scope])
    if record.retry_after is None:
        out.append(0)
    else:
        out.append(2)
        out += _DOUBLE.pack(record.retry_after)
    if record.egress_topic is None:
        out.append(0)
    else:
        out.append(2)
        _string(out, record.egress_topic.encode("ascii"))
    return bytes(out)


class _Reader:
    __slots__ = ("pos", "raw")

    def __init__(self, raw: bytes, pos: int) -> None:
        self.raw = raw
        self.pos = pos

    def long(self, name: str) -> int:
        raw, pos = self.raw, self.pos
        z = shift = 0
        while True:
            if pos >= len(raw):
                raise FeedbackError(f"truncated {SCHEMA_NAME}: {name} ends early")
            byte = raw[pos]
            pos += 1
            z |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift >= 64:  # an Avro long takes at most 10 bytes
                raise FeedbackError(f"invalid {SCHEMA_NAME}: {name} is not a valid long")
        self.pos = pos
        return (z >> 1) ^ -(z & 1)

    def string(self, name: str, limit: int) -> str:
        size = self.long(name)
        if not 0 <= size <= limit:
            raise FeedbackError(f"invalid {SCHEMA_NAME}: {name} is {size} bytes (1 to {limit})")
        end = self.pos + size
        if end > len(self.raw):
            raise FeedbackError(f"truncated {SCHEMA_NAME}: {name} ends early")
        chunk = self.raw[self.pos : end]
        self.pos = end
        try:
            return chunk.decode("utf-8")
        except UnicodeDecodeError:
            raise FeedbackError(f"invalid {SCHEMA_NAME}: {name} is not UTF-8") from None

    def double(self, name: str) -> float:
        end = self.pos + 8
        if end > len(self.raw):
            raise FeedbackError(f"truncated {SCHEMA_NAME}: {name} ends early")
        (value,) = _DOUBLE.unpack_from(self.raw, self.pos)
        self.pos = end
        return float(value)

    def index(self, name: str, size: int) -> int:
        i = self.long(name)
        if not 0 <= i < size:
            raise FeedbackError(f"invalid {SCHEMA_NAME}: {name} has no branch or symbol {i}")
        return i

    def optional_long(self, name: str) -> int | None:
        return self.long(name) if self.index(name, 2) else None


def decode_feedback(
    value: bytes | bytearray | memoryview | None, key: bytes | None = None
) -> Feedback:
    """The ``Feedback`` in a feedback-topic value; ``key``, when given, must be its tenant.

    Reads the current schema (v2) and the released v1 (``egress_topic`` None). Raises
    ``FeedbackError`` (and nothing else) for a null or foreign value, an unknown schema
    fingerprint, truncated or trailing bytes, or content out of the contract.

    Caller: the scheduler's feedback reader, tools. Affects: nothing.
    """
    if value is None:
        raise FeedbackError(f"a {SCHEMA_NAME} value is bytes, got null (a tombstone?)")
    if not isinstance(value, bytes | bytearray | memoryview):
        raise FeedbackError(f"a {SCHEMA_NAME} value is bytes, got {type(value).__name__}")
    raw = bytes(value)
    if raw[:2] != MAGIC:
        raise FeedbackError(
            f"not an Avro single-object encoded {SCHEMA_NAME}: expected marker C3 01, "
            f"got {raw[:2].hex(' ').upper() or 'an empty value'}"
        )
    if len(raw) < len(_HEADER):
        raise FeedbackError(f"truncated {SCHEMA_NAME} value: {len(raw)} bytes, no fingerprint")
    header = raw[: len(_HEADER)]
    if header not in (_HEADER, _HEADER_V1):
        fp = int.from_bytes(raw[2 : len(_HEADER)], "little")
        raise FeedbackError(
            f"unknown {SCHEMA_NAME} schema fingerprint {fp:#018x} (this fairstream reads "
            f"{FINGERPRINT:#018x} and {FINGERPRINT_V1:#018x}); was it written by a newer "
            "fairstream?"
        )
    r = _Reader(raw, len(_HEADER))
    request_id = r.string("request_id", MAX_REQUEST_ID_BYTES)
    tenant = r.string("tenant", MAX_TENANT_BYTES)
    outcome = _OUTCOMES[r.index("outcome", len(_OUTCOMES))]
    attempt = r.long("attempt")
    declared_cost = r.long("declared_cost")
    cost = r.optional_long("cost")
    latency = r.double("latency")
    reported_at_ms = r.long("reported_at")
    scheduled_at_ms = r.optional_long("scheduled_at")
    scope = _SCOPES[r.index("scope", len(_SCOPES))] if r.index("scope", 2) else None
    retry_after = r.double("retry_after") if r.index("retry_after", 2) else None
    egress_topic = None
    if header == _HEADER and r.index("egress_topic", 2):  # v1 ends before it
        egress_topic = r.string("egress_topic", _MAX_TOPIC_CHARS)
    if r.pos != len(raw):
        raise FeedbackError(
            f"{SCHEMA_NAME} value has {len(raw) - r.pos} trailing bytes after the record"
        )
    record = Feedback(
        request_id=request_id,
        tenant=tenant,
        outcome=outcome,
        declared_cost=declared_cost,
        reported_at_ms=reported_at_ms,
        attempt=attempt,
        cost=cost,
        latency=latency,
        scheduled_at_ms=scheduled_at_ms,
        scope=scope,
        retry_after=retry_after,
        egress_topic=egress_topic,
    )
    if key is not None:
        if not isinstance(key, bytes | bytearray | memoryview):
            raise FeedbackError(f"a {SCHEMA_NAME} key is bytes, got {type(key).__name__}")
        if bytes(key) != tenant.encode("utf-8"):
            raise FeedbackError(
                f"the record key {bytes(key)[:40]!r} is not the record's tenant {tenant[:40]!r}"
            )
    return record
