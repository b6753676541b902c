"""fairstream.Producer and ``fairstream submit`` against a real broker: contract headers,
murmur2 partitioning (the partition a Java client or aiokafka picks), delivery errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka.partitioner import DefaultPartitioner
from confluent_kafka import KafkaError, Message

from fairstream import DeliveryError, Producer, wire
from fairstream_dev.harness.kafka import consume, create_topics, unique

REPO = Path(__file__).resolve().parents[2]


def test_submit_writes_key_value_and_contract_headers(kafka_bootstrap: str) -> None:
    topic = unique("p-ingest")
    create_topics(kafka_bootstrap, [topic])
    reports: list[tuple[KafkaError | None, Message]] = []
    with Producer(kafka_bootstrap, topic, on_delivery=lambda e, m: reports.append((e, m))) as p:
        p.submit(
            "acme",
            b"\x00payload\xff",
            cost=350,
            request_id="req-1",
            deadline=1_900_000_000_000,
            headers={"trace": "abc"},
        )
        p.submit("acme", b"")
    assert [e for e, _ in reports] == [None, None]
    assert p.delivered == 2
    first, second = consume(kafka_bootstrap, topic, 2)
    assert first.key() == b"acme"
    assert first.value() == b"\x00payload\xff"
    assert first.headers() == [
        ("trace", b"abc"),
        (wire.COST, b"350"),
        (wire.REQUEST_ID, b"req-1"),
        (wire.DEADLINE_MS, b"1900000000000"),
    ]
    assert second.value() == b""
    assert second.headers() == [(wire.COST, b"1")]
    # What the scheduler's ingest validation makes of it.
    valid = wire.validate_ingest(first.key(), first.value(), first.headers())
    assert valid == wire.Valid("acme", 350, 1_900_000_000_000, "req-1")


def test_partitions_agree_with_murmur2_of_java_clients(kafka_bootstrap: str) -> None:
    topic = unique("p-murmur")
    partitions = 7
    create_topics(kafka_bootstrap, [topic], partitions=partitions)
    tenants = [f"tenant-{i}" for i in range(40)] + ["é-ünïcode", "x" * 255]
    with Producer(kafka_bootstrap, topic) as p:
        for tenant in tenants:
            p.submit(tenant, b"x")
    murmur2 = DefaultPartitioner()
    all_partitions = list(range(partitions))
    for msg in consume(kafka_bootstrap, topic, len(tenants)):
        expected = murmur2(msg.key(), all_partitions, all_partitions)
        assert msg.partition() == expected, msg.key()


def test_bad_tenant_ids_are_refused_before_sending(kafka_bootstrap: str) -> None:
    topic = unique("p-bad")
    create_topics(kafka_bootstrap, [topic])
    with Producer(kafka_bootstrap, topic) as p:
        for tenant in ("", "x" * 256, "é" * 128):
            with pytest.raises(ValueError, match="tenant id must be 1 to 255 UTF-8 bytes"):
                p.submit(tenant, b"x")
        with pytest.raises(ValueError, match="cost"):
            p.submit("ok", b"x", cost=0)
        assert len(p) == 0
        p.submit("ok", b"x")
    [msg] = consume(kafka_bootstrap, topic, 1)
    assert msg.key() == b"ok"


def test_failed_deliveries_are_reported_and_raised_by_flush(kafka_bootstrap: str) -> None:
    missing = unique("p-missing")  # the dev broker does not auto-create topics
    reports: list[KafkaError | None] = []
    p = Producer(
        kafka_bootstrap,
        missing,
        on_delivery=lambda e, m: reports.append(e),
        **{"message.timeout.ms": 2000},
    )
    p.submit("acme", b"1")
    p.submit("acme", b"2")
    with pytest.raises(DeliveryError, match="2 record") as info:
        p.flush(30)
    assert info.value.count == 2
    assert len(info.value.failures) == 2
    assert all(e is not None for e in reports)
    assert p.flush(1) == 0  # the error was raised once; the count starts again


def run_submit(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "fairstream", "submit", *args],
        input=stdin,
        capture_output=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stderr.decode()


def test_submit_command_end_to_end(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = unique("p-cli")
    create_topics(kafka_bootstrap, [topic], partitions=3)
    payload = tmp_path / "prompt.bin"
    payload.write_bytes(b"line one\nline two\x00\xff")
    out = run_submit(
        "--bootstrap",
        kafka_bootstrap,
        "--ingest-topic",
        topic,
        "--tenant",
        "acme",
        "--cost",
        "5",
        "--count",
        "2",
        "--file",
        str(payload),
        "--header",
        "trace=t-1",
    )
    assert "sent 2 record(s) for tenant acme" in out
    # Options from FAIRSTREAM_* variables; one record per stdin line.
    run_submit(
        "--tenant",
        "beta",
        "--request-id",
        "same",
        "-",
        stdin=b"first\r\nsecond\n\nfourth",
        env={"FAIRSTREAM_BOOTSTRAP": kafka_bootstrap, "FAIRSTREAM_INGEST_TOPIC": topic},
    )
    messages = consume(kafka_bootstrap, topic, 6)
    by_tenant: dict[bytes, list[Message]] = {}
    for msg in sorted(messages, key=lambda m: m.offset()):
        by_tenant.setdefault(msg.key(), []).append(msg)
    acme, beta = by_tenant[b"acme"], by_tenant[b"beta"]
    assert [m.value() for m in acme] == [payload.read_bytes()] * 2
    assert acme[0].headers() == [("trace", b"t-1"), (wire.COST, b"5")]
    assert [m.value() for m in beta] == [b"first", b"second", b"", b"fourth"]
    assert all(dict(m.headers())[wire.REQUEST_ID] == b"same" for m in beta)
    murmur2 = DefaultPartitioner()
    assert {m.partition() for m in acme} == {murmur2(b"acme", [0, 1, 2], [0, 1, 2])}


def test_submit_command_refuses_bad_input(tmp_path: Path) -> None:
    def fails(*args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "fairstream", "submit", "--bootstrap", "127.0.0.1:1", *args],
            capture_output=True,
            cwd=REPO,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        return result.stderr.decode()

    assert "tenant id must be 1 to 255" in fails("--tenant", "x" * 256, "--payload", "p")
    assert "exactly one of" in fails("--tenant", "a")
    assert "exactly one of" in fails("--tenant", "a", "--payload", "p", "-")
    assert "reserved" in fails("--tenant", "a", "-p", "p", "-H", "fairstream-cost=3")
