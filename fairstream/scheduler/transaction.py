"""The transactional producer, and what the open transaction holds.

Egress records, dead letters and progress records are produced inside one transaction;
``commit`` sends the low-water marks as the group's offsets with the owning member's group
metadata (KIP-447) and commits. A commit the broker refuses for a reason that allows an
abort (a stale generation, a failed send) raises ``Aborted`` after aborting; anything
else (fenced by a newer producer with the same transactional id) raises ``FatalError``.

Caller: the emitter thread only.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaException, Producer, TopicPartition

log = logging.getLogger("fairstream.transaction")

API_TIMEOUT = 30.0  # seconds for a transactional call


class FatalError(Exception):
    """The instance cannot go on (fenced by a newer instance, a broken producer)."""


class Aborted(Exception):
    """The transaction was aborted: what it held is as if it never happened."""


class Transaction:
    def __init__(self, config: dict[str, Any], transactional_id: str, timeout: float) -> None:
        self.producer = Producer(
            {
                **config,
                "transactional.id": transactional_id,
                "transaction.timeout.ms": int(timeout * 1000),
                "acks": "all",
                "linger.ms": 5,
                "batch.num.messages": 10_000,
                "queue.buffering.max.messages": 1_000_000,
                "queue.buffering.max.kbytes": 1_048_576,
                # Agrees with Java clients on which egress partition a tenant's records use.
                "partitioner": "murmur2_random",
            }
        )
        self.open = False
        self.records = 0  # records produced in the open transaction
        self._produced = 0

    def init(self) -> None:
        """Register the transactional id, fencing an older producer with the same id (a
        previous run of this instance) and aborting what it left open."""
        self.producer.init_transactions(API_TIMEOUT)

    def begin(self) -> None:
        if not self.open:
            self.producer.begin_transaction()
            self.open = True

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
    ) -> None:
        """Produce one record in the transaction (begun if need be)."""
        self.begin()
        kwargs: dict[str, Any] = {}
        if headers:
            kwargs["headers"] = headers
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self.producer.produce(topic, value, key, **kwargs)
                break
            except BufferError:
                self.producer.poll(0.05)  # librdkafka's queue is full: let it drain
        self.records += 1
        self._produced += 1
        if self._produced % 1000 == 0:
            self.producer.poll(0)  # serve delivery reports: librdkafka's queue stays short

    def commit(self, offsets: list[TopicPartition], group_metadata: Any) -> None:
        """Send the offsets with the member's group metadata and commit."""
        self.begin()
        try:
            self.producer.send_offsets_to_transaction(offsets, group_metadata, API_TIMEOUT)
            deadline = time.monotonic() + API_TIMEOUT
            while True:
                try:
                    self.producer.commit_transaction(API_TIMEOUT)
                    break
                except KafkaException as exc:
                    if not exc.args[0].retriable() or time.monotonic() >= deadline:
                        raise
                    log.warning("commit_transaction: %s; retrying", exc.args[0].str())
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                self.abort(err.str())
                raise Aborted(err.str()) from exc
            raise FatalError(f"the transaction failed and cannot be aborted: {err.str()}") from exc
        self.open = False
        self.records = 0

    def abort(self, why: str) -> None:
        log.warning("aborting the transaction (%s)", why)
        try:
            self.producer.abort_transaction(API_TIMEOUT)
        except KafkaException as exc:
            raise FatalError(f"aborting the transaction failed: {exc.args[0].str()}") from exc
        self.open = False
        self.records = 0

    def close(self) -> None:
        self.producer.flush(API_TIMEOUT)
