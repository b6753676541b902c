"""A new transactional producer's sweep, on the real broker (``Transaction.sweep``).

The sweep aborts one transaction that writes to every partition an instance's transactions
may write and adds the group's offsets, so that its markers close what an earlier
transaction of the same transactional id left open where the coordinator forgot it (a
broker's controlled shutdown that dropped a commit's markers: the chaos soak). Here: what
the sweep leaves behind is invisible to read_committed readers, holds no partition's last
stable offset back, and changes no committed offset; and it closes a transaction the
previous producer of the id left open.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from fairstream.config.topics import holding_topic, progress_topic
from fairstream.scheduler.transaction import SWEEP_KEY, Sweep, Transaction
from fairstream_dev.harness.kafka import unique
from fairstream_dev.harness.scheduler import Deployment

LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]


def offsets(admin: AdminClient, tps: list[TopicPartition], level: IsolationLevel) -> list[int]:
    asked = admin.list_offsets(dict.fromkeys(tps, LATEST), isolation_level=level)
    return [future.result(timeout=30).offset for future in asked.values()]


def read_all(bootstrap: str, tps: list[TopicPartition], level: str) -> list[bytes | None]:
    """Every record's key in ``tps`` up to their ends, as a reader at ``level`` sees them."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "isolation.level": level,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(tp.topic, tp.partition, 0) for tp in tps])
    keys: list[bytes | None] = []
    ended: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 60
    while len(ended) < len(tps) and time.monotonic() < deadline:
        for msg in consumer.consume(100, timeout=0.5):
            if msg.error() is None:
                keys.append(msg.key())
            else:
                ended.add((msg.topic() or "", msg.partition() or 0))
    consumer.close()
    assert len(ended) == len(tps), f"read {len(ended)} of {len(tps)} partitions to their end"
    return keys


def test_the_sweep_touches_every_partition_and_leaves_nothing_readable(kafka_bootstrap: str):
    d = Deployment(kafka_bootstrap, partitions=3).create()
    topics = (d.topics.egress, d.topics.dlq, progress_topic(d.app_id), holding_topic(d.app_id))
    where = Sweep(topics, d.app_id, d.topics.egress)
    tps = [TopicPartition(t, p) for t in topics for p in range(3)]
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    member = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": d.app_id})
    member.commit(offsets=[TopicPartition(d.topics.ingest, 0, 7, "token:1")], asynchronous=False)
    transactional_id = unique("tx")

    # The previous producer of the id leaves a transaction open on an egress partition.
    previous = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": transactional_id}
    )
    previous.init_transactions(30)
    previous.begin_transaction()
    previous.produce(d.topics.egress, b"left open", b"tenant", partition=1)
    previous.flush(30)
    ends = offsets(admin, tps, IsolationLevel.READ_UNCOMMITTED)
    stable = offsets(admin, tps, IsolationLevel.READ_COMMITTED)
    assert stable != ends  # held back on egress partition 1

    txn = Transaction({"bootstrap.servers": kafka_bootstrap}, transactional_id, 10.0, where)
    txn.init()  # fences the previous producer, then sweeps
    try:
        # The markers land a moment after the abort returns (the coordinator writes them).
        deadline = time.monotonic() + 30
        while offsets(admin, tps, IsolationLevel.READ_COMMITTED) != offsets(
            admin, tps, IsolationLevel.READ_UNCOMMITTED
        ):
            assert time.monotonic() < deadline, "a partition's last stable offset stayed behind"
            time.sleep(0.1)
        uncommitted = read_all(kafka_bootstrap, tps, "read_uncommitted")
        assert uncommitted.count(SWEEP_KEY) == len(tps)  # one record on every partition
        assert read_all(kafka_bootstrap, tps, "read_committed") == []
        committed = member.committed(
            [TopicPartition(d.topics.ingest, 0), TopicPartition(d.topics.egress, 0)], timeout=30
        )
        assert (committed[0].offset, committed[0].metadata) == (7, "token:1")
        assert committed[1].offset < 0  # the sweep's offsets were never committed
        assert not txn.open
        assert txn.sweep(where) == len(tps)  # again, at a stop: nothing changes either
        assert read_all(kafka_bootstrap, tps, "read_committed") == []
    finally:
        txn.close()
        member.close()
