"""Noisy neighbour: one tenant bursts while five trickle; the quiet ones barely notice."""

from __future__ import annotations

import time
import zlib
from pathlib import Path

from confluent_kafka import Producer

from fairstream import wire
from fairstream.core import percentile
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader

PARTITIONS = 8
NOISY, QUIET = b"A", [b"B", b"C", b"D", b"E", b"F"]


def dwell_ms(msg) -> int:  # type: ignore[no-untyped-def]
    return msg.timestamp()[1] - int(dict(msg.headers())[wire.ENQUEUED_MS])


def test_quiet_tenants_do_not_wait_behind_a_burst(kafka_bootstrap: str, tmp_path: Path) -> None:
    # Kafka orders records per partition, so a quiet tenant that shares the noisy tenant's
    # ingest partition waits until the burst ahead of it is absorbed (README: Guarantees).
    # This scenario is about the scheduler's fairness, so the quiet tenants have partitions
    # of their own under librdkafka's default partitioner (CRC32 of the key).
    noisy_partition = zlib.crc32(NOISY) % PARTITIONS
    assert all(zlib.crc32(t) % PARTITIONS != noisy_partition for t in QUIET)

    deployment = Deployment(kafka_bootstrap, partitions=PARTITIONS).create()
    scheduler = SchedulerProcess(deployment, tmp_path, "--rate", "200").start().wait_ready()
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    try:
        for i in range(20_000):
            producer.produce(deployment.topics.ingest, key=NOISY, value=b"burst-%d" % i)
            if i % 5000 == 0:
                producer.poll(0)
        producer.flush(30)
        start = time.monotonic()
        for second in range(10):
            for tenant in QUIET:
                producer.produce(deployment.topics.ingest, key=tenant, value=b"q%d" % second)
            producer.flush(10)
            # Pace the quiet producers at 1 record/s each, reading egress meanwhile.
            while time.monotonic() < start + second + 1:
                egress.poll(min(0.2, max(0.0, start + second + 1 - time.monotonic())))

        def quiet_seen() -> int:
            return sum(1 for m in egress.messages if m.key() in QUIET)

        deadline = time.monotonic() + 30
        while quiet_seen() < 50 and time.monotonic() < deadline:
            egress.poll(0.2)
    finally:
        egress.close()
        scheduler.terminate()

    quiet = [dwell_ms(m) for m in egress.messages if m.key() in QUIET]
    noisy = [m for m in egress.messages if m.key() == NOISY]
    fifo_wait_s = 20_000 / 200
    print(
        f"\nquiet tenants: {len(quiet)} records, dwell p50 {percentile(quiet, 50):.0f} ms, "
        f"p99 {percentile(quiet, 99):.0f} ms, max {max(quiet)} ms; noisy tenant emitted "
        f"{len(noisy)} of 20000 meanwhile; plain FIFO would make them wait ~{fifo_wait_s:.0f} s"
    )
    assert len(quiet) == 50
    assert percentile(quiet, 99) < 1000
    # The noisy tenant keeps its order while it shares the egress.
    values = [m.value() for m in noisy]
    assert values == [b"burst-%d" % i for i in range(len(values))]
