"""``fairstream.Producer``: submit requests to the ingest topic the way the contract wants them.

Key = tenant id (UTF-8), value = the payload bytes untouched, and the optional
``fairstream-cost``, ``fairstream-request-id`` and ``fairstream-deadline-ms`` headers. The
producer is idempotent (no duplicates or reordering on librdkafka's retries) and partitions
with ``murmur2_random``, so a tenant lands on the partition a Java client or aiokafka would
pick. Arguments are checked before anything is queued: a record the scheduler would
dead-letter as invalid is refused here with a ``ValueError`` instead. Credentials the
broker refuses raise ``KafkaAuthenticationError`` (with the broker's reason) from the next
``submit`` or ``flush``, instead of records waiting out their delivery timeout.

``IngestProducer`` is what it shares with ``fairstream.aio.AsyncProducer``: the librdkafka
producer with those defaults and the credentials' watch, the checked record, the count of
deliveries and failures (``DeliveryError``), and flushing in slices.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Unpack

from confluent_kafka import KafkaError, Message
from confluent_kafka import Producer as _KafkaProducer

from fairstream.adapters.admin import AuthWatch, KafkaAuthenticationError
from fairstream.adapters.clients import producer_config
from fairstream.config import DEFAULT_INGEST, Connection, KafkaConnection
from fairstream.errors import Error
from fairstream.sdk.auth import watched
from fairstream.sdk.record import IngestOptions, ingest_record

__all__ = [
    "DeliveryError",
    "IngestOptions",
    "IngestProducer",
    "KafkaAuthenticationError",
    "Producer",
    "ingest_record",
]

DeliveryCallback = Callable[[KafkaError | None, Message], None]
# librdkafka's stubs want header values of str | bytes | None; ours are all bytes.
Headers = list[tuple[str, str | bytes | None]]
# Failures kept for DeliveryError; the count goes on beyond this.
KEPT_FAILURES = 100
# flush waits in slices this long, to notice a refused login between them.
FLUSH_SLICE = 0.2


class DeliveryError(Error):
    """Records the broker did not acknowledge (raised by ``Producer.flush``)."""

    def __init__(self, count: int, failures: list[tuple[KafkaError, Message]]) -> None:
        self.count = count
        self.failures = failures  # the first KEPT_FAILURES of them: (error, message)
        first = failures[0][0] if failures else "unknown error"
        super().__init__(f"{count} record(s) were not delivered; first error: {first}")


def flush_slices(timeout: float) -> Iterator[float]:
    """The waits one flush is made of: ``FLUSH_SLICE`` s each, ``timeout`` s in all (at least
    one wait). The caller checks the credentials after each, and stops once nothing is
    left."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        yield max(0.0, min(FLUSH_SLICE, left))
        if left <= FLUSH_SLICE:
            return


class IngestProducer:
    """What ``Producer`` and ``fairstream.aio.AsyncProducer`` share (see the module docstring).

    ``IngestProducer(kafka, ingest_topic, on_delivery=..., **overrides)`` as documented on
    ``Producer``. ``delivered`` and ``failed`` count the delivery reports (``failed`` since
    the last ``DeliveryError``).
    """

    def __init__(
        self,
        kafka: Connection,
        ingest_topic: str = DEFAULT_INGEST,
        *,
        on_delivery: DeliveryCallback | None = None,
        **librdkafka_overrides: Any,
    ) -> None:
        self.topic = ingest_topic
        self._on_delivery = on_delivery
        connection = KafkaConnection.of(kafka)
        # librdkafka retries a refused login forever; the watch lets submit and flush stop.
        self._auth = AuthWatch(connection)
        self._producer = _KafkaProducer(
            watched(
                self._auth,
                producer_config(connection.librdkafka(), overrides=librdkafka_overrides),
            )
        )
        self.delivered = 0
        self.failed = 0  # since the last flush that raised
        self._failures: list[tuple[KafkaError, Message]] = []

    def _record(
        self, tenant: str, payload: bytes, options: IngestOptions
    ) -> tuple[bytes, bytes, Headers]:
        """Key, value and headers of one record, once the credentials and the record are
        found good (KafkaAuthenticationError, ValueError, TypeError)."""
        self._auth.check()
        key, value, headers = ingest_record(tenant, payload, **options)
        wide: Headers = list(headers)
        return key, value, wide

    def _count(self, err: KafkaError | None, msg: Message) -> None:
        """Count one delivery report and hand it to ``on_delivery``."""
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1
            if len(self._failures) < KEPT_FAILURES:
                self._failures.append((err, msg))
        if self._on_delivery is not None:
            self._on_delivery(err, msg)

    def _flushed(self, remaining: int) -> int:
        """What a flush returns: ``remaining``; but DeliveryError when records failed since
        the last one (and then the count starts again)."""
        if self.failed:
            error = DeliveryError(self.failed, self._failures)
            self.failed = 0
            self._failures = []
            raise error
        return remaining

    def _deliver_quietly(self) -> None:
        """On the way out of an exception: still deliver what was queued, but let the
        original exception win over a DeliveryError."""
        if self._auth.failure is None:  # with refused credentials nothing would arrive
            self._producer.flush(30.0)

    def __len__(self) -> int:
        """Records queued and not yet acknowledged."""
        return len(self._producer)


class Producer(IngestProducer):
    """Writes requests to the ingest topic: key = tenant, value = payload, contract headers.

    ``Producer(kafka, ingest_topic, **overrides)``: ``kafka`` is a ``KafkaConnection``
    (bootstrap servers and authentication) or a bare bootstrap string (PLAINTEXT); the
    overrides are librdkafka settings
    (``**{"linger.ms": 20, "compression.type": "zstd"}``) and win over fairstream's defaults
    (idempotence, ``acks=all``, ``partitioner=murmur2_random``). ``on_delivery(err, msg)`` is
    called for every record once the broker answered, from ``submit`` or ``flush``; failed
    deliveries are also counted and raised together as ``DeliveryError`` by ``flush``.
    Refused credentials raise ``KafkaAuthenticationError`` from ``submit`` and ``flush`` as
    soon as librdkafka reports them (an ``error_cb`` in the overrides is still called).

    Not thread-safe: use one per thread (librdkafka batches across submits anyway).
    """

    def submit(self, tenant: str, payload: bytes, **options: Unpack[IngestOptions]) -> None:
        """Queue one request for ``tenant``; delivery happens in the background.

        ``options`` (``IngestOptions``): ``cost``, ``request_id``, ``deadline`` (an aware
        datetime or epoch milliseconds after which the scheduler dead-letters the request as
        expired) and ``headers``. Raises ValueError/TypeError for a record the contract
        rejects; blocks while librdkafka's queue is full. Raises KafkaAuthenticationError
        once the broker refused the credentials.
        """
        key, value, headers = self._record(tenant, payload, options)
        while True:
            try:
                self._producer.produce(
                    self.topic, value, key, headers=headers, on_delivery=self._count
                )
                break
            except BufferError:
                # librdkafka's queue is full: serve delivery reports until there is room.
                self._producer.poll(0.1)
                self._auth.check()
        self._producer.poll(0)
        self._auth.check()

    def flush(self, timeout: float = 30.0) -> int:
        """Wait up to ``timeout`` s for every queued record; return how many are still queued.

        Raises DeliveryError when records failed since the last such error (then resets),
        and KafkaAuthenticationError as soon as the broker refused the credentials.
        """
        for wait in flush_slices(timeout):
            remaining = int(self._producer.flush(wait))
            self._auth.check()
            if remaining == 0:
                break
        return self._flushed(remaining)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self.flush()
        else:
            self._deliver_quietly()
