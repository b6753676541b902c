"""The ingest contract: every validation rule, and the dead-letter headers."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fairstream import wire
from fairstream.wire import Invalid, Valid, dead_letter_headers, validate_ingest


def valid(
    key: bytes = b"tenant-a", value: bytes | None = b"payload", headers: wire.Headers = ()
) -> Valid:
    verdict = validate_ingest(key, value, headers)
    assert isinstance(verdict, Valid), verdict
    return verdict


def invalid(
    key: bytes | None = b"tenant-a", value: bytes | None = b"x", headers: wire.Headers = ()
) -> Invalid:
    verdict = validate_ingest(key, value, headers)
    assert isinstance(verdict, Invalid), verdict
    return verdict


# -- key -------------------------------------------------------------------------------


def test_plain_record_gets_defaults() -> None:
    assert validate_ingest(b"acme", b"hello", []) == Valid("acme", 1, None, None)


def test_missing_key_is_invalid_key() -> None:
    verdict = invalid(key=None)
    assert verdict.reason == wire.INVALID_KEY
    assert "no key" in verdict.detail


def test_empty_key_is_invalid_key() -> None:
    verdict = invalid(key=b"")
    assert verdict.reason == wire.INVALID_KEY
    assert "got 0" in verdict.detail


def test_key_of_255_bytes_is_the_longest_tenant() -> None:
    assert valid(key=b"t" * 255).tenant == "t" * 255
    verdict = invalid(key=b"t" * 256)
    assert verdict.reason == wire.INVALID_KEY
    assert "got 256" in verdict.detail


def test_key_limit_counts_bytes_not_characters() -> None:
    # "é" is two bytes in UTF-8: 127 of them fit (254 bytes), 128 do not (256 bytes).
    assert valid(key=("é" * 127).encode()).tenant == "é" * 127
    assert invalid(key=("é" * 128).encode()).reason == wire.INVALID_KEY


def test_non_utf8_key_is_invalid_key() -> None:
    verdict = invalid(key=b"\xff\xfetenant")
    assert verdict.reason == wire.INVALID_KEY
    assert "UTF-8" in verdict.detail


def test_utf8_key_is_decoded() -> None:
    assert valid(key="租户-Ω".encode()).tenant == "租户-Ω"


# -- value -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        b"",
        b"a",
        b"x" * 255,
        b"x" * 256,
        "\u00e9".encode() * 127,
        b"\xff",
        b"ok\xc3",
        b"caf\xc3\xa9",
    ],
)
def test_tenant_of_agrees_with_tenant_problem(key: bytes) -> None:
    # The ingest path's check of a tenant first seen (``tenant_of``) and the sentence a dead
    # letter carries (``tenant_problem``) say the same thing of every key.
    tenant = wire.tenant_of(key)
    assert (tenant is None) == (wire.tenant_problem(key) is not None)
    if tenant is not None:
        assert tenant.encode() == key


def test_null_value_is_invalid_value() -> None:
    verdict = invalid(value=None)
    assert verdict.reason == wire.INVALID_VALUE
    assert "tombstone" in verdict.detail


def test_empty_value_is_a_valid_empty_payload() -> None:
    assert valid(value=b"") == Valid("tenant-a", 1, None, None)


def test_key_is_checked_before_value() -> None:
    assert invalid(key=None, value=None).reason == wire.INVALID_KEY


# -- fairstream-cost -------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "cost"), [(b"1", 1), (b"42", 42), (b"2147483647", 2**31 - 1)])
def test_cost_header_sets_the_cost(raw: bytes, cost: int) -> None:
    assert valid(headers=[(wire.COST, raw)]).cost == cost


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"abc", "positive integer"),
        (b"-5", "positive integer"),
        (b"1.5", "positive integer"),
        (b"", "positive integer"),
        (b"+5", "positive integer"),
        (b"0", "between 1 and 2147483647, got 0"),
        (b"2147483648", "between 1 and 2147483647"),
        (b"99999999999999999999999999", "between 1 and 2147483647"),
    ],
)
def test_cost_that_is_not_a_positive_int32_is_invalid_header(raw: bytes, says: str) -> None:
    verdict = invalid(headers=[(wire.COST, raw)])
    assert verdict.reason == wire.INVALID_HEADER
    assert wire.COST in verdict.detail
    assert says in verdict.detail


def test_cost_of_thousands_of_digits_is_invalid_header() -> None:
    verdict = invalid(headers=[(wire.COST, b"9" * 5000)])
    assert verdict.reason == wire.INVALID_HEADER


@pytest.mark.parametrize("raw", ["\u0663".encode(), "\uff13".encode(), "5€".encode(), b"\xff"])
def test_non_ascii_cost_is_invalid_header(raw: bytes) -> None:
    verdict = invalid(headers=[(wire.COST, raw)])
    assert verdict.reason == wire.INVALID_HEADER
    assert "not ASCII" in verdict.detail


@pytest.mark.parametrize("name", [wire.COST, wire.DEADLINE_MS, wire.REQUEST_ID])
def test_fairstream_header_without_value_is_invalid_header(name: str) -> None:
    verdict = invalid(headers=[(name, None)])
    assert verdict.reason == wire.INVALID_HEADER
    assert f"header {name} has no value" == verdict.detail


def test_cost_surrounded_by_whitespace_is_accepted() -> None:
    assert valid(headers=[(wire.COST, b" 7 ")]).cost == 7


def test_last_cost_header_wins() -> None:
    assert valid(headers=[(wire.COST, b"3"), (wire.COST, b"9")]).cost == 9


def test_invalid_cost_is_reported_even_after_a_valid_one() -> None:
    verdict = invalid(headers=[(wire.COST, b"3"), (wire.COST, b"x")])
    assert verdict.reason == wire.INVALID_HEADER


# -- fairstream-deadline-ms ------------------------------------------------------------


def test_deadline_header_is_parsed_as_epoch_ms() -> None:
    assert valid(headers=[(wire.DEADLINE_MS, b"1700000000123")]).deadline_ms == 1700000000123


def test_deadline_accepts_the_largest_int64() -> None:
    raw = str(2**63 - 1).encode()
    assert valid(headers=[(wire.DEADLINE_MS, raw)]).deadline_ms == 2**63 - 1


@pytest.mark.parametrize("raw", [b"0", b"-1", b"soon", b"1.7e12", str(2**63).encode()])
def test_bad_deadline_is_invalid_header(raw: bytes) -> None:
    verdict = invalid(headers=[(wire.DEADLINE_MS, raw)])
    assert verdict.reason == wire.INVALID_HEADER
    assert wire.DEADLINE_MS in verdict.detail


def test_deadline_in_the_past_is_still_valid_here() -> None:
    # Expiry is the scheduler's decision (it knows the time); validation is pure.
    assert valid(headers=[(wire.DEADLINE_MS, b"1")]).deadline_ms == 1


# -- fairstream-request-id -------------------------------------------------------------


def test_request_id_header_is_kept() -> None:
    assert valid(headers=[(wire.REQUEST_ID, b"req-123/abc")]).request_id == "req-123/abc"


def test_empty_request_id_is_invalid_header() -> None:
    verdict = invalid(headers=[(wire.REQUEST_ID, b"")])
    assert verdict.reason == wire.INVALID_HEADER
    assert "empty" in verdict.detail


def test_non_ascii_request_id_is_invalid_header() -> None:
    verdict = invalid(headers=[(wire.REQUEST_ID, "ид-1".encode())])
    assert verdict.reason == wire.INVALID_HEADER


def test_default_request_id_says_where_the_record_was_ingested() -> None:
    assert wire.default_request_id("fairstream.ingest", 3, 1234) == "fairstream.ingest-3-1234"


# -- other headers ---------------------------------------------------------------------


def test_all_three_headers_together() -> None:
    verdict = valid(
        headers=[
            (wire.COST, b"5"),
            (wire.DEADLINE_MS, b"1800000000000"),
            (wire.REQUEST_ID, b"r-1"),
        ]
    )
    assert verdict == Valid("tenant-a", 5, 1800000000000, "r-1")


def test_non_fairstream_headers_are_ignored_whatever_their_value() -> None:
    headers = [
        ("traceparent", b"00-abc-def-01"),
        ("binary", b"\xff\x00\xfe"),
        ("nothing", None),
        ("Fairstream-Cost", b"not checked: header names are case-sensitive"),
        ("cost", b"-1"),
    ]
    assert valid(headers=headers) == Valid("tenant-a", 1, None, None)


# -- dead letters ----------------------------------------------------------------------


def test_dead_letter_headers_keep_the_originals_then_add_reason_and_detail() -> None:
    original = [
        ("traceparent", b"00-abc"),
        (wire.COST, b"x"),
        ("binary", b"\x00\xff"),
        ("traceparent", b"second value, same name"),
    ]
    out = dead_letter_headers(original, wire.INVALID_HEADER, "header fairstream-cost é")
    assert out[: len(original)] == original
    assert out[len(original) :] == [
        (wire.DLQ_REASON, b"invalid-header"),
        (wire.DLQ_DETAIL, "header fairstream-cost é".encode()),
    ]


def test_dead_letter_headers_keep_a_null_header_value_null() -> None:
    out = dead_letter_headers([("nothing", None)], wire.EXPIRED, "late")
    assert out == [
        ("nothing", None),
        (wire.DLQ_REASON, b"expired"),
        (wire.DLQ_DETAIL, b"late"),
    ]


def test_dead_letter_headers_do_not_change_the_input() -> None:
    original = [("a", b"1")]
    dead_letter_headers(original, wire.BACKLOG_FULL, "full")
    assert original == [("a", b"1")]


@given(
    st.one_of(
        st.binary(max_size=24),
        st.lists(st.integers(0x2F, 0x3A), max_size=20).map(bytes),  # digits, "/" and ":"
        st.text(alphabet="0123456789 \t+-x", max_size=24).map(str.encode),
        st.integers(0, 2**64).map(lambda n: b"%d" % n),
        st.tuples(st.integers(0, 2**32), st.integers(1, 24)).map(
            lambda nw: b"%0*d" % (nw[1], nw[0])  # zero-padded: more digits than the limit
        ),
    ),
    st.sampled_from([(wire.COST, wire.MAX_COST), (wire.DEADLINE_MS, wire.MAX_EPOCH_MS)]),
)
@example(b"00000000001", (wire.COST, wire.MAX_COST))
@example(b"0000000000000000001", (wire.DEADLINE_MS, wire.MAX_EPOCH_MS))
@example(b"00000000000000000001", (wire.DEADLINE_MS, wire.MAX_EPOCH_MS))
def test_integer_headers_read_fast_as_the_full_rule_reads_them(
    raw: bytes, header: tuple[str, int]
) -> None:
    # header_int reads a header of digits byte by byte before its full rule; a leading space,
    # which the rule allows, takes the full rule: the two take the same values, refuse the
    # same headers.
    name, limit = header
    fast, full = wire.header_int(name, raw, limit), wire.header_int(name, b" " + raw, limit)
    if isinstance(full, int):
        assert fast == full
    else:
        assert isinstance(fast, str)
