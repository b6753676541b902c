"""The producer's pure parts: header building and argument checks (no broker)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from fairstream import wire
from fairstream.sdk.producer import Producer
from fairstream.wire import deadline_ms, ingest_headers, tenant_key


def test_headers_carry_cost_request_id_and_deadline_after_the_callers_own() -> None:
    headers = ingest_headers(
        cost=42,
        request_id="req-1",
        deadline=1_700_000_000_000,
        headers={"trace": "t1", "bin": b"\x00\xff"},
    )
    assert headers == [
        ("trace", b"t1"),
        ("bin", b"\x00\xff"),
        (wire.COST, b"42"),
        (wire.REQUEST_ID, b"req-1"),
        (wire.DEADLINE_MS, b"1700000000000"),
    ]


def test_headers_pass_the_ingest_validation() -> None:
    headers = ingest_headers(cost=7, request_id="r", deadline=123)
    valid = wire.validate_ingest(b"tenant", b"", headers)
    assert valid == wire.Valid("tenant", 7, 123, "r")


def test_default_headers_are_cost_one_only() -> None:
    assert ingest_headers() == [(wire.COST, b"1")]
    assert ingest_headers(headers=[("a", "1"), ("a", "2")])[:2] == [("a", b"1"), ("a", b"2")]


def test_deadline_from_aware_datetime_in_epoch_ms() -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    assert deadline_ms(when) == int(when.timestamp()) * 1000 + 678
    east = when.astimezone(timezone(timedelta(hours=5)))
    assert deadline_ms(east) == deadline_ms(when)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"cost": 0}, ValueError, "cost must be between 1"),
        ({"cost": wire.MAX_COST + 1}, ValueError, "cost must be between 1"),
        ({"cost": True}, TypeError, "cost must be an int"),
        ({"cost": 1.5}, TypeError, "cost must be an int"),
        ({"request_id": ""}, ValueError, "must not be empty"),
        ({"request_id": "é"}, ValueError, "ASCII"),
        ({"request_id": "x" * 1025}, ValueError, "at most 1024"),
        ({"deadline": datetime(2030, 1, 1)}, ValueError, "timezone-aware"),
        ({"deadline": 0}, ValueError, "after the epoch"),
        ({"deadline": "soon"}, TypeError, "datetime or epoch"),
        ({"headers": {wire.COST: "3"}}, ValueError, "reserved"),
        ({"headers": {"fairstream-tenant": "x"}}, ValueError, "reserved"),
        ({"headers": {"n": 3}}, TypeError, "str or bytes"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ingest_headers(**kwargs)


@pytest.mark.parametrize("tenant", ["", "x" * 256, "é" * 128])
def test_tenant_ids_outside_1_to_255_utf8_bytes_are_refused(tenant: str) -> None:
    with pytest.raises(ValueError, match="1 to 255 UTF-8 bytes"):
        tenant_key(tenant)


def test_tenant_ids_at_the_limits_are_accepted() -> None:
    assert tenant_key("a") == b"a"
    assert tenant_key("é" * 127 + "x") == ("é" * 127 + "x").encode()
    with pytest.raises(TypeError):
        tenant_key(b"bytes")  # type: ignore[arg-type]


class _RecordingClient:
    """Stands in for librdkafka's producer to see whether anything was handed to it."""

    def __init__(self) -> None:
        self.produced: list[object] = []

    def produce(self, *args: object, **kwargs: object) -> None:
        self.produced.append((args, kwargs))

    def poll(self, timeout: float = 0) -> int:
        return 0


def test_submit_refuses_before_queueing_anything() -> None:
    # No broker is needed to refuse: nothing reaches librdkafka. (len(producer) is no
    # witness: librdkafka counts its own background requests there too.)
    producer = Producer("127.0.0.1:1", "t", **{"message.timeout.ms": 1000})
    client = _RecordingClient()
    producer._producer = client  # type: ignore[assignment]
    with pytest.raises(ValueError, match="tenant id"):
        producer.submit("", b"x")
    with pytest.raises(TypeError, match="payload must be bytes"):
        producer.submit("t", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cost"):
        producer.submit("t", b"x", cost=0)
    assert client.produced == []
    producer.submit("t", b"x")  # the recorder does see a valid record
    assert len(client.produced) == 1


def test_import_fairstream_stays_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, fairstream; assert 'confluent_kafka' not in sys.modules; "
        "fairstream.Producer; assert 'confluent_kafka' in sys.modules; "
        "assert fairstream.Worker.__module__ == 'fairstream.sdk.worker.consumer'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
