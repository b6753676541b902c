"""The reference scenario of the articles, through a real scheduler process."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from fairstream import wire
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.exactly_once import read_to_end


def test_reference_scenario(kafka_bootstrap: str, tmp_path: Path) -> None:
    deployment = Deployment(kafka_bootstrap).create()
    # A plain confluent-kafka producer: no fairstream code on the producer side. The backlog
    # is in the ingest topic before the scheduler starts (as after a restart), so its first
    # decisions see all three tenants; in a live start, how fast B's and C's records overtake
    # A's depends on the machine's load (the noisy-neighbour test covers live arrivals).
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    custom = [("trace-id", b"\x00\xfe binary"), ("x-tag", b"keep me")]
    for i in range(100):
        producer.produce(deployment.topics.ingest, key=b"A", value=b"A%d" % i, headers=custom)
    producer.flush(30)
    producer.produce(deployment.topics.ingest, key=b"B", value=b"B1", headers=custom)
    producer.produce(deployment.topics.ingest, key=b"C", value=b"", headers=custom)
    assert producer.flush(30) == 0
    # --burst 1: one record every 50 ms, the round robin of the reference articles.
    args = ("--rate", "20", "--burst", "1")
    scheduler = SchedulerProcess(deployment, tmp_path, *args).start().wait_ready()
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    try:
        egress.read_until(102, timeout=60)
        assert scheduler.terminate() == 0, scheduler.tail()
        # Everything egress will ever hold: anything beyond 102 would be a duplicate.
        records = read_to_end(
            kafka_bootstrap, egress, deployment.topics.egress, deployment.partitions
        )
    finally:
        egress.close()
        if scheduler.alive():
            scheduler.kill()

    # Departure order: egress has several partitions, so a reader interleaves them; the
    # scheduler stamps each record with the time it scheduled it (stable sort keeps the
    # per-partition order of records scheduled in the same millisecond).
    records = sorted(records, key=lambda m: int(dict(m.headers())[wire.SCHEDULED_MS]))
    order = [(m.key(), m.value()) for m in records]
    print("\nfirst departures:", order[:5])
    assert len(order) == 102, f"expected each record exactly once, got {len(order)}"
    assert (b"B", b"B1") in order[:4]
    assert (b"C", b"") in order[:4]
    assert [v for k, v in order if k == b"A"] == [b"A%d" % i for i in range(100)]
    for msg in records:
        headers = msg.headers()
        assert headers[:2] == custom, "original headers come first, byte-identical"
        names = [name for name, _ in headers]
        for added in (
            wire.TENANT,
            wire.REQUEST_ID,
            wire.ENQUEUED_MS,
            wire.SCHEDULED_MS,
        ):
            assert names.count(added) == 1
        assert dict(headers)[wire.TENANT] == msg.key()
