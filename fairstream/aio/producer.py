"""``fairstream.aio.AsyncProducer``: ``fairstream.Producer``'s contract on an asyncio event loop.

The record is the same (``fairstream.sdk.record.ingest_record``: key = tenant, value
untouched, the contract headers, checked before anything is queued), and so are the client
defaults (idempotence, ``acks=all``, ``murmur2_random``) and the counts: both are
``fairstream.sdk.producer.IngestProducer``. What changes is waiting:

- ``await submit(...)`` queues the record and returns an ``asyncio.Future`` of its delivery
  (the ``Message`` the broker acknowledged, or ``DeliveryError``); awaiting it is optional.
- ``await flush()`` waits for every queued record without blocking the loop, and raises the
  failures counted since the last one, as the blocking producer does.
- ``async with`` flushes on the way out.

It is built on ``confluent_kafka.Producer`` with a poll thread of its own, not on
``confluent_kafka.aio.AIOProducer``: in confluent-kafka 2.16 the latter batches records into
``produce_batch``, which takes no headers (its ``produce`` raises NotImplementedError for
them), and ingest records carry the cost, request id and deadline as headers.

Threads: the poll thread serves librdkafka's callbacks and hands each delivery to the event
loop (``call_soon_threadsafe``); futures, counters and ``on_delivery`` run on the loop only.
A producer belongs to the loop that submits through it, one loop at a time.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Unpack

from confluent_kafka import KafkaError, Message

from fairstream.sdk.producer import DeliveryError, IngestProducer, flush_slices
from fairstream.sdk.record import IngestOptions

__all__ = ["AsyncProducer"]

POLL_TIMEOUT = 0.1  # seconds the poll thread waits for callbacks at a time
QUEUE_FULL_WAIT = 0.01  # seconds submit yields to the loop while librdkafka's queue is full


class AsyncProducer(IngestProducer):
    """Writes requests to the ingest topic from an event loop.

    ``AsyncProducer(kafka, ingest_topic, **overrides)`` as ``fairstream.Producer``: ``kafka`` is a
    ``KafkaConnection`` or a bootstrap string, the overrides are librdkafka settings.
    ``on_delivery(err, msg)`` runs on the event loop for every record once the broker
    answered. It may be created outside a loop; it binds to the loop of its first
    ``submit``, and using it from another running loop raises RuntimeError (once that loop
    is closed, the next loop takes it over).
    """

    # The loop and the poll thread: none until the first submit binds them (_bind).
    _loop: asyncio.AbstractEventLoop | None = None
    _poller: threading.Thread | None = None
    _closing: threading.Event | None = None  # tells the poll thread to end
    closed = False

    # -- the loop and the poll thread ----------------------------------------------------------

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            if self.closed:
                raise RuntimeError("this fairstream.aio.AsyncProducer is closed")
            self._loop = loop
            self._closing = threading.Event()
            self._poller = threading.Thread(
                target=self._poll,
                args=(self._closing,),
                name="fairstream-aio-producer-poll",
                daemon=True,
            )
            self._poller.start()
        elif loop is not self._loop:
            if self._loop.is_closed():  # its loop is gone (asyncio.run ended): take this one
                self._loop = loop
                return loop
            raise RuntimeError(
                "a fairstream.aio.AsyncProducer belongs to the event loop it first submitted on; "
                "create one per loop"
            )
        return loop

    def _poll(self, closing: threading.Event) -> None:
        # librdkafka's callbacks (error_cb too) run here, or on a flush's executor thread.
        while not closing.is_set():
            self._producer.poll(POLL_TIMEOUT)

    def _report(
        self, future: asyncio.Future[Message], err: KafkaError | None, msg: Message
    ) -> None:
        # librdkafka's thread (poll or flush): the rest happens on the loop.
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._settle, future, err, msg)

    def _settle(
        self, future: asyncio.Future[Message], err: KafkaError | None, msg: Message
    ) -> None:
        self._count(err, msg)
        if future.done():  # cancelled by the caller
            return
        if err is None:
            future.set_result(msg)
        else:
            future.set_exception(DeliveryError(1, [(err, msg)]))

    # -- the contract --------------------------------------------------------------------------

    async def submit(
        self, tenant: str, payload: bytes, **options: Unpack[IngestOptions]
    ) -> asyncio.Future[Message]:
        """Queue one request for ``tenant``; the future resolves to the acknowledged
        ``Message`` or raises ``DeliveryError``. Failures also count for ``flush``.

        ``options`` as for ``fairstream.Producer.submit`` (``IngestOptions``). Raises
        ValueError/TypeError for a record the contract rejects (nothing is queued), and
        KafkaAuthenticationError once the broker refused the credentials. While librdkafka's
        queue is full it yields to the loop until there is room.
        """
        key, value, headers = self._record(tenant, payload, options)
        loop = self._bind()
        future: asyncio.Future[Message] = loop.create_future()
        # Awaiting the future is optional: its exception counts as retrieved, and flush
        # raises the failures together.
        future.add_done_callback(_retrieved)
        report = functools.partial(self._report, future)
        while True:
            try:
                self._producer.produce(self.topic, value, key, headers=headers, on_delivery=report)
                return future
            except BufferError:
                await asyncio.sleep(QUEUE_FULL_WAIT)  # the poll thread makes room
                self._auth.check()

    async def flush(self, timeout: float = 30.0) -> int:
        """Wait up to ``timeout`` s for every queued record, off the loop; return how many are
        still queued. Raises DeliveryError for the records that failed since the last such
        error, and KafkaAuthenticationError once the broker refused the credentials."""
        loop = asyncio.get_running_loop()
        for wait in flush_slices(timeout):
            remaining = int(await loop.run_in_executor(None, self._producer.flush, wait))
            self._auth.check()
            if remaining == 0:
                break
        # The deliveries served by that flush were handed to the loop before it returned.
        await asyncio.sleep(0)
        return self._flushed(remaining)

    async def close(self, timeout: float = 30.0) -> None:
        """Flush what is queued (raising its failures), then stop the poll thread."""
        try:
            await self.flush(timeout)
        finally:
            self._stop()

    def _stop(self) -> None:
        self.closed = True
        if self._closing is not None:
            self._closing.set()
        if self._poller is not None:
            self._poller.join(5 * POLL_TIMEOUT + 1)

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            await self.close()
            return
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._deliver_quietly)
        finally:
            self._stop()


def _retrieved(future: asyncio.Future[Message]) -> None:
    if not future.cancelled():
        future.exception()
