"""Buffer table keys and values: FIFO key order per tenant, lossless envelope encoding."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairstream import contract
from fairstream.state.envelope import (
    RECORD_PREFIX,
    VERSION,
    WATERMARK_PREFIX,
    Envelope,
    decode_offset,
    encode_offset,
    parse_record_key,
    peek_cost,
    record_key,
    watermark_key,
)

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None)

tenants = st.binary(min_size=1, max_size=contract.MAX_TENANT_BYTES)
offsets = st.integers(min_value=0, max_value=2**63 - 1)  # Kafka offsets are int64, never < 0
header_values = st.one_of(st.none(), st.binary(max_size=64))
headers = st.lists(st.tuples(st.text(max_size=20), header_values), max_size=8)
envelopes = st.builds(
    Envelope,
    enqueued_ms=st.integers(min_value=0, max_value=2**63 - 1),
    deadline_ms=st.one_of(st.none(), st.integers(min_value=0, max_value=2**63 - 1)),
    cost=st.integers(min_value=1, max_value=contract.MAX_COST),
    partition=st.integers(min_value=0, max_value=2**31 - 1),
    request_id=st.text(max_size=60),
    headers=headers,
    value=st.binary(max_size=256),
)


def envelope(**changes: object) -> Envelope:
    fields: dict[str, object] = {
        "enqueued_ms": 1_700_000_000_000,
        "deadline_ms": None,
        "cost": 3,
        "partition": 5,
        "request_id": "fs.ingest-5-42",
        "headers": [("traceparent", b"00-abc")],
        "value": b"payload",
    }
    fields.update(changes)
    return Envelope(**fields)  # type: ignore[arg-type]


# -- keys ------------------------------------------------------------------------------


def test_record_key_layout() -> None:
    assert record_key(b"acme", 258) == b"r\x04acme" + b"\x00" * 6 + b"\x01\x02"


@given(tenants, offsets)
@PROPERTY_SETTINGS
def test_record_key_round_trips(tenant: bytes, offset: int) -> None:
    key = record_key(tenant, offset)
    assert key.startswith(RECORD_PREFIX)
    assert parse_record_key(key) == (tenant, offset)


def test_parse_record_key_rejects_other_keys() -> None:
    with pytest.raises(ValueError, match="not a record key"):
        parse_record_key(watermark_key(3))


@given(st.lists(st.tuples(tenants, offsets), min_size=1, max_size=200, unique=True))
@PROPERTY_SETTINGS
def test_sorted_keys_group_by_tenant_in_offset_order(pairs: list[tuple[bytes, int]]) -> None:
    # RocksDB iterates in bytewise key order: each tenant's records must come out as one
    # contiguous run, oldest ingest offset first (FIFO per tenant).
    ordered = [parse_record_key(k) for k in sorted(record_key(t, o) for t, o in pairs)]
    runs: list[bytes] = []
    for tenant, _ in ordered:
        if not runs or runs[-1] != tenant:
            runs.append(tenant)
    assert len(runs) == len(set(runs)), "a tenant's records are split by another tenant's"
    for tenant in runs:
        mine = [o for t, o in ordered if t == tenant]
        assert mine == sorted(o for t, o in pairs if t == tenant)


def test_a_tenant_that_prefixes_another_does_not_interleave() -> None:
    # Without the length byte, b"a" + offset could sort between b"ab"'s records.
    keys = sorted(
        [record_key(b"a", 2**56), record_key(b"ab", 1), record_key(b"a", 1), record_key(b"ab", 0)]
    )
    assert [parse_record_key(k)[0] for k in keys] == [b"a", b"a", b"ab", b"ab"]


def test_record_keys_sort_apart_from_watermarks() -> None:
    # The rebuild scans from b"r" and stops at the first key of another kind.
    # Every record key lies in [b"r", b"s"), every watermark key after it.
    lowest, highest = record_key(b"\x00", 0), record_key(b"\xff" * 255, 2**63 - 1)
    assert RECORD_PREFIX <= lowest <= highest < b"s"
    assert all(watermark_key(p).startswith(WATERMARK_PREFIX) for p in (0, 7, 2**32 - 1))
    assert highest < min(watermark_key(p) for p in (0, 7, 2**32 - 1))


@given(offsets)
def test_offset_encoding_round_trips(offset: int) -> None:
    assert decode_offset(encode_offset(offset)) == offset
    assert len(encode_offset(offset)) == 8


# -- envelopes -------------------------------------------------------------------------


@given(envelopes)
@PROPERTY_SETTINGS
def test_envelope_round_trips(original: Envelope) -> None:
    raw = original.encode()
    assert Envelope.decode(raw) == original
    assert peek_cost(raw) == original.cost


def test_envelope_keeps_null_empty_and_binary_headers_apart() -> None:
    original = envelope(
        headers=[("none", None), ("empty", b""), ("bin", b"\x00\xff\x00"), ("none", None)]
    )
    assert Envelope.decode(original.encode()).headers == original.headers


def test_envelope_keeps_an_empty_value() -> None:
    decoded = Envelope.decode(envelope(value=b"", headers=[]).encode())
    assert decoded.value == b""
    assert decoded.headers == []


def test_envelope_value_is_byte_identical_even_if_it_looks_like_a_header() -> None:
    value = struct.pack(">H", 5) + b"hello" + struct.pack(">i", -1)
    assert Envelope.decode(envelope(value=value).encode()).value == value


@pytest.mark.parametrize("deadline", [None, 0, 1, 1_800_000_000_000, 2**63 - 1])
def test_envelope_deadline(deadline: int | None) -> None:
    assert Envelope.decode(envelope(deadline_ms=deadline).encode()).deadline_ms == deadline


@pytest.mark.parametrize("request_id", ["", "ascii-1", "идемпотентность", "租户/请求#1", "🙂"])
def test_envelope_unicode_request_id(request_id: str) -> None:
    assert Envelope.decode(envelope(request_id=request_id).encode()).request_id == request_id


def test_envelope_encodes_any_request_id_the_contract_accepts() -> None:
    longest = b"r" * contract.MAX_REQUEST_ID_BYTES
    verdict = contract.validate_ingest(b"t", b"v", [(contract.REQUEST_ID, longest)])
    assert isinstance(verdict, contract.Valid)
    assert verdict.request_id is not None
    raw = envelope(request_id=verdict.request_id).encode()
    assert Envelope.decode(raw).request_id == verdict.request_id
    too_long = contract.validate_ingest(b"t", b"v", [(contract.REQUEST_ID, longest + b"r")])
    assert isinstance(too_long, contract.Invalid)
    assert too_long.reason == contract.INVALID_HEADER


def test_envelope_encodes_headers_longer_than_64_kib() -> None:
    headers: list[tuple[str, bytes | None]] = [("n" * 70_000, b"v" * 70_000)]
    assert Envelope.decode(envelope(headers=headers).encode()).headers == headers


@given(st.integers(min_value=1, max_value=contract.MAX_COST), st.binary(max_size=32))
def test_peek_cost_reads_only_the_head(cost: int, value: bytes) -> None:
    raw = envelope(cost=cost, value=value).encode()
    assert peek_cost(raw) == cost


def test_unknown_version_is_rejected() -> None:
    raw = bytearray(envelope().encode())
    assert raw[0] == VERSION
    raw[0] = VERSION + 1
    with pytest.raises(ValueError, match="unknown buffer envelope version 2"):
        Envelope.decode(bytes(raw))
