"""The policy-topic codec: single-object framing, round trips, schema resolution, refusals."""

from __future__ import annotations

import datetime as dt
import io
import json

import avro.io
import avro.schema
import pytest

from fairstream.core.budget import Budget
from fairstream.core.tenant import TenantPolicy
from fairstream.wire.canonical import fingerprint
from fairstream.wire.policy import (
    DEFAULT_POLICY_KEY,
    MAGIC,
    PolicyRecord,
    SchemaError,
    current_schema_text,
    decode_policy,
    encode_policy,
    known_fingerprints,
    released_schema_texts,
)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _single_object(schema_json: dict[str, object], datum: dict[str, object]) -> bytes:
    """Encode ``datum`` with an arbitrary writer schema, framed as single-object."""
    # The library takes datetimes for timestamp-millis fields.
    datum = {
        k: _EPOCH + dt.timedelta(milliseconds=v)
        if k in ("updated_at", "purge_before") and isinstance(v, int)
        else v
        for k, v in datum.items()
    }
    buf = io.BytesIO()
    buf.write(MAGIC + fingerprint(schema_json).to_bytes(8, "little"))
    schema = avro.schema.parse(json.dumps(schema_json))
    avro.io.DatumWriter(schema).write(datum, avro.io.BinaryEncoder(buf))
    return buf.getvalue()


RECORDS = [
    PolicyRecord(TenantPolicy(), 0),
    PolicyRecord(
        TenantPolicy(
            weight=2.5,
            priority=3,
            max_backlog=10,
            max_backlog_cost=1_000_000_000_000,
            rate_cap=0.5,
            cap_burst=4,
            paused=True,
        ),
        1_767_225_600_123,
        1_767_225_600_000,
    ),
]


@pytest.mark.parametrize("record", RECORDS)
def test_round_trip(record: PolicyRecord) -> None:
    assert decode_policy(encode_policy(record)) == record


def test_header_is_marker_and_current_fingerprint() -> None:
    raw = encode_policy(RECORDS[0])
    assert raw[:2] == b"\xc3\x01"
    assert int.from_bytes(raw[2:10], "little") == fingerprint(json.loads(current_schema_text()))


def test_default_key_cannot_be_a_tenant() -> None:
    assert DEFAULT_POLICY_KEY == b""


def test_missing_marker_is_refused() -> None:
    raw = encode_policy(RECORDS[0])
    with pytest.raises(SchemaError, match="marker C3 01"):
        decode_policy(b"\x00\x00" + raw[2:])
    with pytest.raises(SchemaError, match="marker C3 01"):
        decode_policy(b"")
    with pytest.raises(SchemaError, match="marker C3 01"):
        decode_policy(b'{"weight": 2}')


def test_unknown_fingerprint_is_refused_and_named() -> None:
    raw = encode_policy(RECORDS[0])
    forged = raw[:2] + (0x0123456789ABCDEF).to_bytes(8, "little") + raw[10:]
    with pytest.raises(SchemaError, match="0x0123456789abcdef"):
        decode_policy(forged)


def test_truncated_values_are_refused() -> None:
    raw = encode_policy(RECORDS[1])
    with pytest.raises(SchemaError, match="truncated"):
        decode_policy(raw[:6])
    with pytest.raises(SchemaError, match="cannot decode"):
        decode_policy(raw[:-3])
    with pytest.raises(SchemaError, match="trailing"):
        decode_policy(raw + b"\x00")


def test_invalid_policy_is_refused_with_the_reason() -> None:
    schema = json.loads(current_schema_text())
    datum = {
        "weight": -1.0,
        "priority": 0,
        "max_backlog": None,
        "max_backlog_cost": None,
        "rate_cap": None,
        "cap_burst": 1.0,
        "paused": False,
        "budgets": [],
        "updated_at": 0,
        "purge_before": None,
    }
    with pytest.raises(SchemaError, match="weight must be a positive"):
        decode_policy(_single_object(schema, datum))
    with pytest.raises(SchemaError, match="max_backlog must be at least 1"):
        decode_policy(_single_object(schema, {**datum, "weight": 1.0, "max_backlog": 0}))


def test_every_released_schema_is_known() -> None:
    released = released_schema_texts()
    assert "TenantPolicy.v1.avsc" in released
    for text in released.values():
        assert fingerprint(json.loads(text)) in known_fingerprints()


def test_v1_written_record_decodes_with_the_current_schema() -> None:
    v1 = json.loads(released_schema_texts()["TenantPolicy.v1.avsc"])
    datum = {
        "weight": 3.0,
        "priority": 1,
        "max_backlog": 7,
        "max_backlog_cost": None,
        "rate_cap": 2.0,
        "cap_burst": 2.0,
        "paused": False,
        "updated_at": 1_700_000_000_000,
        "purge_before": None,
    }
    raw = _single_object(v1, datum)
    assert decode_policy(raw) == PolicyRecord(
        TenantPolicy(weight=3, priority=1, max_backlog=7, rate_cap=2, cap_burst=2),
        1_700_000_000_000,
    )


def test_an_older_writer_without_newer_fields_resolves_to_defaults() -> None:
    # A writer schema that predates purge_before and paused: schema resolution fills in
    # the current schema's defaults. Registered here as if it had been released.
    from fairstream.wire import policy as codec

    current = json.loads(current_schema_text())
    older = {
        **current,
        "fields": [f for f in current["fields"] if f["name"] not in ("purge_before", "paused")],
    }
    fp = fingerprint(older)
    readers = codec._codec().readers
    readers[fp] = avro.io.DatumReader(
        avro.schema.parse(json.dumps(older)), avro.schema.parse(current_schema_text())
    )
    try:
        raw = _single_object(
            older,
            {
                "weight": 2.0,
                "priority": 0,
                "max_backlog": None,
                "max_backlog_cost": None,
                "rate_cap": None,
                "cap_burst": 1.0,
                "budgets": [],
                "updated_at": 5,
            },
        )
        assert decode_policy(raw) == PolicyRecord(TenantPolicy(weight=2), 5)
    finally:
        del readers[fp]


def test_record_refuses_bad_times() -> None:
    with pytest.raises(ValueError, match="updated_at_ms"):
        PolicyRecord(TenantPolicy(), -1)
    with pytest.raises(ValueError, match="purge_before_ms"):
        PolicyRecord(TenantPolicy(), 0, purge_before_ms=True)


def test_max_concurrency_round_trips_and_is_checked() -> None:
    record = PolicyRecord(TenantPolicy(weight=2, max_concurrency=3), 42)
    assert decode_policy(encode_policy(record)) == record
    assert (
        decode_policy(encode_policy(PolicyRecord(TenantPolicy(), 1))).policy.max_concurrency is None
    )
    schema = json.loads(current_schema_text())
    datum = {
        **{f["name"]: f["default"] for f in schema["fields"]},
        "max_concurrency": 0,
    }
    with pytest.raises(SchemaError, match="max_concurrency must be at least 1"):
        decode_policy(_single_object(schema, datum))


def test_v4_is_released_as_the_current_schema() -> None:
    # Released with budgets: what this fairstream writes is v4.
    v4 = json.loads(released_schema_texts()["TenantPolicy.v4.avsc"])
    assert fingerprint(v4) == fingerprint(json.loads(current_schema_text()))
    assert fingerprint(v4) == 0xDB9161675289E97E


def test_v3_is_what_the_release_before_wrote() -> None:
    # The schema with the tenant group and no budgets: every policy written by the release
    # before budgets carries its fingerprint, so it stays readable.
    v3 = json.loads(released_schema_texts()["TenantPolicy.v3.avsc"])
    assert fingerprint(v3) == 0xCADDE6180798DCD8
    assert "budgets" not in {f["name"] for f in v3["fields"]}


def test_v2_is_what_the_release_before_wrote() -> None:
    # The schema with max_concurrency and no group: every policy written by the release
    # before tenant groups carries its fingerprint, so it stays readable.
    v2 = json.loads(released_schema_texts()["TenantPolicy.v2.avsc"])
    assert fingerprint(v2) == 0x84DBB18F51F4503C
    assert "group" not in {f["name"] for f in v2["fields"]}


def test_v1_v2_and_v3_records_decode() -> None:
    released = released_schema_texts()
    v1, v2, v3 = (json.loads(released[f"TenantPolicy.v{n}.avsc"]) for n in (1, 2, 3))
    old = {
        "weight": 2.0,
        "priority": 0,
        "max_backlog": None,
        "max_backlog_cost": None,
        "rate_cap": None,
        "cap_burst": 1.0,
        "paused": False,
        "updated_at": 7,
        "purge_before": None,
    }
    assert decode_policy(_single_object(v1, old)) == PolicyRecord(TenantPolicy(weight=2), 7)
    before = {**old, "max_concurrency": 4}
    assert decode_policy(_single_object(v2, before)) == PolicyRecord(
        TenantPolicy(weight=2, max_concurrency=4), 7
    )
    new = {**before, "group": "acme"}
    assert decode_policy(_single_object(v3, new)) == PolicyRecord(
        TenantPolicy(weight=2, max_concurrency=4), 7, group="acme"
    )
    record = PolicyRecord(TenantPolicy(weight=3), 9, group="ünïcode org")
    assert decode_policy(encode_policy(record)) == record


def test_budgets_round_trip() -> None:
    budgets = (
        Budget(1000, "day"),
        Budget(50, "minute", unit="records", on_exhausted="dead-letter"),
        Budget(1_000_000, "month", time_zone="Europe/Paris"),
        Budget(5000, "hour", rolling=True),
    )
    record = PolicyRecord(TenantPolicy(weight=2, budgets=budgets), 42)
    decoded = decode_policy(encode_policy(record))
    assert decoded == record
    assert decoded.policy.budgets == budgets


def test_a_v3_value_reads_as_a_policy_without_budgets() -> None:
    v3 = json.loads(released_schema_texts()["TenantPolicy.v3.avsc"])
    datum = {
        **{f["name"]: f["default"] for f in v3["fields"]},
        "weight": 2.0,
        "max_concurrency": 4,
        "group": "acme",
    }
    record = decode_policy(_single_object(v3, datum))
    assert record.policy == TenantPolicy(weight=2, max_concurrency=4)
    assert record.policy.budgets == ()
    assert record.group == "acme"


@pytest.mark.parametrize(
    ("budget", "reason"),
    [
        ({"limit": 0}, "limit must be an integer >= 1"),
        ({"limit": 5, "window": "week"}, "window must be one of"),
        ({"limit": 5, "unit": "tokens"}, "unit must be one of"),
        ({"limit": 5, "on_exhausted": "drop"}, "on_exhausted must be one of"),
        ({"limit": 5, "time_zone": "Mars/Olympus"}, "unknown time zone"),
    ],
)
def test_an_invalid_budget_is_refused_with_the_reason(
    budget: dict[str, object], reason: str
) -> None:
    schema = json.loads(current_schema_text())
    fields = {f["name"]: f for f in schema["fields"]}
    item = {f["name"]: f.get("default") for f in fields["budgets"]["type"]["items"]["fields"]}
    datum = {name: field["default"] for name, field in fields.items()}
    datum["budgets"] = [{**item, **budget}]
    with pytest.raises(SchemaError, match=reason):
        decode_policy(_single_object(schema, datum))


def test_two_budgets_of_one_window_are_refused() -> None:
    with pytest.raises(ValueError, match="count the same spend"):
        TenantPolicy(budgets=(Budget(5, "day"), Budget(9, "day", on_exhausted="dead-letter")))
