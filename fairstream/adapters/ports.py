"""The ports: the few calls of Kafka's clients that the scheduler's data path makes, as
Protocols.

The emitter reaches the broker through two ports: ``TransactionalProducer`` (its
``Transaction`` produces egress, dead-letter, holding and progress records in one
transaction and commits the group's offsets with them) and ``AssignedReader`` (the ingest
thread's ``Readers`` read each owned partition with one, and the emitter's
``PayloadFetcher`` reads back payloads it did not keep in memory). confluent-kafka's
``Producer`` and ``Consumer`` have these methods, so they are the adapters in production
(``connect_producer``, ``connect_consumer``); a test passes factories of its own, an
in-memory cluster's, and the emitter then runs without a broker, as Kafka Streams'
``TopologyTestDriver`` runs a topology.

The signatures are confluent-kafka's, narrowed to what the scheduler passes; errors are its
``KafkaException`` carrying a ``KafkaError`` (``fatal()``, ``retriable()``,
``txn_requires_abort()``), which ``Transaction`` reads to tell an abort from a fence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import Consumer, Message, Producer, TopicPartition

__all__ = [
    "AssignedReader",
    "ConsumerFactory",
    "ProducerFactory",
    "TransactionalProducer",
    "connect_consumer",
    "connect_producer",
]


class TransactionalProducer(Protocol):
    """A transactional producer, as ``Transaction`` drives it (confluent-kafka's
    ``Producer``)."""

    def init_transactions(self, timeout: float) -> None: ...

    def begin_transaction(self) -> None: ...

    def produce(
        self,
        topic: str,
        value: bytes | None = ...,
        key: bytes | None = ...,
        partition: int = ...,
        callback: Callable[[Any, Any], None] | None = ...,
        on_delivery: Callable[[Any, Any], None] | None = ...,
        timestamp: int = ...,
        headers: dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None = ...,
    ) -> None:
        """Queue one record (``partition`` -1: the partitioner's choice; ``timestamp`` in
        epoch ms, 0: now). Raises ``BufferError`` when the local queue is full. The
        parameters are confluent-kafka's, in its order: the emitter passes them all by
        position."""

    def poll(self, timeout: float = ...) -> int:
        """Serve the client's callbacks (errors, delivery reports)."""

    def flush(self, timeout: float = ...) -> int: ...

    def send_offsets_to_transaction(
        self, positions: list[Any], group_metadata: Any, timeout: float = ...
    ) -> None: ...

    def commit_transaction(self, timeout: float = ...) -> None: ...

    def abort_transaction(self, timeout: float = ...) -> None: ...

    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any:
        """Cluster metadata: ``.topics[name]`` has ``.error`` and ``.partitions``."""


# Builds a producer from a librdkafka configuration (``transactional.id`` included).
ProducerFactory = Callable[[dict[str, Any]], TransactionalProducer]


def connect_producer(config: dict[str, Any]) -> TransactionalProducer:
    """The production adapter: a confluent-kafka ``Producer`` on ``config``."""
    producer: TransactionalProducer = Producer(config)
    return producer


class AssignedReader(Protocol):
    """A consumer of partitions assigned by hand, outside any group, as ``Readers`` and
    ``PayloadFetcher`` read with it (confluent-kafka's ``Consumer``)."""

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Read these partitions from their offsets (a seek)."""

    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Message]:
        """Up to ``num_messages`` records in offset order per partition, or errors (the end
        of a partition: ``_PARTITION_EOF``), waiting up to ``timeout`` seconds for one."""

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = ..., cached: bool = ...
    ) -> tuple[int, int]:
        """The partition's log start and end (low and high watermarks)."""

    def close(self) -> None: ...


# Builds a consumer from a librdkafka configuration.
ConsumerFactory = Callable[[dict[str, Any]], AssignedReader]


def connect_consumer(config: dict[str, Any]) -> AssignedReader:
    """The production adapter: a confluent-kafka ``Consumer`` on ``config``."""
    consumer: AssignedReader = Consumer(config)
    return consumer
