"""Gaps: one ingest partition, the pattern (held,
busy, busy) x N, where the held tenant is paused, rate-capped or in a starved low-priority
class. The busy tenant drains completely while the held one waits (parked in the holding
topic), the progress records stay under the progress topic's max.message.bytes, and after a
kill -9 and a restart the held tenant, released, drains in order: nothing lost, nothing
duplicated for a read_committed reader of egress.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fairstream.adapters.admin import admin_client, topic_configs
from fairstream.config.topics import holding_topic, progress_topic
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.exactly_once import read_to_end
from tests.integration.policies import set_policy

N = 20_000  # the pattern's repeats: 3 x N records in one partition
# Small limits, so that a test-sized pattern parks and re-reads as the 1,000,000 one does.
ARGS = ("--max-backlog", "10000000", "--park-ranges", "500", "--park-span", "20000")
HELD, BUSY = b"held", b"busy"


def metric(scheduler: SchedulerProcess, name: str) -> float:
    status, text = scheduler.get("/metrics")
    assert status == 200
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def produce_pattern(bootstrap: str, topic: str) -> set[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    values: set[bytes] = set()
    for i in range(N):
        for tenant, seq in ((HELD, i), (BUSY, 2 * i), (BUSY, 2 * i + 1)):
            value = b"%s:%07d" % (tenant, seq)
            while True:
                try:
                    producer.produce(topic, key=tenant, value=value)
                    break
                except BufferError:
                    producer.poll(0.1)
            values.add(value)
    assert producer.flush(60) == 0
    return values


def ingest_start(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "gaps-watermarks"})
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low)
    finally:
        consumer.close()


def count(reader: TopicReader, tenant: bytes) -> int:
    return len({m.value() for m in reader.messages if m.key() == tenant})


Hold = Callable[[str, str], None]


def pause(bootstrap: str, topic: str) -> None:
    set_policy(bootstrap, topic, HELD, paused=True)


def resume(bootstrap: str, topic: str) -> None:
    set_policy(bootstrap, topic, HELD, paused=False)


def cap(bootstrap: str, topic: str) -> None:
    set_policy(bootstrap, topic, HELD, rate_cap=20.0)


def uncap(bootstrap: str, topic: str) -> None:
    set_policy(bootstrap, topic, HELD)


def low_class(bootstrap: str, topic: str) -> None:
    set_policy(bootstrap, topic, HELD, priority=1)


def nothing(bootstrap: str, topic: str) -> None:
    """A starved class needs no release: it is served once the busy class has drained."""


@pytest.mark.parametrize(
    ("hold", "release"),
    [
        pytest.param(pause, resume, id="paused"),
        pytest.param(cap, uncap, id="rate-capped"),
        pytest.param(low_class, nothing, id="starved-class"),
    ],
)
def test_a_held_tenant_never_wedges_its_busy_neighbour(
    kafka_bootstrap: str, tmp_path: Path, hold: Hold, release: Hold
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=1).create()
    topics = deployment.topics
    hold(kafka_bootstrap, topics.policy)
    expected = produce_pattern(kafka_bootstrap, topics.ingest)
    first = SchedulerProcess(deployment, tmp_path, *ARGS).start().wait_ready()
    egress = TopicReader(kafka_bootstrap, topics.egress)
    second: SchedulerProcess | None = None
    try:

        def busy_at(target: int) -> Callable[[], bool]:
            def enough() -> bool:
                egress.poll()
                return count(egress, BUSY) >= target

            return enough

        wait_until(busy_at(N), 180, "half of the busy tenant reaches egress", interval=0)
        assert metric(first, "fairstream_parked_records_total") > 0
        largest = metric(first, "fairstream_progress_record_max_bytes")
        first.kill()  # SIGKILL with the held tenant parked: its open transaction is lost

        second = SchedulerProcess(deployment, tmp_path, *ARGS)
        second.data_dir = first.data_dir
        second.start().wait_ready(timeout=120)
        wait_until(busy_at(2 * N), 240, "every busy record reaches egress", interval=0)
        held_before = count(egress, HELD)
        if hold is pause:
            assert held_before == 0  # nothing of a paused tenant went out
        largest = max(largest, metric(second, "fairstream_progress_record_max_bytes"))
        # The held tenant waits in the holding topic: the ingest log is trimmed past it,
        # also when the restarted instance has nothing left to emit (it never commits: the
        # marks it recovered are what its trimmer trims to).
        wait_until(
            lambda: ingest_start(kafka_bootstrap, topics.ingest) >= 3 * N,
            90,
            lambda: (
                f"ingest log trimmed to {3 * N}: {ingest_start(kafka_bootstrap, topics.ingest)}"
            ),
        )

        release(kafka_bootstrap, topics.policy)

        def everything() -> bool:
            egress.poll()
            return {m.value() for m in egress.messages} >= expected

        wait_until(everything, 240, "the held tenant drains after its release", interval=0)
        assert metric(second, "fairstream_backlog_records") == 0
        assert second.terminate() == 0
        messages = read_to_end(kafka_bootstrap, egress, topics.egress, deployment.partitions)
    finally:
        egress.close()
        for scheduler in (first, second):
            if scheduler is not None and scheduler.alive():
                scheduler.kill()

    values = [m.value() for m in messages]
    duplicates = len(values) - len(set(values))
    admin = admin_client(kafka_bootstrap)
    limit = topic_configs(admin, progress_topic(deployment.app_id), ("max.message.bytes",))
    holding = topic_configs(admin, holding_topic(deployment.app_id), ("retention.ms",))
    print(
        f"\n{hold.__name__}: held {held_before} of {N} before the release; largest progress "
        f"record {largest:.0f} bytes (limit {limit['max.message.bytes']}); {duplicates} "
        "duplicates"
    )
    assert set(values) == expected
    assert duplicates == 0
    assert 0 < largest <= int(limit["max.message.bytes"] or 0)
    assert holding["retention.ms"] == "-1"
    for tenant in (HELD, BUSY):
        sequence = [int(m.value().split(b":")[1]) for m in messages if m.key() == tenant]
        assert sequence == sorted(sequence), f"{tenant!r} out of order"
