"""One confluent-kafka (librdkafka) producer for everything the scheduler writes.

Buffer writes to the changelog, egress records, dead letters and buffer pops all go through
this producer rather than Faust's: librdkafka queues a record in microseconds, where Faust's
producer buffer drains one record at a time and caps ingest at about a thousand records per
second on a small machine. One idempotent producer also keeps every changelog partition's
writes in the order they were made, which the buffer's correctness relies on (a pop's
tombstone never overtakes the write it deletes).

Delivery callbacks run on the event loop: a small task polls the producer while records are
outstanding, and ``flush`` awaits every outstanding delivery without blocking the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

log = logging.getLogger("fairstream.writer")

DeliveryCallback = Callable[[KafkaError | None, Message], None]


class Writer:
    """An idempotent producer whose delivery reports are served on the asyncio loop.

    Caller: the scheduler service. Affects: the topics it writes.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self._producer = Producer(
            {
                "enable.idempotence": True,  # no duplicates or reordering on retries
                "acks": "all",
                "linger.ms": 2,
                "batch.num.messages": 10_000,
                "queue.buffering.max.messages": 1_000_000,
                # Agrees with Java clients and aiokafka on which partition a key goes to.
                "partitioner": "murmur2_random",
                **config,
            }
        )
        self._outstanding = 0
        self._work = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._serve())

    async def stop(self) -> None:
        await self.flush()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Queue one record; ``on_delivery(err, msg)`` runs on the loop once it is acked."""

        def delivered(err: KafkaError | None, msg: Message) -> None:
            self._outstanding -= 1
            if self._outstanding == 0:
                self._idle.set()
            if on_delivery is not None:
                on_delivery(err, msg)
            elif err is not None:
                log.error("delivery to %s failed: %s", topic, err)

        kwargs: dict[str, Any] = {"on_delivery": delivered}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = list(headers)
        while True:
            try:
                self._producer.produce(topic, value, key, **kwargs)
                break
            except BufferError:
                # librdkafka's queue is full: serve delivery reports to make room.
                self._producer.poll(0.05)
        self._outstanding += 1
        self._idle.clear()
        self._work.set()

    @property
    def outstanding(self) -> int:
        return self._outstanding

    async def flush(self, timeout: float = 60.0) -> None:
        """Wait until every queued record is acknowledged (or failed and reported)."""
        self._producer.poll(0)
        if self._outstanding:
            self._work.set()
            await asyncio.wait_for(self._idle.wait(), timeout)

    async def _serve(self) -> None:
        poll = self._producer.poll
        while True:
            if not self._outstanding:
                self._work.clear()
                await self._work.wait()
            poll(0)
            # Delivery reports arrive within a broker round trip; a short sleep lets the
            # loop run the scheduler in between without spinning.
            await asyncio.sleep(0.001)
