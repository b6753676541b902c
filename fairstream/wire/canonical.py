"""Avro Parsing Canonical Form and the CRC-64-AVRO (Rabin) schema fingerprint.

Both as the Avro specification defines them ("Parsing Canonical Form for Schemas",
"Schema Fingerprints"). The ``avro`` library has ``Schema.fingerprint()``, but its canonical
form keeps primitive types that carry a logical type as objects (``{"type":"long"}`` for a
timestamp-millis), where the spec's [PRIMITIVES] rule and the Java implementation write
``"long"``: its fingerprint of any schema with a logical type differs from what a Java or
Rust reader computes. Single-object encoding puts the fingerprint on the wire, so it is
computed here, from the schema's JSON, to match the spec's published test vectors.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical_form", "crc64_avro", "fingerprint"]

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "enum", "fixed", "error"})
# [STRIP] and [ORDER]: the only attributes kept, in this order.
_KEPT = ("name", "type", "fields", "symbols", "items", "values", "size")

_EMPTY = 0xC15D213AA4D7A795


def _table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY & -(fp & 1))
        table.append(fp)
    return tuple(table)


_TABLE = _table()


def crc64_avro(data: bytes) -> int:
    """The 64-bit Rabin fingerprint of ``data`` as an unsigned int (the spec's algorithm)."""
    fp = _EMPTY
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


def _fullname(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _canonical(schema: Any, namespace: str | None, seen: set[str]) -> Any:
    if isinstance(schema, str):
        # A primitive, or a reference to a named type defined earlier: [FULLNAMES].
        return schema if schema in PRIMITIVES else _fullname(schema, namespace)
    if isinstance(schema, list):
        return [_canonical(branch, namespace, seen) for branch in schema]
    if not isinstance(schema, dict):
        raise ValueError(f"not an Avro schema: {schema!r}")
    kind = schema.get("type")
    if isinstance(kind, str) and kind in PRIMITIVES:
        # [PRIMITIVES]: {"type": "long", "logicalType": ...} is "long".
        return kind
    if not isinstance(kind, str):
        # {"type": <a schema>}: the nested schema itself.
        return _canonical(kind, namespace, seen)
    out: dict[str, Any] = {}
    if kind in _NAMED:
        name = schema["name"]
        fullname = _fullname(name, schema.get("namespace", namespace))
        if fullname in seen:
            return fullname
        seen.add(fullname)
        namespace = fullname.rpartition(".")[0] or None
        out["name"] = fullname
    out["type"] = kind
    if "fields" in schema:
        out["fields"] = [
            {"name": f["name"], "type": _canonical(f["type"], namespace, seen)}
            for f in schema["fields"]
        ]
    if "symbols" in schema:
        out["symbols"] = list(schema["symbols"])
    if "items" in schema:
        out["items"] = _canonical(schema["items"], namespace, seen)
    if "values" in schema:
        out["values"] = _canonical(schema["values"], namespace, seen)
    if "size" in schema:
        out["size"] = int(schema["size"])  # [INTEGERS]
    return {key: out[key] for key in _KEPT if key in out}


def canonical_form(schema: Any) -> str:
    """The Parsing Canonical Form of ``schema`` (its JSON text or the parsed JSON value)."""
    if isinstance(schema, str | bytes):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError:
            # A bare primitive name, as the spec allows: int rather than "int".
            schema = schema.decode() if isinstance(schema, bytes) else schema
    # [STRINGS] (no escapes, UTF-8) and [WHITESPACE].
    return json.dumps(_canonical(schema, None, set()), separators=(",", ":"), ensure_ascii=False)


def fingerprint(schema: Any) -> int:
    """CRC-64-AVRO fingerprint of ``schema``'s canonical form, as an unsigned int."""
    return crc64_avro(canonical_form(schema).encode("utf-8"))
