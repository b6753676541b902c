"""Values of the policy topic: ``TenantPolicy`` in Avro single-object encoding.

A value is ``C3 01``, the 8-byte little-endian CRC-64-AVRO fingerprint of the writer
schema's Parsing Canonical Form, then the Avro binary body. The fingerprint names the
writer schema, so no schema registry is needed: a reader knows the current schema
(``fairstream/schemas/TenantPolicy.avsc``) and every released one
(``fairstream/schemas/released/``), and resolves data written with any of them to the
current schema. An unknown fingerprint is refused, never guessed.

Keys: a tenant id (its policy, and the tenant group it is in), the empty key (the
defaults), or ``GROUP_KEY_PREFIX`` followed by a tenant-group id (the group's own policy;
the prefix alone: every group's default). 0xFF never occurs in UTF-8, so no tenant id
starts with the prefix and the three cannot collide.

Caller: ``fairstream tenants`` and ``fairstream groups`` (encode and decode), the scheduler
(decode).
"""

from __future__ import annotations

import datetime as dt
import io
import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

import avro.io
import avro.schema

from fairstream.core.budget import Budget
from fairstream.core.tenant import TenantPolicy
from fairstream.errors import Error
from fairstream.wire.canonical import fingerprint
from fairstream.wire.verdicts import group_problem, tenant_problem

__all__ = [
    "DEFAULT_POLICY_KEY",
    "GROUP_KEY_PREFIX",
    "MAGIC",
    "SCHEMA_NAME",
    "PolicyRecord",
    "SchemaError",
    "check_policy_key",
    "current_schema_text",
    "decode_policy",
    "encode_policy",
    "group_policy_key",
    "key_group",
    "known_fingerprints",
    "released_schema_texts",
    "schema_dir",
]

DEFAULT_POLICY_KEY: bytes = b""
"""Policy-topic key of the defaults. Tenant ids are 1 to 255 bytes, so it never collides."""

GROUP_KEY_PREFIX: bytes = b"\xffgroup:"
"""Policy-topic keys of tenant groups: this prefix, then the group id in UTF-8; the prefix
alone holds every group's default. A UTF-8 tenant id never contains the byte 0xFF."""

MAGIC = b"\xc3\x01"
SCHEMA_NAME = "TenantPolicy"
_HEADER = len(MAGIC) + 8
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
POLICY_FIELDS = (  # the TenantPolicy fields, in schema order
    "weight",
    "priority",
    "max_backlog",
    "max_backlog_cost",
    "rate_cap",
    "cap_burst",
    "paused",
    "max_concurrency",
)


class SchemaError(Error, ValueError):
    """A policy value that cannot be decoded: no marker, unknown schema, or invalid content."""


@dataclass(frozen=True)
class PolicyRecord:
    """One policy-topic value: a tenant's policy, when it was written, an optional purge.

    ``purge_before_ms``: the tenant's records enqueued at or before this epoch-ms time are
    to be moved to the dead-letter topic (reason ``purged``); None asks for no purge.
    ``group``: the tenant group the tenant is in (a tenant-group id); None: none of its own
    (the scheduler's key convention, else no group). Only a tenant's record has one.
    """

    policy: TenantPolicy
    updated_at_ms: int
    purge_before_ms: int | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.policy, TenantPolicy):
            raise TypeError(f"policy must be a TenantPolicy, got {self.policy!r}")
        if self.group is not None:
            if not isinstance(self.group, str):
                raise TypeError(f"group must be a str or None, got {self.group!r}")
            problem = group_problem(self.group)
            if problem is not None:
                raise ValueError(problem)
        for name in ("updated_at_ms", "purge_before_ms"):
            value = getattr(self, name)
            if value is None and name == "purge_before_ms":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be epoch milliseconds (an int >= 0), got {value!r}")


def check_policy_key(key: bytes) -> None:
    """Raise ValueError unless ``key`` is a tenant id (UTF-8, 1-255 bytes), the default key,
    or a group's key (``GROUP_KEY_PREFIX`` and a group id, or the prefix alone)."""
    if key == DEFAULT_POLICY_KEY:
        return
    if key.startswith(GROUP_KEY_PREFIX):
        group = key[len(GROUP_KEY_PREFIX) :]
        problem = group_problem(group) if group else None
    else:
        problem = tenant_problem(key)
    if problem is not None:
        raise ValueError(problem)


def group_policy_key(group: str | None) -> bytes:
    """The policy-topic key of ``group``'s own policy (None: the groups' default); ValueError
    for a name that is not a group id."""
    if group is None:
        return GROUP_KEY_PREFIX
    problem = group_problem(group)
    if problem is not None:
        raise ValueError(problem)
    return GROUP_KEY_PREFIX + group.encode("utf-8")


def key_group(key: bytes) -> str | None:
    """The group a policy-topic key is of: its id, ``""`` for the groups' default key, None
    for any other key (a tenant's, the defaults', or one that is no key at all: after the
    prefix, no UTF-8, which ``check_policy_key`` refuses)."""
    if not key.startswith(GROUP_KEY_PREFIX):
        return None
    try:
        return key[len(GROUP_KEY_PREFIX) :].decode("utf-8")
    except UnicodeDecodeError:
        return None


def schema_dir() -> Traversable:
    """The directory of the schemas shipped in the package."""
    return files("fairstream") / "schemas"


def current_schema_text() -> str:
    return (schema_dir() / f"{SCHEMA_NAME}.avsc").read_text(encoding="utf-8")


def released_schema_texts() -> dict[str, str]:
    """File name -> text of every released TenantPolicy schema, oldest first."""
    released = schema_dir() / "released"
    names = sorted(
        (p.name for p in released.iterdir() if p.name.startswith(f"{SCHEMA_NAME}.v")),
        key=lambda n: int(n.removeprefix(f"{SCHEMA_NAME}.v").removesuffix(".avsc")),
    )
    return {name: (released / name).read_text(encoding="utf-8") for name in names}


@dataclass(frozen=True)
class _Codec:
    schema: avro.schema.Schema
    header: bytes
    writer: avro.io.DatumWriter
    # fingerprint -> reader resolving that writer schema to the current one
    readers: dict[int, avro.io.DatumReader]


@cache
def _codec() -> _Codec:
    current_text = current_schema_text()
    current = avro.schema.parse(current_text)
    readers: dict[int, avro.io.DatumReader] = {}
    for text in [current_text, *released_schema_texts().values()]:
        fp = fingerprint(json.loads(text))
        if fp not in readers:
            readers[fp] = avro.io.DatumReader(avro.schema.parse(text), current)
    header = MAGIC + fingerprint(json.loads(current_text)).to_bytes(8, "little")
    return _Codec(current, header, avro.io.DatumWriter(current), readers)


def known_fingerprints() -> frozenset[int]:
    """Fingerprints of the writer schemas this reader accepts (current and released)."""
    return frozenset(_codec().readers)


def _to_datetime(ms: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=ms)


def _to_ms(value: Any) -> int:
    if isinstance(value, dt.datetime):
        return (value - _EPOCH) // dt.timedelta(milliseconds=1)
    return int(value)


def encode_policy(record: PolicyRecord) -> bytes:
    """The single-object encoding of ``record`` with the current schema."""
    codec = _codec()
    policy = record.policy
    datum: dict[str, Any] = {
        "weight": float(policy.weight),
        "priority": policy.priority,
        "max_backlog": policy.max_backlog,
        "max_backlog_cost": policy.max_backlog_cost,
        "rate_cap": None if policy.rate_cap is None else float(policy.rate_cap),
        "cap_burst": float(policy.cap_burst),
        "paused": policy.paused,
        "max_concurrency": policy.max_concurrency,
        "budgets": [
            {
                "limit": budget.limit,
                "window": budget.window,
                "unit": budget.unit,
                "rolling": budget.rolling,
                "time_zone": budget.time_zone,
                "on_exhausted": budget.on_exhausted,
            }
            for budget in policy.budgets
        ],
        "group": record.group,
        "updated_at": _to_datetime(record.updated_at_ms),
        "purge_before": (
            None if record.purge_before_ms is None else _to_datetime(record.purge_before_ms)
        ),
    }
    buf = io.BytesIO()
    buf.write(codec.header)
    codec.writer.write(datum, avro.io.BinaryEncoder(buf))
    return buf.getvalue()


def decode_policy(raw: bytes) -> PolicyRecord:
    """Decode a policy-topic value written with the current or any released schema.

    Raises ``SchemaError`` when the value lacks the ``C3 01`` marker, names a schema
    fingerprint this reader does not know, is truncated, or holds an invalid policy.
    """
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise SchemaError(f"a policy value is bytes, got {type(raw).__name__}")
    raw = bytes(raw)
    if raw[: len(MAGIC)] != MAGIC:
        raise SchemaError(
            f"not an Avro single-object encoded {SCHEMA_NAME}: expected marker C3 01, "
            f"got {raw[: len(MAGIC)].hex(' ').upper() or 'an empty value'}"
        )
    if len(raw) < _HEADER:
        raise SchemaError(f"truncated {SCHEMA_NAME} value: {len(raw)} bytes, no fingerprint")
    fp = int.from_bytes(raw[len(MAGIC) : _HEADER], "little")
    reader = _codec().readers.get(fp)
    if reader is None:
        known = ", ".join(f"{k:#018x}" for k in sorted(_codec().readers))
        raise SchemaError(
            f"unknown {SCHEMA_NAME} schema fingerprint {fp:#018x} (CRC-64-AVRO); this "
            f"fairstream reads {known}. Was the value written by a newer fairstream?"
        )
    buf = io.BytesIO(raw)
    buf.seek(_HEADER)
    try:
        datum = reader.read(avro.io.BinaryDecoder(buf))
    except Exception as exc:
        raise SchemaError(f"cannot decode {SCHEMA_NAME} (fingerprint {fp:#018x}): {exc}") from exc
    if not isinstance(datum, dict):
        raise SchemaError(f"{SCHEMA_NAME} (fingerprint {fp:#018x}) did not decode to a record")
    if buf.tell() != len(raw):
        raise SchemaError(
            f"{SCHEMA_NAME} value (fingerprint {fp:#018x}) has "
            f"{len(raw) - buf.tell()} trailing bytes after the record"
        )
    try:
        budgets = tuple(Budget(**budget) for budget in datum.get("budgets") or ())
        policy = TenantPolicy(**{name: datum[name] for name in POLICY_FIELDS}, budgets=budgets)
        purge = datum.get("purge_before")
        return PolicyRecord(
            policy=policy,
            updated_at_ms=_to_ms(datum["updated_at"]),
            purge_before_ms=None if purge is None else _to_ms(purge),
            group=datum.get("group"),
        )
    except (ValueError, TypeError) as exc:
        raise SchemaError(f"invalid {SCHEMA_NAME} (fingerprint {fp:#018x}): {exc}") from exc
