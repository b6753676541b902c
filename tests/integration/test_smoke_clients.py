"""Both client stacks against the real broker: confluent-kafka (librdkafka) and aiokafka,
and a Faust app whose RocksDB-backed table survives a restart through its changelog."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.integration.kafka import consume, create_topics, unique, wait_until

REPO = Path(__file__).resolve().parents[2]


def test_admin_client_creates_topic(kafka_bootstrap: str) -> None:
    topic = unique("smoke-admin")
    create_topics(kafka_bootstrap, [topic], partitions=3)
    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
    assert topic in metadata.topics
    assert len(metadata.topics[topic].partitions) == 3


def test_confluent_kafka_produce_consume(kafka_bootstrap: str) -> None:
    topic = unique("smoke-ck")
    create_topics(kafka_bootstrap, [topic], partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    sent = [(f"tenant-{i % 3}".encode(), f"payload-{i}".encode()) for i in range(20)]
    for key, value in sent:
        producer.produce(topic, key=key, value=value, headers=[("trace", b"\x00\xffbin")])
    assert producer.flush(30) == 0
    received = consume(kafka_bootstrap, topic, len(sent))
    assert sorted((m.key(), m.value()) for m in received) == sorted(sent)
    assert all(m.headers() == [("trace", b"\x00\xffbin")] for m in received)


def test_aiokafka_produce_consume(kafka_bootstrap: str) -> None:
    topic = unique("smoke-aio")
    create_topics(kafka_bootstrap, [topic])

    async def roundtrip() -> list[tuple[bytes | None, bytes | None]]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"v{i}".encode(), key=b"k")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka_bootstrap,
            group_id=unique("smoke-aio-group"),
            auto_offset_reset="earliest",
        )
        await consumer.start()
        got: list[tuple[bytes | None, bytes | None]] = []
        try:
            async with asyncio.timeout(60):
                while len(got) < 10:
                    msg = await consumer.getone()
                    got.append((msg.key, msg.value))
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(roundtrip())
    assert got == [(b"k", f"v{i}".encode()) for i in range(10)]


class CounterApp:
    """The Faust counter app (tests/integration/apps/faust_counter.py) as a subprocess."""

    def __init__(self, bootstrap: str, app_id: str, source: str, output: str, data_dir: Path):
        self.env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "COUNTER_APP_ID": app_id,
            "COUNTER_SOURCE": source,
            "COUNTER_OUTPUT": output,
            "COUNTER_DATA_DIR": str(data_dir),
            "PYTHONPATH": str(REPO),
        }
        self.log_path = data_dir.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.apps.faust_counter", "worker", "-l", "info"],
            env=self.env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"Faust app ignored SIGTERM; log: {self.log_path}") from None


def test_faust_rocksdb_table_changelog_and_recovery(kafka_bootstrap: str, tmp_path: Path) -> None:
    app_id = unique("smoke-faust")
    source, output = unique("smoke-faust-in"), unique("smoke-faust-out")
    create_topics(kafka_bootstrap, [source, output])
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    def produce(n: int) -> None:
        for _ in range(n):
            producer.produce(source, key=b"tenant-a", value=b"x")
        assert producer.flush(30) == 0

    first = CounterApp(kafka_bootstrap, app_id, source, output, tmp_path / "run1")
    first.start()
    try:
        produce(3)
        counts = [int(m.value()) for m in consume(kafka_bootstrap, output, 3, timeout=120)]
        assert counts == [1, 2, 3]
    finally:
        first.stop()
    # The table lives in RocksDB on disk ...
    assert any((tmp_path / "run1").rglob("*.db")), "no RocksDB store was written"
    # ... and every update went to its changelog topic.
    changelog = consume(kafka_bootstrap, f"{app_id}-counts-changelog", 3)
    assert [m.key() for m in changelog] == [b"tenant-a"] * 3
    assert changelog[-1].value() == b"3"

    # A fresh data directory: the only way back to count 3 is recovery from the changelog.
    second = CounterApp(kafka_bootstrap, app_id, source, output, tmp_path / "run2")
    second.start()
    try:
        produce(1)
        wait_until(
            lambda: (
                [int(m.value()) for m in consume(kafka_bootstrap, output, 4, timeout=120)][-1] == 4
            ),
            timeout=150,
            message="the restarted app continued counting from the recovered state",
        )
    finally:
        second.stop()
