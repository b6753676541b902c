"""What the worker SDK's integration tests share: egress records written straight to a fresh
egress topic with a plain producer (no scheduler), a worker set up on its own topics and group,
run on a thread, and its committed offsets awaited.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Producer, TopicPartition

from fairstream import Request, Worker, wire
from fairstream_dev.harness.kafka import committed_offsets, create_topics, unique, wait_until

REPO = Path(__file__).resolve().parents[2]


def egress_record(tenant: str, rid: str, payload: bytes) -> dict[str, Any]:
    return {
        "key": tenant.encode(),
        "value": payload,
        "headers": [
            ("trace", b"\x00t"),
            (wire.TENANT, tenant.encode()),
            (wire.REQUEST_ID, rid.encode()),
            (wire.COST, b"3"),
            (wire.ENQUEUED_MS, b"1000"),
            (wire.SCHEDULED_MS, b"2000"),
        ],
    }


def feed(bootstrap: str, topic: str, records: list[dict[str, Any]], partition: int = 0) -> None:
    """Write records in order (to one partition unless each names its own)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for r in records:
        producer.produce(topic, partition=r.pop("partition", partition), **r)
    assert producer.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    return [tp.offset for tp in committed_offsets(bootstrap, group, tps)]


class Setup:
    def __init__(self, bootstrap: str, partitions: int = 1) -> None:
        self.bootstrap = bootstrap
        self.egress = unique("w-egress")
        self.dlq = unique("w-dlq")
        self.group = unique("w-group")
        self.partitions = partitions
        create_topics(bootstrap, [self.egress, self.dlq], partitions=partitions)

    def worker(self, handler: Callable[[Request], Any], **kwargs: Any) -> Worker:
        options: dict[str, Any] = {
            "bootstrap": self.bootstrap,
            "egress_topic": self.egress,
            "dlq_topic": self.dlq,
            "group_id": self.group,
            "commit_interval": 0.2,
            "backoff_initial": 0.01,
            "backoff_max": 0.05,
            **kwargs,
        }
        return Worker(handler, **options)

    def committed(self) -> list[int]:
        return committed(self.bootstrap, self.group, self.egress, self.partitions)

    def wait_committed(self, offsets: list[int], timeout: float = 60) -> None:
        wait_until(
            lambda: self.committed() == offsets,
            timeout,
            lambda: f"committed offsets {offsets} (have {self.committed()})",
            interval=0.2,
        )


@contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(60)
        assert not thread.is_alive(), "worker did not stop"
    assert not errors, errors
