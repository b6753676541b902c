"""The scheduler under kill -9, under a rebalance, and fed bad input: nothing is lost."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from confluent_kafka import Message, Producer

from fairstream import wire
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.exactly_once import read_to_end, start_ms


def produce_tenants(bootstrap: str, topic: str, tenants: int, per_tenant: int) -> set[bytes]:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    values: set[bytes] = set()
    for i in range(per_tenant):
        for t in range(tenants):
            value = b"t%02d:%04d" % (t, i)
            producer.produce(topic, key=b"t%02d" % t, value=value)
            values.add(value)
    assert producer.flush(30) == 0
    return values


def per_tenant_order_holds(messages: list[Message]) -> dict[bytes, list[int]]:
    """Check FIFO per tenant, ignoring repeats; returns each tenant's sequence."""
    seen: set[bytes] = set()
    sequences: dict[bytes, list[int]] = defaultdict(list)
    # Start order (spread over the egress partitions under a rate, a tenant's records carry
    # their start stamps), then egress order (one partition, read in order).
    for msg in sorted(messages, key=start_ms):
        value = msg.value()
        if value in seen:
            continue
        seen.add(value)
        sequences[msg.key()].append(int(value.split(b":")[1]))
    for tenant, sequence in sequences.items():
        assert sequence == sorted(sequence), f"tenant {tenant!r} out of order: {sequence[:20]}"
    return sequences


def test_kill_9_loses_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=4).create()
    args = ("--rate", "300", "--max-in-flight", "100")
    first = SchedulerProcess(deployment, tmp_path, *args).start().wait_ready()
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    try:
        expected = produce_tenants(kafka_bootstrap, deployment.topics.ingest, 30, 100)
        egress.read_until(500, timeout=30)  # about 2 s at 300/s
        first.kill()  # SIGKILL: no flush, no commit, no goodbye to the group
        emitted_before = len(egress.messages)
        second = SchedulerProcess(deployment, tmp_path, *args)
        second.data_dir = first.data_dir  # the same instance, restarted on its own disk
        second.start().wait_ready(timeout=120)

        def all_seen() -> bool:
            egress.poll()
            return {m.value() for m in egress.messages} >= expected

        wait_until(all_seen, 90, "every record reaches egress after the restart", interval=0)
        second.terminate()
        # Everything egress will ever hold, so that no late duplicate goes uncounted.
        messages = read_to_end(
            kafka_bootstrap, egress, deployment.topics.egress, deployment.partitions
        )
    finally:
        egress.close()

    values = [m.value() for m in messages]
    assert set(values) == expected
    per_tenant_order_holds(messages)
    request_ids: dict[bytes, set[bytes]] = defaultdict(set)
    for msg in messages:
        request_ids[msg.value()].add(dict(msg.headers())[wire.REQUEST_ID])
    duplicates = len(values) - len(set(values))
    print(f"\nkill -9 after {emitted_before} of 3000 emitted: {duplicates} duplicates")
    assert duplicates <= 100, "duplicates exceed the in-flight window (--max-in-flight 100)"
    assert all(len(ids) == 1 for ids in request_ids.values()), "a repeat has another request id"


def test_rebalance_keeps_order_and_rate(kafka_bootstrap: str, tmp_path: Path) -> None:
    rate, burst = 100, 10
    deployment = Deployment(kafka_bootstrap, partitions=12).create()
    args = ("--rate", str(rate), "--burst", str(burst))
    one = SchedulerProcess(deployment, tmp_path, *args, name="one").start().wait_ready()
    two = SchedulerProcess(deployment, tmp_path, *args, name="two").start().wait_ready()
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    try:
        expected = produce_tenants(kafka_bootstrap, deployment.topics.ingest, 24, 50)
        egress.read_until(300, timeout=30)
        assert two.terminate() == 0  # SIGTERM mid-stream: graceful hand-over
        egress.read_until(500, timeout=30)
        two = SchedulerProcess(deployment, tmp_path, *args, name="two")
        two.data_dir = tmp_path / "two-data"
        two.start().wait_ready(timeout=120)

        def all_seen() -> bool:
            egress.poll()
            return {m.value() for m in egress.messages} >= expected

        wait_until(all_seen, 90, "every record reaches egress", interval=0)
        for scheduler in (one, two):
            scheduler.terminate()
        # Everything egress will ever hold, so that no late duplicate goes uncounted.
        messages = read_to_end(
            kafka_bootstrap, egress, deployment.topics.egress, deployment.partitions
        )
    finally:
        egress.close()
        for scheduler in (one, two):
            if scheduler.alive():
                scheduler.terminate()

    values = [m.value() for m in messages]
    assert set(values) == expected
    per_tenant_order_holds(messages)
    # The group's egress never exceeds rate x window + burst, across the hand-overs, counted
    # as the guarantee is stated: by each record's slot (``fairstream-scheduled-ms``). Its
    # produce time (the record's CreateTime) may be later than its slot by a caught-up slot
    # (the emission rule's virtual schedule), which 113 against 110 once showed under load.
    stamps = sorted(int(dict(m.headers())[wire.SCHEDULED_MS]) for m in messages)
    worst = 0
    j = 0
    for i, start in enumerate(stamps):
        while j < len(stamps) and stamps[j] < start + 1000:
            j += 1
        worst = max(worst, j - i)
    duplicates = len(values) - len(set(values))
    print(
        f"\nrebalance: largest count in a 1 s window {worst} (bound {rate + burst}); "
        f"{duplicates} duplicates"
    )
    assert worst <= rate + burst


def test_bad_input_goes_to_the_dead_letter_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    scheduler = SchedulerProcess(deployment, tmp_path).start().wait_ready()
    dlq = TopicReader(kafka_bootstrap, deployment.topics.dlq)
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    topic = deployment.topics.ingest
    bad = [
        (None, b"no key", [], wire.INVALID_KEY),
        (b"", b"empty key", [], wire.INVALID_KEY),
        (b"k" * 1024, b"1 KB key", [], wire.INVALID_KEY),
        (b"good", b"cost abc", [(wire.COST, b"abc")], wire.INVALID_HEADER),
        (b"good", b"cost -5", [(wire.COST, b"-5")], wire.INVALID_HEADER),
        (b"good", None, [], wire.INVALID_VALUE),
    ]
    try:
        for i in range(5):
            producer.produce(topic, key=b"steady", value=b"before-%d" % i)
        for key, value, headers, _ in bad:
            producer.produce(topic, key=key, value=value, headers=[*headers, ("x-case", b"1")])
        producer.produce(topic, key=b"good", value=b"", headers=[(wire.COST, b"3")])
        for i in range(5):
            producer.produce(topic, key=b"steady", value=b"after-%d" % i)
        assert producer.flush(30) == 0
        letters = dlq.read_until(len(bad), timeout=30)
        flowed = egress.read_until(11, timeout=30)
        assert scheduler.alive()
        assert scheduler.get("/healthz")[0] == 200
        _, metrics = scheduler.get("/metrics")
    finally:
        dlq.close()
        egress.close()
        scheduler.terminate()

    assert len(letters) == len(bad)
    by_value = {m.value(): m for m in letters}
    for key, value, headers, reason in bad:
        letter = by_value[value]
        found = dict(letter.headers())
        assert found[wire.DLQ_REASON] == reason.encode(), value
        assert found[wire.DLQ_DETAIL], "a human sentence says why"
        assert letter.key() == key
        assert found["x-case"] == b"1", "original headers are kept"
        for name, raw in headers:
            assert found[name] == raw
    assert sorted(m.value() for m in flowed if m.key() == b"steady") == sorted(
        [b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(5)]
    )
    assert any(m.key() == b"good" and m.value() == b"" for m in flowed), "empty value is valid"
    assert 'fairstream_dead_letters_total{reason="invalid-key"} 3.0' in metrics
