"""The ports: the few calls of Kafka's clients that the scheduler's data path makes, as
Protocols.

The emitter reaches the broker through ``TransactionalProducer`` (its ``Transaction``
produces egress, dead-letter, holding and progress records in one transaction and commits
the group's offsets with them). confluent-kafka's ``Producer`` has these methods, so it is
the adapter in production (``connect_producer``); a test passes an object of its own, an
in-memory cluster's producer, and the emitter then runs without a broker, as Kafka Streams'
``TopologyTestDriver`` runs a topology.

The signatures are confluent-kafka's, narrowed to what the scheduler passes; errors are its
``KafkaException`` carrying a ``KafkaError`` (``fatal()``, ``retriable()``,
``txn_requires_abort()``), which ``Transaction`` reads to tell an abort from a fence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import Producer

__all__ = ["ProducerFactory", "TransactionalProducer", "connect_producer"]


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
        *,
        partition: int = ...,
        timestamp: int = ...,
        headers: dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None = ...,
    ) -> None:
        """Queue one record (``timestamp`` in epoch ms). Raises ``BufferError`` when the
        local queue is full."""

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
