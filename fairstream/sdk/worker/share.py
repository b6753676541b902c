"""``fairstream.ShareWorker``: paid-API workers in a Kafka share group (KIP-932), as an option.

A classic consumer group gives each egress partition to one worker, so a group of workers
is as large as the egress topic has partitions. A share group (production-ready in Apache
Kafka 4.2; confluent-kafka 2.16's ``ShareConsumer`` is a *preview*) hands records, not
partitions, to its members: any number of workers share any number of partitions.

What it gives up: order. Records are delivered to whichever member asks, and a released
record comes back later, so a tenant's records can start and finish in any order (the
classic ``Worker`` starts them in egress order). Everything else keeps its contract:

- **Isolation.** The scheduler writes egress in transactions. A share group reads at its
  group config ``share.isolation.level``, which defaults to read_uncommitted; ``run`` sets it
  to ``read_committed`` (and ``share.auto.offset.reset=earliest`` for a new group) before it
  subscribes, and refuses to start if it cannot.
- **Acknowledgement** (explicit mode): a record whose handler succeeded is *accepted*; one
  that failed or was rate-limited is *released* (the broker delivers it again, to this
  worker or another, and counts the delivery); on its last allowed delivery it is written
  to the dead-letter topic, and *rejected* once the broker acknowledged the dead letter.
- **Attempts are deliveries.** ``request.attempt`` is the broker's delivery count. At most
  ``max_attempts`` deliveries, and one fewer than the group's ``share.delivery.count.limit``
  (5 by default): past that limit the broker archives a record without telling anyone, so
  one delivery is kept in reserve for a dead letter that could not be written in time.
- **Rate limits.** A 429 (``RateLimited``) waits out its Retry-After in place while the
  record's lock allows (``lock_budget``, two thirds of ``share.record.lock.duration.ms``),
  then calls again; a longer wait releases the record. A rate limit does not use up an
  attempt in place, but a release is a delivery.
- **Kill -9.** The records a dead member held come back when their locks expire (30 s by
  default), to the other members: at-least-once, recognisable by request id; a worker skips
  request ids it handled recently (``dedup_window``).
- **Feedback** (outcomes, 429s, measured cost) goes to the feedback topic as from
  ``Worker``.

Threads: ``run``'s thread owns the ``ShareConsumer`` (not thread-safe: poll, acknowledge,
commit); handlers run on an event loop of the worker's own (a thread), sync ones in a pool.
Each polled batch is handled concurrently (at most ``concurrency`` calls at once), then
acknowledged and committed before the next poll, as explicit mode requires.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from enum import Enum
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaError, Message, ShareConsumer

# confluent-kafka's stubs do not re-export these names, though the module defines them.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from fairstream import wire
from fairstream.adapters import clients
from fairstream.adapters.admin import AuthWatch
from fairstream.config import DEFAULT_DLQ, DEFAULT_EGRESS, Connection, KafkaConnection
from fairstream.errors import Error
from fairstream.sdk.worker.calling import Calling, OutcomeReport, is_async_handler
from fairstream.sdk.worker.feedback import FeedbackWriter, feedback_settings
from fairstream.sdk.worker.handler import (
    Handler,
    RateLimited,
    Request,
    request_from_message,
    where,
)
from fairstream.sdk.worker.metrics import WorkerMetrics
from fairstream.sdk.worker.outputs import Outputs
from fairstream.sdk.worker.pacing import PLAYOUT_DELAY, start_at
from fairstream.sdk.worker.retry import backoff_delay
from fairstream.sdk.worker.tracking import RecentIds
from fairstream.wire.feedback import DEFAULT_FEEDBACK_TOPIC
from fairstream.wire.feedback import Outcome as Reported

__all__ = ["DEFAULT_SHARE_GROUP", "Acknowledgement", "ShareGroupError", "ShareWorker", "deliveries"]

log = logging.getLogger("fairstream.worker.share")

DEFAULT_SHARE_GROUP = "fairstream-share-workers"
MAX_DETAIL_CHARS = 2000
POLL_TIMEOUT = 0.5
CONFIG_PROPAGATION = 10.0  # seconds a group config set here may take to show in a describe


class ShareGroupError(Error):
    """The share group cannot be used as fairstream needs it (broker, ACLs, its configs)."""


class Acknowledgement(Enum):
    """What a handled record's acknowledgement says to the broker."""

    ACCEPT = AcknowledgeType.ACCEPT  # done (or dead-lettered): never again
    RELEASE = AcknowledgeType.RELEASE  # deliver it again
    REJECT = AcknowledgeType.REJECT  # dead-lettered: archived


def deliveries(max_attempts: int, delivery_limit: int) -> int:
    """The deliveries a record gets before it is dead-lettered: ``max_attempts``, and one
    fewer than the group's ``share.delivery.count.limit`` (the broker archives a record past
    it silently; the spare delivery is for a dead letter that could not be written). Pure."""
    return max(1, min(max_attempts, delivery_limit - 1))


class ShareWorker(Calling):
    """Consume the egress topic through a share group and call ``handler(request)``.

    The arguments mean what they mean for ``fairstream.Worker`` (``bootstrap``, topics,
    ``max_attempts``, backoff, ``dedup_window``, ``concurrency``, ``feedback_topic``,
    ``consumer_config`` / ``producer_config``, ``playout_delay``); ``group_id`` names the
    share group.
    ``run()`` blocks until ``stop()``. See the module docstring for what it guarantees.
    """

    metrics: WorkerMetrics

    def __init__(
        self,
        handler: Handler,
        *,
        bootstrap: Connection,
        egress_topic: str = DEFAULT_EGRESS,
        dlq_topic: str = DEFAULT_DLQ,
        group_id: str = DEFAULT_SHARE_GROUP,
        max_attempts: int = 4,
        backoff_initial: float = 0.1,
        backoff_max: float = 10.0,
        dedup_window: int | None = 10_000,
        concurrency: int = 16,
        consumer_config: dict[str, Any] | None = None,
        producer_config: dict[str, Any] | None = None,
        feedback_topic: str | None = DEFAULT_FEEDBACK_TOPIC,
        playout_delay: float | None = PLAYOUT_DELAY,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not callable(handler):
            raise TypeError("handler must be callable")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if backoff_initial < 0 or backoff_max < backoff_initial:
            raise ValueError("need 0 <= backoff_initial <= backoff_max")
        if playout_delay is not None and not 0 <= playout_delay <= 60:
            raise ValueError(f"playout_delay must be from 0 to 60 s, got {playout_delay}")
        self.playout_delay = playout_delay or None
        self._wall = wall_clock
        self.handler = handler
        self.kafka = KafkaConnection.of(bootstrap)
        self.egress_topic, self.dlq_topic, self.group_id = egress_topic, dlq_topic, group_id
        self.max_attempts = max_attempts
        self.backoff_initial, self.backoff_max = backoff_initial, backoff_max
        self.concurrency = concurrency
        self.metrics = WorkerMetrics()
        self.received = 0  # records polled (deliveries, retries included)
        self.handled = 0  # handler calls that succeeded
        self.dead_lettered = 0
        self.released = 0
        self.duplicates_skipped = 0
        self._auth = AuthWatch(self.kafka)
        self._consumer_config: dict[str, Any] = {
            **self.kafka.librdkafka(),
            "group.id": group_id,
            "share.acknowledgement.mode": "explicit",
            # A poll takes what it can handle at once: records it holds are locked away
            # from the other members until acknowledged.
            "max.poll.records": concurrency,
            "error_cb": self._auth,
            **(consumer_config or {}),
        }
        feedback = (
            None
            if feedback_topic is None
            else FeedbackWriter(
                feedback_topic, feedback_settings(self.kafka, producer_config), self.metrics
            )
        )
        self._outputs = Outputs(
            dlq_topic,
            clients.producer_config(
                self.kafka.librdkafka(), linger_ms=1, overrides=producer_config
            ),
            feedback,
        )
        self._recent = RecentIds(dedup_window) if dedup_window is not None else None
        self._is_async = is_async_handler(handler)
        self._stopping = threading.Event()
        self.running = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._deliveries = deliveries(max_attempts, 5)
        self._lock_budget = 20.0

    def stop(self) -> None:
        """Ask ``run`` to finish the batch in hand, acknowledge it and leave."""
        self._stopping.set()

    # -- the group's configuration ---------------------------------------------------------

    def configure_group(self) -> dict[str, str]:
        """Make the share group read committed records only (and start a new group at the
        earliest offset); return its ``share.*`` configs. Raises ShareGroupError."""
        config: dict[str, Any] = {**self.kafka.librdkafka(), "error_cb": self._auth}
        admin = AdminClient(config)
        resource = ConfigResource(
            ResourceType.GROUP,
            self.group_id,
            incremental_configs=[
                ConfigEntry(
                    "share.isolation.level",
                    "read_committed",
                    incremental_operation=AlterConfigOpType.SET,
                ),
                ConfigEntry(
                    "share.auto.offset.reset",
                    "earliest",
                    incremental_operation=AlterConfigOpType.SET,
                ),
            ],
        )
        try:
            admin.incremental_alter_configs([resource])[resource].result(30)
            # A group's config reaches the brokers through the metadata log: a describe right
            # after the alter may still show the old value (seen in CI). Ask again for a while.
            deadline = time.monotonic() + CONFIG_PROPAGATION
            while True:
                described = admin.describe_configs(
                    [ConfigResource(ResourceType.GROUP, self.group_id)]
                )
                [future] = described.values()
                configs = {name: entry.value for name, entry in future.result(30).items()}
                if (
                    configs.get("share.isolation.level") == "read_committed"
                    or time.monotonic() >= deadline
                ):
                    break
                time.sleep(0.2)
        except Exception as exc:
            self._auth.check()
            raise ShareGroupError(
                f"cannot set share.isolation.level=read_committed on share group "
                f"{self.group_id!r}: {exc}. Share groups need Apache Kafka 4.2 or later "
                "(share.version enabled) and ALTER_CONFIGS on the group; egress is "
                "transactional, so reading it uncommitted would see aborted records."
            ) from exc
        if configs.get("share.isolation.level") != "read_committed":
            raise ShareGroupError(
                f"share group {self.group_id!r} reads "
                f"{configs.get('share.isolation.level')!r} after it was set to read_committed"
            )
        limit = int(configs.get("share.delivery.count.limit") or 5)
        lock_ms = int(configs.get("share.record.lock.duration.ms") or 30_000)
        self._deliveries = deliveries(self.max_attempts, limit)
        self._lock_budget = lock_ms / 1000 * 2 / 3
        return {k: v for k, v in configs.items() if k.startswith("share.") and v is not None}

    # -- the consumer's thread -------------------------------------------------------------

    def run(self) -> None:
        """Consume until ``stop()``. Caller: the application, on one thread."""
        self.configure_group()
        loop = asyncio.new_event_loop()
        loop_thread = threading.Thread(
            target=loop.run_forever, name="fairstream-share-loop", daemon=True
        )
        loop_thread.start()
        self._loop = loop
        self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="fairstream-handler")
        self._outputs.open()
        consumer = ShareConsumer(self._consumer_config)
        try:
            consumer.subscribe([self.egress_topic])
            self.running.set()
            while not self._stopping.is_set():
                batch = [m for m in consumer.poll(POLL_TIMEOUT) if self._usable(m)]
                self._auth.check()
                self.received += len(batch)
                if batch:
                    acks = self._wait(
                        asyncio.run_coroutine_threadsafe(self._handle_all(batch), loop)
                    )
                    for msg, ack in zip(batch, acks, strict=True):
                        consumer.acknowledge(msg, ack.value)
                    consumer.commit_sync(30)
                self._outputs.poll()
        finally:
            try:
                consumer.close()
            finally:
                self._outputs.close()
                loop.call_soon_threadsafe(loop.stop)
                loop_thread.join(10)
                self._pool.shutdown(wait=False, cancel_futures=True)
                self.running.clear()

    def _wait(
        self, handled: concurrent.futures.Future[list[Acknowledgement]]
    ) -> list[Acknowledgement]:
        """The batch's acknowledgements; meanwhile this thread serves the producers' delivery
        reports, which the dead letters of the batch wait for."""
        while True:
            try:
                return handled.result(timeout=0.05)
            except TimeoutError:
                self._outputs.poll()

    def _usable(self, msg: Message) -> bool:
        err = msg.error()
        if err is None:
            return True
        if err.fatal():
            raise ShareGroupError(f"share consumer: {err.str()}")
        if err.code() != KafkaError._PARTITION_EOF:
            log.warning("share consumer: %s", err.str())
        return False

    # -- the handlers' loop ----------------------------------------------------------------

    async def _handle_all(self, batch: list[Message]) -> list[Acknowledgement]:
        gate = asyncio.Semaphore(self.concurrency)
        arrived = self._wall()

        async def one(msg: Message) -> Acknowledgement:
            if self.playout_delay is not None and msg.delivery_count() in (None, 1):
                # Paced: the first delivery starts at its stamp plus the playout delay
                # (``pacing``); a redelivery is late already.
                stamp = request_from_message(msg).start_ms
                wait = start_at(stamp, arrived, self.playout_delay) - self._wall()
                if wait > 0:
                    await asyncio.sleep(wait)
            async with gate:
                return await self._handle(msg)

        return list(await asyncio.gather(*(one(m) for m in batch)))

    async def _handle(self, msg: Message) -> Acknowledgement:
        """Call the handler for one delivery of a record: what to tell the broker."""
        delivery = msg.delivery_count() or 1
        request = replace(request_from_message(msg), attempt=delivery)
        if self._recent is not None and request.request_id in self._recent:
            self.duplicates_skipped += 1
            self.metrics.duplicates.inc()
            return Acknowledgement.ACCEPT
        assert self._loop is not None
        lock_ends = self._loop.time() + self._lock_budget
        limited = 0
        while True:
            call = await self._attempt(request)
            exc = call.error
            if exc is None:
                self.handled += 1
                self.metrics.handled(request.tenant)
                if self._recent is not None:
                    self._recent.add(request.request_id)
                return Acknowledgement.ACCEPT
            if not isinstance(exc, RateLimited):
                log.warning(
                    "handler failed on %s (delivery %d of %d): %r",
                    where(request),
                    delivery,
                    self._deliveries,
                    exc,
                )
                detail = f"last error: {type(exc).__name__}: {exc}"
                return await self._give_back(msg, request, detail, call.latency)
            limited += 1
            delay, expired = self._after_rate_limit(request, exc, limited)
            if expired is not None:
                return await self._dead_letter(msg, request, wire.EXPIRED, expired, call.latency)
            if self._loop.time() + delay < lock_ends and not self._stopping.is_set():
                await asyncio.sleep(delay)  # within the record's lock: wait in place
                continue
            return await self._give_back(msg, request, "rate-limited", call.latency)

    async def _give_back(
        self, msg: Message, request: Request, why: str, latency: float
    ) -> Acknowledgement:
        """Release a record that did not succeed, or dead-letter it on its last delivery."""
        if request.attempt < self._deliveries:
            self.released += 1
            if not self._stopping.is_set():
                # A short pause, so that a failing upstream is not called again at once.
                await asyncio.sleep(
                    min(backoff_delay(request.attempt, self.backoff_initial, self.backoff_max), 1)
                )
            return Acknowledgement.RELEASE
        detail = f"not handled in {request.attempt} deliveries to the share group; {why}"
        return await self._dead_letter(msg, request, wire.HANDLER_FAILED, detail, latency)

    async def _dead_letter(
        self, msg: Message, request: Request, reason: str, detail: str, latency: float
    ) -> Acknowledgement:
        """Write the dead letter and wait for the broker; then reject the record. A dead
        letter not acknowledged releases it instead (a delivery is kept for that)."""
        headers = wire.dead_letter_headers(request.headers, reason, detail[:MAX_DETAIL_CHARS])
        err = await self._outputs.dead_letter(msg.key(), msg.value(), headers)
        if err is not None:
            log.error("dead letter for %s not delivered: %s", where(request), err)
            self.released += 1
            return Acknowledgement.RELEASE
        log.warning("dead-lettered %s as %s: %s", where(request), reason, detail)
        self.dead_lettered += 1
        self.metrics.dead_lettered(request.tenant, reason)
        await self._report(OutcomeReport(request, Reported.DEAD_LETTERED, request.attempt, latency))
        return Acknowledgement.REJECT

    async def _report(self, report: OutcomeReport) -> None:
        self._outputs.report(report)
