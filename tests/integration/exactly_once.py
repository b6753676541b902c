"""Load and its exactly-once check, shared by the scheduler tests that kill, fence or stop
schedulers under load (test_exactly_once, test_scheduler_fatal): a paced load producer, a
backlog, reading a topic to its end once no scheduler writes it, and what egress holds of the
load (duplicates, missing, unexpected, per-tenant order).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from fairstream import wire
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.scheduler import TopicReader

END = b"__end-of-test__"  # key of the markers written after the schedulers stopped


class LoadProducer:
    """Writes records for ``tenants`` tenants on a thread until stopped.

    Value ``b"t07:000123"``: tenant t07's 124th record. Idempotent, so a retried send never
    puts a record twice on the ingest topic. ``expected`` holds what the broker acknowledged.
    """

    def __init__(self, bootstrap: str, topic: str, tenants: int, per_second: int) -> None:
        self.topic = topic
        self.tenants = [b"t%02d" % t for t in range(tenants)]
        self.ticks_per_second = max(1, per_second // tenants)
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        self.sent: dict[bytes, int] = dict.fromkeys(self.tenants, 0)
        self.expected: set[bytes] = set()
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _delivered(self, err: object, msg: Message) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.expected.add(msg.value())

    def _run(self) -> None:
        # Paces the load (one record per tenant per tick); not a wait for the system.
        while not self._stop.wait(1 / self.ticks_per_second):
            for tenant in self.tenants:
                value = b"%s:%06d" % (tenant, self.sent[tenant])
                self.producer.produce(self.topic, value, tenant, on_delivery=self._delivered)
                self.sent[tenant] += 1
            self.producer.poll(0)

    def start(self) -> LoadProducer:
        self._thread.start()
        return self

    def halt(self) -> None:
        """Stop writing, without waiting (clean-up after a failure)."""
        self._stop.set()

    def stop(self) -> set[bytes]:
        """Stop writing; every record sent is acknowledged. Returns the acknowledged values."""
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(60) == 0, "the load producer could not deliver everything"
        assert not self.failed, f"ingest writes failed: {self.failed[:3]}"
        assert len(self.expected) == sum(self.sent.values())
        return self.expected


def produce_backlog(bootstrap: str, topic: str, tenants: int, per_tenant: int) -> set[bytes]:
    # Idempotent: a retried batch may not land after the next one (per-tenant order is
    # judged against the order the records were sent in).
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    values: set[bytes] = set()
    for i in range(per_tenant):
        for t in range(tenants):
            value = b"t%02d:%06d" % (t, i)
            producer.produce(topic, value, b"t%02d" % t)
            values.add(value)
    assert producer.flush(60) == 0
    return values


def read_to_end(
    bootstrap: str,
    reader: TopicReader,
    topic: str,
    partitions: int,
    timeout: float = 90,
    config: Mapping[str, Any] | None = None,
) -> list[Message]:
    """Everything ``reader`` will ever see of ``topic``, once no scheduler writes it any more.

    Writes a marker to every partition with a plain producer and reads until each marker
    arrived: a partition is read in order, so whatever was committed before is read too (an
    open transaction holds the read_committed reader back until it ends). Returns the
    records without the markers. ``config``: more client settings (e.g. SASL's).
    """
    producer = Producer({"bootstrap.servers": bootstrap, **(config or {})})
    for partition in range(partitions):
        producer.produce(topic, b"", END, partition=partition)
    assert producer.flush(30) == 0

    def all_markers() -> bool:
        reader.poll()
        return len({m.partition() for m in reader.messages if m.key() == END}) == partitions

    wait_until(all_markers, timeout, f"end markers read from every partition of {topic}")
    # What the topic holds: one record per (partition, offset). A consumer can be handed a
    # record again when its fetch position moves back (librdkafka's offset validation after
    # a leader epoch change, as a broker outage brings): that is the reader's repeat, not a
    # second record. A record written twice has two offsets, and stays counted twice.
    seen: set[tuple[int, int]] = set()
    held: list[Message] = []
    again = 0
    for m in reader.messages:
        if m.key() == END:
            continue
        place = (m.partition(), m.offset())
        if place in seen:
            again += 1
            continue
        seen.add(place)
        held.append(m)
    if again:
        print(f"\n{topic}: {again} records handed to the reader again (one offset each)")
    return held


def all_seen(reader: TopicReader, expected: set[bytes]) -> bool:
    reader.poll()
    return {m.value() for m in reader.messages} >= expected


def start_ms(msg: Message) -> int:
    """The record's ``fairstream-start-ms`` stamp (-1 without one: no rate)."""
    for name, value in msg.headers() or ():
        if name == wire.START_MS and value is not None:
            return int(value)
    return -1


def tenant_sequences(messages: list[Message]) -> dict[bytes, list[int]]:
    """Each tenant's sequence numbers in its start order (repeats included): the order of
    the records' start stamps, then the order egress holds them. Under a rate a backlogged
    tenant's records spread over the egress partitions in the order of their stamps
    (``--egress-spread backlogged``); records that share a stamp, and every record without
    one, share the tenant's partition, which is read in order."""
    entries: dict[bytes, list[tuple[int, int, int]]] = defaultdict(list)
    for index, msg in enumerate(messages):
        entries[msg.key()].append((start_ms(msg), index, int(msg.value().split(b":")[1])))
    return {tenant: [seq for _, _, seq in sorted(found)] for tenant, found in entries.items()}


def exactly_once_report(
    messages: list[Message], expected: set[bytes], sent: dict[bytes, int]
) -> tuple[int, int, int, list[str]]:
    """(duplicates, missing, unexpected, tenants out of order)."""
    values = [m.value() for m in messages]
    duplicates = len(values) - len(set(values))
    missing = len(expected - set(values))
    unexpected = len(set(values) - expected)
    disorder = [
        f"{tenant!r}: {sequence[:10]}..."
        for tenant, sequence in tenant_sequences(messages).items()
        if sequence != list(range(sent[tenant]))
    ]
    return duplicates, missing, unexpected, disorder


def whereabouts(
    bootstrap: str, topics: Mapping[str, str], missing: set[bytes], timeout: float = 30
) -> str:
    """Where records a reader never saw are, read afresh: each topic of ``topics`` (a label
    -> topic name) from its start, with a new consumer assigned every partition, once
    read_committed (as workers read) and once read_uncommitted (what was written, aborted
    or not). Says how many of ``missing`` each holds, and the places (partition@offset) of
    the first few: a failure then tells a reader's miss (read_committed holds them), an
    aborted write (only read_uncommitted does), a dead letter and a record never written
    apart."""
    lines = []
    for label, topic in topics.items():
        for isolation in ("read_committed", "read_uncommitted"):
            found = _read_whole(bootstrap, topic, isolation, missing, timeout)
            places = ", ".join(f"{p}@{o}" for p, o, _ in sorted(found)[:6])
            lines.append(f"{label} {isolation}: {len(found)} of them ({places})")
    return "; ".join(lines)


def _read_whole(
    bootstrap: str, topic: str, isolation: str, wanted: set[bytes], timeout: float
) -> list[tuple[int, int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("whereabouts"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        ended: set[int] = set()
        found: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + timeout
        while len(ended) < len(partitions) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        ended.add(msg.partition())
                    continue
                if msg.value() in wanted:
                    found.append((msg.partition(), msg.offset(), msg.value()))
        return found
    finally:
        consumer.close()
