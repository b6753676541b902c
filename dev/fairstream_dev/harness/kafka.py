"""Kafka helpers for tests and benchmarks: unique names, topic set-up, bounded reads, waiting.

Every wait here has a deadline and polls a condition; nothing sleeps blindly.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, Message
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
