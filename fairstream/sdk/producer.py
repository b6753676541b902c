"""``fairstream.Producer``: submit requests to the ingest topic the way the contract wants them.

Key = tenant id (UTF-8), value = the payload bytes untouched, and the optional
``fairstream-cost``, ``fairstream-request-id`` and ``fairstream-deadline-ms`` headers. The
producer is idempotent (no duplicates or reordering on librdkafka's retries) and partitions
with ``murmur2_random``, so a tenant lands on the partition a Java client or aiokafka would
pick. Arguments are checked before anything is queued: a record the scheduler would
dead-letter as invalid is refused here with a ``ValueError`` instead. Credentials the
broker refuses raise ``KafkaAuthenticationError`` (with the broker's reason) from the next
``submit`` or ``flush``, instead of records waiting out their delivery timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaError, Message
from confluent_kafka import Producer as _KafkaProducer

from fairstream import wire
from fairstream.adapters.admin import AuthWatch, KafkaAuthenticationError
from fairstream.adapters.clients import producer_config
from fairstream.config import DEFAULT_INGEST, Connection, KafkaConnection
from fairstream.errors import Error

__all__ = ["DeliveryError", "KafkaAuthenticationError", "Producer", "ingest_record"]

DeliveryCallback = Callable[[KafkaError | None, Message], None]
# Failures kept for DeliveryError; the count goes on beyond this.
KEPT_FAILURES = 100
# flush waits in slices this long, to notice a refused login between them.
FLUSH_SLICE = 0.2


def ingest_record(
    tenant: str,
    payload: bytes,
    *,
    cost: int = 1,
    request_id: str | None = None,
    deadline: datetime | int | None = None,
    headers: wire.HeaderInput | None = None,
) -> tuple[bytes, bytes, list[tuple[str, str | bytes | None]]]:
    """Key, value and headers of one ingest record, checked against the contract (raises
    ValueError/TypeError for a record the scheduler would dead-letter as invalid). Shared by
    ``Producer`` and ``fairstream.aio.Producer``."""
    key = wire.tenant_key(tenant)
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}; encode text first")
    # The stubs want str | bytes | None values; ours are all bytes.
    record_headers: list[tuple[str, str | bytes | None]] = list(
        wire.ingest_headers(cost=cost, request_id=request_id, deadline=deadline, headers=headers)
    )
    return key, bytes(payload), record_headers


class DeliveryError(Error):
    """Records the broker did not acknowledge (raised by ``Producer.flush``)."""

    def __init__(self, count: int, failures: list[tuple[KafkaError, Message]]) -> None:
        self.count = count
        self.failures = failures  # the first KEPT_FAILURES of them: (error, message)
        first = failures[0][0] if failures else "unknown error"
        super().__init__(f"{count} record(s) were not delivered; first error: {first}")


class Producer:
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
        own_error_cb = librdkafka_overrides.pop("error_cb", None)

        def on_error(err: KafkaError) -> None:
            self._auth(err)
            if own_error_cb is not None:
                own_error_cb(err)

        self._producer = _KafkaProducer(
            producer_config(
                connection.librdkafka(),
                overrides={**librdkafka_overrides, "error_cb": on_error},
            )
        )
        self.delivered = 0
        self.failed = 0  # since the last flush that raised
        self._failures: list[tuple[KafkaError, Message]] = []

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1
            if len(self._failures) < KEPT_FAILURES:
                self._failures.append((err, msg))
        if self._on_delivery is not None:
            self._on_delivery(err, msg)

    def submit(
        self,
        tenant: str,
        payload: bytes,
        *,
        cost: int = 1,
        request_id: str | None = None,
        deadline: datetime | int | None = None,
        headers: wire.HeaderInput | None = None,
    ) -> None:
        """Queue one request for ``tenant``; delivery happens in the background.

        ``deadline``: an aware datetime or epoch milliseconds after which the scheduler
        dead-letters the request as expired. Raises ValueError/TypeError for a record the
        contract rejects; blocks while librdkafka's queue is full. Raises
        KafkaAuthenticationError once the broker refused the credentials.
        """
        self._auth.check()
        key, value, record_headers = ingest_record(
            tenant, payload, cost=cost, request_id=request_id, deadline=deadline, headers=headers
        )
        while True:
            try:
                self._producer.produce(
                    self.topic, value, key, headers=record_headers, on_delivery=self._delivered
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
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            remaining = int(self._producer.flush(max(0.0, min(FLUSH_SLICE, left))))
            self._auth.check()
            if remaining == 0 or left <= FLUSH_SLICE:
                break
        if self.failed:
            error = DeliveryError(self.failed, self._failures)
            self.failed = 0
            self._failures = []
            raise error
        return remaining

    def __len__(self) -> int:
        """Records queued and not yet acknowledged."""
        return len(self._producer)

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # On the way out of an exception, still deliver what was queued, but let the
        # original exception win over a DeliveryError.
        if exc_type is None:
            self.flush()
        elif self._auth.failure is None:  # with refused credentials nothing would arrive
            self._producer.flush(30.0)
