"""Payloads read back from the ingest log.

The emitter holds buffered payloads in memory up to ``--buffer-memory``; beyond that a record
is indexed without its payload (tenant, offset, cost, times) and read again from the log
when its turn comes (a parked record's from the holding topic: a negative partition ``~p``
is partition ``p`` of it, ``holding``). A read fetches a run of records from that offset on
and keeps them in a small window, because the next turns usually want their neighbours: a
bursting tenant's records sit next to each other in its partition.

Caller: the emitter thread (not thread-safe). Affects: nothing but its own consumer.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from fairstream.adapters.clients import assigned_consumer_config

log = logging.getLogger("fairstream.fetch")

WINDOW_BYTES = 32 * 1024 * 1024  # records read ahead and kept for the next turns
READ_TIMEOUT = 10.0


class PayloadFetcher:
    def __init__(self, config: dict[str, Any], topic: str, holding: str | None = None) -> None:
        self._config = config
        self.topic = topic
        self.holding = holding  # a negative partition ~p is partition p of this topic
        self._consumer: Consumer | None = None
        self._window: OrderedDict[tuple[int, int], Message] = OrderedDict()
        self._bytes = 0
        self.reads = 0

    def _reader(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                assigned_consumer_config(
                    self._config,
                    f"{self.topic}.payloads",
                    {
                        "isolation.level": "read_committed",
                        "auto.offset.reset": "earliest",
                        "enable.partition.eof": True,
                        "fetch.wait.max.ms": 10,
                        "max.partition.fetch.bytes": 1024 * 1024,
                    },
                )
            )
        return self._consumer

    def get(self, partition: int, offset: int) -> Message | None:
        """The record at ``offset``, or None when the log no longer has it (deleted)."""
        key = (partition, offset)
        hit = self._window.pop(key, None)
        if hit is not None:
            self._bytes -= _size(hit)
            return hit
        self.reads += 1
        reader = self._reader()
        topic, real = self.topic, partition
        if partition < 0 and self.holding is not None:
            topic, real = self.holding, ~partition
        reader.assign([TopicPartition(topic, real, offset)])
        deadline = time.monotonic() + READ_TIMEOUT
        found: Message | None = None
        passed = False  # the log is past ``offset`` without it: it was deleted
        while found is None and not passed and time.monotonic() < deadline:
            for msg in reader.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        passed = True
                    else:
                        log.warning("reading back partition %d: %s", partition, err.str())
                    continue
                at = msg.offset()
                if msg.partition() != real or at is None or at < offset:
                    continue
                if at == offset:
                    found = msg
                else:
                    # Records come in offset order: one past ``offset`` before it means the
                    # log no longer has it (deleted by retention, or trimmed).
                    passed = passed or found is None
                    self._keep((partition, at), msg)
        self._trim()
        if found is None and (partition, offset) not in self._window:
            log.error("ingest record %d@%d could not be read back", partition, offset)
        return found

    def _keep(self, key: tuple[int, int], msg: Message) -> None:
        if key not in self._window:
            self._window[key] = msg
            self._bytes += _size(msg)

    def _trim(self) -> None:
        while self._bytes > WINDOW_BYTES and self._window:
            _, old = self._window.popitem(last=False)
            self._bytes -= _size(old)

    def forget(self, partition: int) -> None:
        """Drop the window's records of a partition this instance no longer owns."""
        for key in [k for k in self._window if k[0] == partition]:
            self._bytes -= _size(self._window.pop(key))

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _size(msg: Message) -> int:
    value = msg.value()
    return 100 + (len(value) if value else 0)
