"""The feedback contract: the hand-written Avro codec agrees with the avro library both ways,
for the current schema (v2) and for the released v1 that older workers still write; the
fingerprints are the schema files'; and no bytes make decoding raise anything but
FeedbackError."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
from dataclasses import replace
from importlib.resources import files
from typing import Any

import avro.io
import avro.schema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairstream.wire import MAX_COST, MAX_EPOCH_MS
from fairstream.wire.canonical import fingerprint
from fairstream.wire.feedback import (
    FINGERPRINT,
    FINGERPRINT_V1,
    MAGIC,
    Feedback,
    FeedbackError,
    Outcome,
    Scope,
    decode_feedback,
    encode_feedback,
    feedback_key,
)

SCHEMAS = files("fairstream") / "schemas"
SCHEMA_TEXT = (SCHEMAS / "Feedback.avsc").read_text(encoding="utf-8")
SCHEMA = avro.schema.parse(SCHEMA_TEXT)
V1_TEXT = (SCHEMAS / "released" / "Feedback.v1.avsc").read_text(encoding="utf-8")
V1_SCHEMA = avro.schema.parse(V1_TEXT)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
HEADER = MAGIC + FINGERPRINT.to_bytes(8, "little")
V1_HEADER = MAGIC + FINGERPRINT_V1.to_bytes(8, "little")


def limited(**kw: Any) -> Feedback:
    fields: dict[str, Any] = {
        "request_id": "req-1",
        "tenant": "acme",
        "outcome": Outcome.RATE_LIMITED,
        "declared_cost": 3,
        "reported_at_ms": 1_767_225_600_123,
        "attempt": 2,
        "latency": 0.25,
        "scheduled_at_ms": 1_767_225_600_000,
        "scope": Scope.API,
        "retry_after": 1.5,
        "egress_topic": "fairstream.egress",
    }
    fields.update(kw)
    return Feedback(**fields)


def ok(**kw: Any) -> Feedback:
    fields: dict[str, Any] = {
        "request_id": "req-2",
        "tenant": "zeta",
        "outcome": Outcome.OK,
        "declared_cost": 1,
        "reported_at_ms": 5,
        "cost": 10,
        "latency": 0.001,
    }
    fields.update(kw)
    return Feedback(**fields)


# -- the schema and its fingerprint ----------------------------------------------------------


def test_fingerprint_is_the_schema_files() -> None:
    assert fingerprint(json.loads(SCHEMA_TEXT)) == FINGERPRINT


def test_released_v2_is_the_current_schema() -> None:
    released = (SCHEMAS / "released" / "Feedback.v2.avsc").read_text(encoding="utf-8")
    assert json.loads(released) == json.loads(SCHEMA_TEXT)
    assert fingerprint(json.loads(released)) == FINGERPRINT == 0x14FB9A5F53378EBC


def test_released_v1_keeps_its_fingerprint() -> None:
    assert fingerprint(json.loads(V1_TEXT)) == FINGERPRINT_V1 == 0xC7C270A52676EEBD


def test_v2_appends_egress_topic_to_v1() -> None:
    # Appended last with a default: a v1 body is a v2 body's prefix, field for field.
    v1 = json.loads(V1_TEXT)["fields"]
    v2 = json.loads(SCHEMA_TEXT)["fields"]
    assert v2[: len(v1)] == v1
    assert [f["name"] for f in v2[len(v1) :]] == ["egress_topic"]
    assert v2[-1]["type"] == ["null", "string"]
    assert v2[-1]["default"] is None


def test_enum_symbols_match_the_outcomes_and_scopes() -> None:
    fields = {f["name"]: f for f in json.loads(SCHEMA_TEXT)["fields"]}
    assert fields["outcome"]["type"]["symbols"] == [
        o.name for o in (Outcome.OK, Outcome.RATE_LIMITED, Outcome.FAILED, Outcome.DEAD_LETTERED)
    ]
    assert fields["scope"]["type"][1]["symbols"] == ["API", "TENANT"]


# -- agreement with the avro library -----------------------------------------------------------


def to_datum(record: Feedback) -> dict[str, Any]:
    def ts(ms: int | None) -> dt.datetime | None:
        return None if ms is None else EPOCH + dt.timedelta(milliseconds=ms)

    return {
        "request_id": record.request_id,
        "tenant": record.tenant,
        "outcome": record.outcome.name,
        "attempt": record.attempt,
        "declared_cost": record.declared_cost,
        "cost": record.cost,
        "latency": record.latency,
        "reported_at": ts(record.reported_at_ms),
        "scheduled_at": ts(record.scheduled_at_ms),
        "scope": None if record.scope is None else record.scope.name,
        "retry_after": record.retry_after,
        "egress_topic": record.egress_topic,
    }


def avro_encode(record: Feedback) -> bytes:
    buf = io.BytesIO()
    buf.write(HEADER)
    avro.io.DatumWriter(SCHEMA).write(to_datum(record), avro.io.BinaryEncoder(buf))
    return buf.getvalue()


def avro_encode_v1(record: Feedback) -> bytes:
    """What a worker before v2 wrote: the v1 fingerprint and body (no egress_topic)."""
    datum = to_datum(record)
    del datum["egress_topic"]
    buf = io.BytesIO()
    buf.write(V1_HEADER)
    avro.io.DatumWriter(V1_SCHEMA).write(datum, avro.io.BinaryEncoder(buf))
    return buf.getvalue()


def avro_decode(raw: bytes) -> dict[str, Any]:
    assert raw[: len(HEADER)] == HEADER
    buf = io.BytesIO(raw[len(HEADER) :])
    datum = avro.io.DatumReader(SCHEMA).read(avro.io.BinaryDecoder(buf))
    assert buf.tell() == len(raw) - len(HEADER)
    return datum


# Timestamps the avro library can represent as datetimes (year 1 to 9999).
MAX_AVRO_MS = 253_402_300_799_999

texts = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40).filter(
    lambda t: len(t.encode()) <= 255
)
topics = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"),
    min_size=1,
    max_size=249,
)


@st.composite
def records(draw: st.DrawFn, max_ms: int = MAX_EPOCH_MS, v1: bool = False) -> Feedback:
    outcome = draw(st.sampled_from(list(Outcome)))
    seconds = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)
    rate_limited = outcome is Outcome.RATE_LIMITED
    return Feedback(
        request_id=draw(texts),
        tenant=draw(texts),
        outcome=outcome,
        declared_cost=draw(st.integers(1, MAX_COST)),
        reported_at_ms=draw(st.integers(0, max_ms)),
        attempt=draw(st.integers(1, 2**31 - 1)),
        cost=draw(st.none() | st.integers(1, MAX_COST)),
        latency=draw(seconds),
        scheduled_at_ms=draw(st.none() | st.integers(0, max_ms)),
        scope=draw(st.sampled_from(list(Scope))) if rate_limited else None,
        retry_after=draw(st.none() | seconds) if rate_limited else None,
        egress_topic=None if v1 else draw(st.none() | topics),
    )


SAMPLES = [limited(), ok(), limited(retry_after=None, scope="tenant", egress_topic=None)]


@pytest.mark.parametrize("record", SAMPLES)
def test_avro_library_reads_what_we_write(record: Feedback) -> None:
    # The avro library gives timestamp-millis as aware datetimes, as to_datum does.
    assert avro_decode(encode_feedback(record)) == to_datum(record)


@pytest.mark.parametrize("record", SAMPLES)
def test_we_read_what_the_avro_library_writes(record: Feedback) -> None:
    raw = avro_encode(record)
    assert raw == encode_feedback(record)
    assert decode_feedback(raw) == record


@settings(max_examples=300, deadline=None)
@given(records(max_ms=MAX_AVRO_MS))
def test_same_bytes_as_the_avro_library(record: Feedback) -> None:
    assert encode_feedback(record) == avro_encode(record)


@settings(max_examples=300, deadline=None)
@given(records())
def test_round_trip(record: Feedback) -> None:
    raw = encode_feedback(record)
    assert decode_feedback(raw, key=feedback_key(record)) == record


@pytest.mark.parametrize("record", SAMPLES)
def test_we_read_what_a_v1_worker_wrote(record: Feedback) -> None:
    """v1 values (workers before egress_topic) decode by their own fingerprint, with no
    egress topic; the rest of the record is the same."""
    raw = avro_encode_v1(record)
    assert raw[: len(V1_HEADER)] == V1_HEADER
    assert decode_feedback(raw, key=feedback_key(record)) == replace(record, egress_topic=None)


@settings(max_examples=300, deadline=None)
@given(records(max_ms=MAX_AVRO_MS, v1=True))
def test_v1_bytes_as_the_avro_library_writes_them_decode(record: Feedback) -> None:
    assert decode_feedback(avro_encode_v1(record)) == record


@pytest.mark.parametrize("record", SAMPLES)
def test_a_v1_reader_resolves_what_we_write(record: Feedback) -> None:
    """Forward: a reader holding only v1 (the avro library, resolving) reads our v2 bodies
    and drops egress_topic."""
    raw = encode_feedback(record)
    assert raw[: len(HEADER)] == HEADER
    buf = io.BytesIO(raw[len(HEADER) :])
    datum = avro.io.DatumReader(SCHEMA, V1_SCHEMA).read(avro.io.BinaryDecoder(buf))
    expected = to_datum(record)
    del expected["egress_topic"]
    assert datum == expected


def test_a_v1_fingerprint_with_a_v2_body_is_refused() -> None:
    raw = V1_HEADER + encode_feedback(limited())[len(HEADER) :]
    with pytest.raises(FeedbackError, match="trailing bytes"):
        decode_feedback(raw)


def test_extreme_longs_round_trip() -> None:
    record = ok(reported_at_ms=MAX_EPOCH_MS, declared_cost=MAX_COST, cost=MAX_COST)
    assert decode_feedback(encode_feedback(record)) == record


# -- the record's rules -------------------------------------------------------------------------


def test_outcome_and_scope_accept_their_wire_words() -> None:
    record = limited(outcome="rate-limited", scope="tenant")
    assert record.outcome is Outcome.RATE_LIMITED
    assert record.scope is Scope.TENANT
    assert not record.final
    assert ok().final
    assert ok(outcome="dead-lettered", cost=None).final


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"tenant": ""}, "tenant must be 1 to 255"),
        ({"tenant": "x" * 256}, "tenant must be 1 to 255"),
        ({"tenant": "\ud800"}, "not encodable"),
        ({"request_id": "r" * 1025}, "request_id"),
        ({"outcome": "teapot"}, "outcome must be one of"),
        ({"declared_cost": 0}, "declared_cost"),
        ({"declared_cost": True}, "declared_cost"),
        ({"cost": 0}, "cost must be"),
        ({"cost": MAX_COST + 1}, "cost must be"),
        ({"cost": 2.0}, "cost must be"),
        ({"attempt": 0}, "attempt"),
        ({"latency": -1.0}, "latency"),
        ({"latency": math.nan}, "latency"),
        ({"latency": math.inf}, "latency"),
        ({"reported_at_ms": -1}, "reported_at_ms"),
        ({"scheduled_at_ms": MAX_EPOCH_MS + 1}, "scheduled_at_ms"),
        ({"scope": None}, "needs a scope"),
        ({"scope": "world"}, "scope must be"),
        ({"retry_after": -0.5}, "retry_after"),
        ({"retry_after": math.inf}, "retry_after"),
        ({"egress_topic": ""}, "egress_topic must be a Kafka topic name"),
        ({"egress_topic": "a topic"}, "egress_topic must be a Kafka topic name"),
        ({"egress_topic": "é"}, "egress_topic must be a Kafka topic name"),
        ({"egress_topic": "t" * 250}, "egress_topic must be a Kafka topic name"),
        ({"egress_topic": b"egress"}, "egress_topic must be a string"),
    ],
)
def test_invalid_records_are_refused(change: dict[str, Any], words: str) -> None:
    with pytest.raises(FeedbackError, match=words):
        limited(**change)


@pytest.mark.parametrize("change", [{"scope": Scope.API}, {"retry_after": 1.0}])
def test_scope_and_retry_after_only_on_rate_limited(change: dict[str, Any]) -> None:
    with pytest.raises(FeedbackError, match="belong to rate-limited"):
        ok(**change)


def test_key_is_the_tenant() -> None:
    record = limited(tenant="ünï")
    raw = encode_feedback(record)
    assert feedback_key(record) == "ünï".encode()
    assert decode_feedback(raw, key="ünï".encode()) == record
    with pytest.raises(FeedbackError, match="not the record's tenant"):
        decode_feedback(raw, key=b"someone-else")
    with pytest.raises(FeedbackError, match="key is bytes"):
        decode_feedback(raw, key="ünï")  # type: ignore[arg-type]


# -- garbage --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (None, "tombstone"),
        ("text", "bytes"),
        (b"", "expected marker C3 01, got an empty value"),
        (b'{"tenant": "acme"}', "expected marker C3 01, got 7B 22"),
        (MAGIC + b"\x01\x02", "no fingerprint"),
        (MAGIC + (0x1234).to_bytes(8, "little") + b"\x00", "unknown Feedback schema fingerprint"),
        (HEADER, "request_id ends early"),
        (encode_feedback(ok()) + b"\x00", "1 trailing bytes"),
        (HEADER + b"\x01", "request_id is -1 bytes"),
        (HEADER + b"\x02\xff\xfe", "not UTF-8"),
        (HEADER + b"\xff" * 11, "not a valid long"),
        (encode_feedback(ok())[:-1] + b"\x04", "egress_topic has no branch"),
        (encode_feedback(ok())[:-1] + b"\x02\x00", "egress_topic must be a Kafka topic name"),
        (encode_feedback(ok())[:-1] + b"\x02\x04a/", "egress_topic must be a Kafka topic name"),
    ],
)
def test_garbage_is_a_feedback_error(value: Any, words: str) -> None:
    with pytest.raises(FeedbackError, match=words):
        decode_feedback(value)


def test_every_truncation_is_a_feedback_error() -> None:
    raw = encode_feedback(limited())
    for end in range(len(raw)):
        with pytest.raises(FeedbackError):
            decode_feedback(raw[:end])


def decodes_or_refuses(raw: bytes) -> None:
    try:
        record = decode_feedback(raw)
    except FeedbackError:
        return
    assert isinstance(record, Feedback)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_else(raw: bytes) -> None:
    decodes_or_refuses(raw)
    decodes_or_refuses(HEADER + raw)


@settings(max_examples=500, deadline=None)
@given(records(), st.data())
def test_corrupted_records_never_raise_anything_else(record: Feedback, data: st.DataObject) -> None:
    raw = bytearray(encode_feedback(record))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(len(HEADER), len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    decodes_or_refuses(bytes(raw))
