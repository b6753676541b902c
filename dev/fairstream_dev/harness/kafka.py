"""Kafka helpers for tests and benchmarks: unique names, topic set-up, bounded reads, waiting.

Every wait here has a deadline and polls a condition; nothing sleeps blindly.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

T = TypeVar("T")


def unique(prefix: str) -> str:
    """A topic or group name no other test (or earlier run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topics(
    bootstrap: str,
    names: list[str],
    partitions: int = 1,
    config: dict[str, str] | None = None,
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(n, num_partitions=partitions, replication_factor=1, config=config or {})
            for n in names
        ],
        operation_timeout=30,
    )
    for future in futures.values():
        future.result(timeout=60)


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float,
    message: str | Callable[[], str],
    interval: float = 0.1,
) -> T:
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` seconds pass.

    ``message`` says what was awaited. Pass a callable (``lambda: f"... {state}"``) when it
    shows state: it is called at the timeout, so the failure reports the state then, not the
    state when the wait began.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            said = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout:.0f} s: {said}")
        time.sleep(interval)


_COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)


def committed_offsets(
    bootstrap: str, group: str, partitions: list[TopicPartition], timeout: float = 30
) -> list[TopicPartition]:
    """The offsets ``group`` has committed for ``partitions``, read without joining the group.

    A broker answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS while the group's
    coordinator moves or loads its offsets partition. librdkafka does not always flag those as
    retriable, so they are named here; the read is tried again until ``timeout``. Any other
    error, or a passing one past the deadline, is raised.
    """
    deadline = time.monotonic() + timeout
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        while True:
            try:
                return consumer.committed(partitions, timeout=10)
            except KafkaException as exc:
                error = exc.args[0]
                passing = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() in _COORDINATOR_MOVING
                )
                if not passing:
                    raise
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def consume(
    bootstrap: str,
    topic: str,
    count: int,
    timeout: float = 60.0,
    group: str | None = None,
) -> list[Message]:
    """Read ``count`` records from the start of ``topic`` (fails after ``timeout`` s)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or unique("test-reader"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    messages: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(messages) < count:
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"read {len(messages)} of {count} records from {topic} in {timeout:.0f} s"
                )
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error on {topic}: {err}")
            messages.append(msg)
    finally:
        consumer.close()
    return messages
