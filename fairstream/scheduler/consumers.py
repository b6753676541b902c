"""The scheduler's consumers of partitions assigned by hand, outside any group: opened when
first needed, closed with their owner; and the wait for a topic that may not exist yet.

- ``LazyConsumer``: the payload fetcher's reader (``emitter.fetch``), the recovery's
  progress reader (``recovery``), the trimmer's watcher and its reader of the group's offsets
  (``retention.trim``) and the feedback reader's consumer (``feedback.reader``) are each one
  consumer, made from
  ``assigned_consumer_config`` on first use and closed when their owner stops (a restarted
  run opens a new one).
- ``assign_when_present``: the feedback and policy readers follow every partition of their
  topic, which may be created after the scheduler starts: they look again every
  ``RETRY_TOPIC`` seconds, saying so each time, until it exists or they are stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar, overload

from confluent_kafka import Consumer, TopicPartition

from fairstream.adapters.clients import assigned_consumer_config

__all__ = ["RETRY_TOPIC", "LazyConsumer", "assign_when_present"]

RETRY_TOPIC = 30.0  # seconds between two looks for a topic that is missing


class _Closes(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closes)


class LazyConsumer(Generic[C]):
    """One consumer of partitions assigned by hand (``assigned_consumer_config`` of
    ``base``, ``group_id`` and ``overrides``), opened by the first ``get``: by ``connect``
    (confluent-kafka's ``Consumer``, or a test's in-memory one: ``adapters.ports``)."""

    __slots__ = ("_config", "_connect", "_consumer")

    @overload
    def __init__(
        self: LazyConsumer[Consumer],
        base: Mapping[str, Any],
        group_id: str,
        overrides: Mapping[str, Any] | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        base: Mapping[str, Any],
        group_id: str,
        overrides: Mapping[str, Any] | None = None,
        *,
        connect: Callable[[dict[str, Any]], C],
    ) -> None: ...

    def __init__(
        self,
        base: Mapping[str, Any],
        group_id: str,
        overrides: Mapping[str, Any] | None = None,
        *,
        connect: Callable[[dict[str, Any]], Any] = Consumer,
    ) -> None:
        self._config = assigned_consumer_config(base, group_id, overrides)
        self._connect = connect
        self._consumer: C | None = None

    def get(self) -> C:
        """The consumer, opened now if it is not open."""
        if self._consumer is None:
            self._consumer = self._connect(self._config)
        return self._consumer

    def close(self) -> None:
        """Close the consumer if it is open; the next ``get`` opens a new one."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def assign_when_present(
    consumer: Consumer,
    topic: str,
    offset: int,
    stopping: threading.Event,
    missing: Callable[[], None],
) -> bool:
    """Assign ``consumer`` every partition of ``topic`` from ``offset`` once the topic exists;
    while it does not, ``missing()`` (a warning) and another look ``RETRY_TOPIC`` later.
    False when ``stopping`` is set first."""
    while not stopping.is_set():
        info = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if info is not None and info.error is None:
            consumer.assign([TopicPartition(topic, p, offset) for p in info.partitions])
            return True
        missing()
        stopping.wait(RETRY_TOPIC)
    return False
