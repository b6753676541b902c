"""Progress snapshots in chunks, on the real broker: recovery reads every chunk of the
snapshot its committed offset names, and never a set with a chunk missing."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fairstream.adapters.admin import admin_client, topic_configs
from fairstream.config.topics import PROGRESS_TOPIC_BYTES, holding_topic, progress_topic
from fairstream.scheduler.progress import Snapshot, chunk_key, encode_chunks
from fairstream.scheduler.recovery import Recovery, holding_id
from fairstream_dev.harness.kafka import unique
from fairstream_dev.harness.scheduler import Deployment


def clients(bootstrap: str, d: Deployment) -> tuple[Producer, Consumer, Recovery]:
    """A transactional producer (initialised), a read_committed member of the deployment's
    group (its metadata goes with the offsets, and recovery reads its committed offsets),
    and a ``Recovery``."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": d.app_id, "isolation.level": "read_committed"}
    )
    return producer, consumer, Recovery({"bootstrap.servers": bootstrap}, d.topics.ingest, d.app_id)


def commit(
    producer: Producer, consumer: Consumer, d: Deployment, snapshot: Snapshot, chunks: list[bytes]
) -> None:
    """One transaction: ``chunks`` to the progress topic, the mark with the snapshot's token."""
    producer.begin_transaction()
    for index, record in enumerate(chunks):
        producer.produce(progress_topic(d.app_id), record, chunk_key(0, index), partition=0)
    offsets = [TopicPartition(d.topics.ingest, 0, snapshot.lwm, snapshot.token)]
    producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)


def test_recovery_reads_every_chunk_of_the_committed_snapshot(kafka_bootstrap: str) -> None:
    d = Deployment(kafka_bootstrap, partitions=1).create()
    admin = admin_client(kafka_bootstrap)
    progress_limit = topic_configs(admin, progress_topic(d.app_id), ("max.message.bytes",))
    assert progress_limit["max.message.bytes"] == str(PROGRESS_TOPIC_BYTES)
    held = topic_configs(admin, holding_topic(d.app_id), ("retention.ms",))
    assert held["retention.ms"] == "-1"

    ranges = [(10 + 5 * i, 12 + 5 * i) for i in range(3000)]
    hold_ranges = [(9 + 3 * i, 10 + 3 * i) for i in range(500)]
    older = Snapshot(f"{d.app_id}:1", 5, ranges[:10])
    newer = Snapshot(f"{d.app_id}:2", 5, ranges, 7, hold_ranges, {"slow": 3, "capped": 1})
    chunks = encode_chunks(newer, limit=2048)
    assert len(chunks) > 4

    producer, consumer, recovery = clients(kafka_bootstrap, d)
    try:
        commit(producer, consumer, d, older, encode_chunks(older))
        commit(producer, consumer, d, newer, chunks)
        recovered, lost = recovery.recover(consumer, [0], timeout=60)
        assert lost == 0
        assert recovered[0].lwm == 5
        assert recovered[0].ranges() == ranges
        hold = recovered[holding_id(0)]
        assert hold.lwm == 7
        assert hold.ranges() == hold_ranges
        assert getattr(hold, "parked", None) == {"slow": 3, "capped": 1}

        # A third commit whose chunks did not all arrive (here: the last one left out)
        # names a snapshot recovery must not use: it falls back to the latest whole one.
        third = Snapshot(f"{d.app_id}:3", 5, ranges[:2000], 7, [], {"slow": 2})
        commit(producer, consumer, d, third, encode_chunks(third, limit=2048)[:-1])
        again, _ = recovery.recover(consumer, [0], timeout=60)
        assert again[0].ranges() == ranges  # the :2 snapshot, whole
        assert getattr(again[holding_id(0)], "parked", None) == {"slow": 3, "capped": 1}
    finally:
        recovery.close()
        consumer.close()


def test_an_offset_whose_snapshot_never_committed_is_not_believed(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What a broker served after a kill -9 mid-transaction (Apache Kafka 3.7.2): the group's
    committed offset of a transaction that was aborted, whose snapshot was aborted with it.
    Recovery resumes from the last snapshot that did commit, not from that offset: the
    records between the two were never on egress."""
    d = Deployment(kafka_bootstrap, partitions=1).create()
    producer, consumer, recovery = clients(kafka_bootstrap, d)
    try:
        good = Snapshot(f"{d.app_id}:1", 5, [(7, 9)])
        commit(producer, consumer, d, good, encode_chunks(good))
        # The aborted transaction's snapshot (mark 20)...
        lost = Snapshot(f"{d.app_id}:2", 20, [])
        producer.begin_transaction()
        producer.produce(
            progress_topic(d.app_id), encode_chunks(lost)[0], chunk_key(0, 0), partition=0
        )
        producer.flush(30)
        producer.abort_transaction(30)
        # ... and its offset, as the broker served it: committed, naming that token.
        producer.begin_transaction()
        offsets = [TopicPartition(d.topics.ingest, 0, lost.lwm, lost.token)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)

        with caplog.at_level(logging.WARNING, logger="fairstream.recovery"):
            recovered, _ = recovery.recover(consumer, [0], timeout=60)
        assert recovered[0].lwm == 5
        assert recovered[0].ranges() == [(7, 9)]
        [warning] = [
            r.getMessage() for r in caplog.records if "no committed progress" in r.getMessage()
        ]
        # Decided as soon as the partition was read to its end, not after the token's wait.
        assert "within" not in warning
        assert f"token '{good.token}', offset 5" in warning
    finally:
        recovery.close()
        consumer.close()
