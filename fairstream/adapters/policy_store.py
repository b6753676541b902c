"""Read and write the compacted policy topic with confluent-kafka.

Reading assigns every partition from the beginning and reads up to the high watermark
observed at the start, so it sees every write acknowledged before the call, without a
consumer group and without committing anything. A tombstone (null value) deletes its key:
that tenant is back to the defaults. Writing waits for the broker's acknowledgement from all
in-sync replicas (acks=all).

Caller: ``fairstream tenants`` (the scheduler follows the topic with its own consumer,
``scheduler/policies.py``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from fairstream.adapters.admin import AuthWatch, KafkaAuthenticationError
from fairstream.adapters.clients import assigned_consumer_config, producer_config
from fairstream.config import Connection, KafkaConnection
from fairstream.errors import Error
from fairstream.wire.policy import (
    PolicyRecord,
    SchemaError,
    check_policy_key,
    decode_policy,
    encode_policy,
)

__all__ = ["PolicyStoreError", "read_policies", "write_policy"]


class PolicyStoreError(Error):
    """The policy topic cannot be read or written (missing topic, broker error, timeout)."""


NEW_TOPIC_GRACE = 5.0  # seconds a just-created topic may take to show in metadata


def _partitions(
    client: Consumer | Producer, topic: str, timeout: float, watch: AuthWatch
) -> list[int]:
    started = time.monotonic()
    deadline = started + timeout
    while True:
        # Short attempts: a refused login shows up in error_cb, not as a metadata error.
        try:
            metadata = client.list_topics(
                topic=topic, timeout=min(1.0, max(0.1, deadline - time.monotonic()))
            )
        except KafkaException as exc:
            client.poll(0)  # serves error_cb
            try:
                watch.check()
            except KafkaAuthenticationError as auth:
                raise PolicyStoreError(str(auth)) from exc
            if time.monotonic() >= deadline:
                raise PolicyStoreError(f"cannot read metadata of {topic}: {exc}") from exc
            continue
        info = metadata.topics.get(topic)
        if info is not None and info.error is None and info.partitions:
            break
        # A topic created a moment ago may not be in this broker's metadata yet, or have no
        # leader yet: ask again for a few seconds before calling it missing.
        if time.monotonic() >= min(deadline, started + NEW_TOPIC_GRACE):
            break
        time.sleep(0.2)
    if info is None or info.error is not None or not info.partitions:
        raise PolicyStoreError(
            f"the policy topic {topic} does not exist; create it with `fairstream topics "
            f"create` (a compacted topic, so that policies are kept)"
        )
    return sorted(info.partitions)


def read_policies(
    kafka: Connection,
    topic: str,
    timeout: float = 30.0,
    on_invalid: Callable[[bytes | None, SchemaError], None] | None = None,
) -> dict[bytes, PolicyRecord]:
    """Every policy currently on ``topic``: key (tenant id, or the default key ``b""``) -> record.

    A value that does not decode is passed to ``on_invalid`` and skipped (the key keeps its
    earlier value, if any); without ``on_invalid`` it raises ``SchemaError``. Raises
    ``PolicyStoreError`` when the topic is missing or is not read to its end in ``timeout``.
    """
    connection = KafkaConnection.of(kafka)
    watch = AuthWatch(connection)
    consumer = Consumer(
        assigned_consumer_config(
            {**connection.librdkafka(), "error_cb": watch},
            f"fairstream-policy-reader-{uuid.uuid4().hex[:12]}",
            {"enable.partition.eof": True, "auto.offset.reset": "earliest"},
        )
    )
    deadline = time.monotonic() + timeout
    policies: dict[bytes, PolicyRecord] = {}
    try:
        pending: dict[int, int] = {}  # partition -> high watermark still to reach
        for partition in _partitions(consumer, topic, timeout, watch):
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=max(1.0, timeout), cached=False
                )
            except KafkaException as exc:
                raise PolicyStoreError(f"cannot read the end offsets of {topic}: {exc}") from exc
            if high > low:
                pending[partition] = high
        if not pending:
            return policies
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PolicyStoreError(
                    f"read the policy topic {topic} for {timeout:.0f} s without reaching its "
                    f"end (partitions left: {sorted(pending)})"
                )
            msg: Message | None = consumer.poll(min(remaining, 0.5))
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    # Compaction and transaction markers leave gaps: EOF, not offset
                    # arithmetic, says the partition is read to its end.
                    pending.pop(msg.partition() or 0, None)
                    continue
                raise PolicyStoreError(f"error reading the policy topic {topic}: {err}")
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if partition in pending and offset >= pending[partition] - 1:
                pending.pop(partition)
            _apply(policies, msg.key(), msg.value(), on_invalid)
    finally:
        consumer.close()
    return policies


def _apply(
    policies: dict[bytes, PolicyRecord],
    key: bytes | None,
    value: bytes | None,
    on_invalid: Callable[[bytes | None, SchemaError], None] | None,
) -> None:
    try:
        if key is None:
            raise SchemaError("a policy record without a key")
        check_policy_key(key)
        if value is None:
            policies.pop(key, None)  # tombstone: back to the defaults
            return
        policies[key] = decode_policy(value)
    except (SchemaError, ValueError) as exc:
        error = exc if isinstance(exc, SchemaError) else SchemaError(str(exc))
        if on_invalid is None:
            raise error from exc
        on_invalid(key, error)


def write_policy(
    kafka: Connection,
    topic: str,
    key: bytes,
    record: PolicyRecord | None,
    timeout: float = 30.0,
) -> None:
    """Write ``record`` under ``key`` (None: a tombstone) and wait for acks from all replicas.

    Raises ``ValueError`` for a key that is neither a tenant id nor the default key, and
    ``PolicyStoreError`` when the topic is missing or the write is not acknowledged.
    """
    check_policy_key(key)
    value = None if record is None else encode_policy(record)
    connection = KafkaConnection.of(kafka)
    watch = AuthWatch(connection)
    producer = Producer(
        producer_config(
            {**connection.librdkafka(), "error_cb": watch},
            overrides={"message.timeout.ms": max(1000, int(timeout * 1000))},
        )
    )
    # Check first: producing to a missing topic could have the broker auto-create it
    # with the delete cleanup policy, which would lose policies to retention.
    _partitions(producer, topic, timeout, watch)
    outcome: list[KafkaError | None] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        outcome.append(err)

    try:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
    except (KafkaException, BufferError) as exc:
        raise PolicyStoreError(f"cannot write to {topic}: {exc}") from exc
    producer.flush(timeout + 5)
    if not outcome:
        raise PolicyStoreError(f"no acknowledgement from {topic} within {timeout:.0f} s")
    if outcome[0] is not None:
        raise PolicyStoreError(f"the write to {topic} failed: {outcome[0]}")
