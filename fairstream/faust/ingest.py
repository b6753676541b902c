"""``fairstream.faust.IngestWriter``: a Faust app writes fairstream ingest records.

The record is what ``fairstream.Producer`` writes: key = the tenant id (UTF-8), value = the
payload bytes untouched, the caller's headers and then ``fairstream-cost`` (always),
``fairstream-request-id`` and ``fairstream-deadline-ms`` (when given), built and checked by
``fairstream.sdk.record.ingest_record`` as for the other producers. Arguments the scheduler
would dead-letter as invalid are refused here with ``ValueError``/``TypeError`` before
anything is sent.

Partitioning: the record goes through the app's producer with no explicit partition, so
aiokafka's default partitioner places it: Kafka's murmur2 of the key, the partition
``fairstream.wire.partition.partition_of`` computes and the scheduler expects. ``IngestWriter``
refuses an app with another ``producer_partitioner``, and an app on Faust's confluent
driver (it drops headers). The record goes through the app's own producer at once, outside
Faust's transactions in either processing guarantee (``fairstream.faust._app.DirectSender``): an
agent that crashes before Faust commits its offsets submits the same request again when it
handles the event again, so give requests a ``request_id`` (workers recognise it).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Unpack

import faust

from fairstream.config import DEFAULT_INGEST
from fairstream.faust._app import DirectSender, check_app
from fairstream.sdk.record import IngestOptions, ingest_record

__all__ = ["IngestWriter"]


class IngestWriter:
    """Writes requests to the fairstream ingest topic from a Faust app.

    ``IngestWriter(app, topic)``: the topic must exist (``fairstream topics create`` makes it).
    ``await ingest.send(tenant, payload, ...)`` queues one record and returns the future of
    its ``RecordMetadata``; ``send_and_wait`` waits for the broker's acknowledgement.
    """

    def __init__(self, app: faust.App, topic: str = DEFAULT_INGEST) -> None:
        check_app(app, "fairstream.faust.IngestWriter")
        self.app = app
        self.topic = topic
        self.sender = DirectSender(app)

    async def send(
        self, tenant: str, payload: bytes, **options: Unpack[IngestOptions]
    ) -> Awaitable[Any]:
        """Queue one request for ``tenant``; returns the future of its RecordMetadata.

        ``options`` (``fairstream.sdk.record.IngestOptions``): ``cost``, a positive integer
        (e.g. tokens); ``request_id``, the idempotency key (ASCII; default
        ``<topic>-<partition>-<offset>`` of the ingest record); ``deadline``, an aware
        datetime or epoch milliseconds after which the scheduler dead-letters the request as
        expired; ``headers``. Raises ValueError/TypeError for a record the contract rejects.
        """
        key, value, headers = ingest_record(tenant, payload, **options)
        return await self.sender.send(self.topic, key, value, list(headers))

    async def send_and_wait(
        self, tenant: str, payload: bytes, **options: Unpack[IngestOptions]
    ) -> Any:
        """``send``, then wait for the broker's acknowledgement (the RecordMetadata)."""
        sent = await self.send(tenant, payload, **options)
        return await sent
