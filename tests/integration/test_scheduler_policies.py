"""Live tenant policies through the policy topic: weights, a weight change, pause, purge."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Message, Producer

from fairstream import contract
from fairstream.core import TenantPolicy
from fairstream.policy import PolicyRecord, encode_policy
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader


def set_policy(bootstrap: str, topic: str, tenant: bytes, **fields: object) -> float:
    """Write a tenant's policy as `fairstream tenants set` would; returns the time written."""
    now_ms = int(time.time() * 1000)
    purge = fields.pop("purge_before_ms", None)
    record = PolicyRecord(TenantPolicy(**fields), updated_at_ms=now_ms, purge_before_ms=purge)  # type: ignore[arg-type]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, key=tenant, value=encode_policy(record))
    assert producer.flush(30) == 0
    return time.time()


def scheduled_s(msg: Message) -> float:
    return int(dict(msg.headers())[contract.SCHEDULED_MS]) / 1000


def departures(reader: TopicReader) -> list[Message]:
    return sorted(reader.messages, key=scheduled_s)


def produce(bootstrap: str, topic: str, tenants: list[bytes], count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        for tenant in tenants:
            producer.produce(topic, key=tenant, value=b"%s-%d" % (tenant, i))
    assert producer.flush(30) == 0


def test_weights_weight_change_and_pause(kafka_bootstrap: str, tmp_path: Path) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=4).create()
    policy_topic = deployment.topics.policy
    set_policy(kafka_bootstrap, policy_topic, b"heavy", weight=3)
    scheduler = SchedulerProcess(deployment, tmp_path, "--rate", "100", "--burst", "1")
    scheduler.start().wait_ready()
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    try:
        produce(kafka_bootstrap, deployment.topics.ingest, [b"heavy", b"light"], 1000)
        egress.read_until(300, timeout=30)

        # Phase 1, weights 3 and 1: served cost stays within one round of 3:1.
        first = departures(egress)[20:300]
        heavy = light = 0
        worst = 0
        for msg in first:
            if msg.key() == b"heavy":
                heavy += 1
            else:
                light += 1
            worst = max(worst, abs(heavy - 3 * light))
        print(f"\nweights 3:1 -> {heavy}:{light}, largest lead over 3:1 {worst}")
        assert worst <= 4, "more than one round (3 + 1 records) away from 3:1"

        # Phase 2: light gets weight 3 too; within a second the ratio is 1:1.
        changed_at = set_policy(kafka_bootstrap, policy_topic, b"light", weight=3)
        egress.read_until(len(egress.messages) + 250, timeout=30)
        after = [m for m in departures(egress) if scheduled_s(m) > changed_at + 1.0]
        share = sum(1 for m in after if m.key() == b"light") / len(after)
        print(f"after the change: light's share {share:.2f} of {len(after)} records")
        assert len(after) >= 100
        assert 0.45 <= share <= 0.55

        # Phase 3: pause heavy: nothing of it goes out, and it keeps its backlog.
        paused_at = set_policy(kafka_bootstrap, policy_topic, b"heavy", weight=3, paused=True)
        egress.read_until(len(egress.messages) + 150, timeout=30)
        while_paused = [m for m in departures(egress) if scheduled_s(m) > paused_at + 1.0]
        assert while_paused
        assert all(m.key() == b"light" for m in while_paused)
        _, metrics = scheduler.get("/metrics")
        assert 'fairstream_tenant_backlog_records{tenant="heavy"}' in metrics

        # Phase 4: resume: heavy flows again.
        resumed_at = set_policy(kafka_bootstrap, policy_topic, b"heavy", weight=3)

        def heavy_again() -> bool:
            egress.poll()
            return any(m.key() == b"heavy" and scheduled_s(m) > resumed_at for m in egress.messages)

        wait_until(heavy_again, 10, "heavy flows again after resume", interval=0)
    finally:
        egress.close()
        scheduler.terminate()
    heavy_values = [m.value() for m in egress.messages if m.key() == b"heavy"]
    assert heavy_values == [b"heavy-%d" % i for i in range(len(heavy_values))]


def test_purge_moves_the_backlog_to_the_dead_letter_topic(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    scheduler = SchedulerProcess(deployment, tmp_path, "--rate", "20").start().wait_ready()
    dlq = TopicReader(kafka_bootstrap, deployment.topics.dlq)
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    try:
        produce(kafka_bootstrap, deployment.topics.ingest, [b"doomed", b"kept"], 200)
        egress.read_until(10, timeout=30)
        set_policy(
            kafka_bootstrap,
            deployment.topics.policy,
            b"doomed",
            purge_before_ms=int(time.time() * 1000),
        )

        def purged() -> int:
            dlq.poll()
            return len(dlq.messages)

        wait_until(lambda: purged() >= 150, 30, "the doomed backlog reaches the DLQ", interval=0)
        dlq.poll(1.0)
        egress.poll(1.0)
    finally:
        egress.close()
        dlq.close()
        scheduler.terminate()
    letters = dlq.messages
    assert all(m.key() == b"doomed" for m in letters)
    assert all(dict(m.headers())[contract.DLQ_REASON] == contract.PURGED.encode() for m in letters)
    emitted = {m.value() for m in egress.messages if m.key() == b"doomed"}
    dead = {m.value() for m in letters}
    # Every doomed record went exactly one way: egress before the purge, or the DLQ.
    assert not emitted & dead
    assert emitted | dead == {b"doomed-%d" % i for i in range(200)}
