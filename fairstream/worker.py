"""``fairstream.Worker``: consume the egress topic and call a handler for every request.

Threads: the thread that calls ``run`` owns the confluent-kafka consumer (poll, commit,
pause, rebalance callbacks) and the dead-letter producer; an event loop in a second thread
runs the handlers (coroutine functions on the loop, plain functions on a thread pool of
``concurrency`` threads). Records cross over through ``call_soon_threadsafe``; outcomes come
back through a queue the consumer thread drains.

Guarantees:

- at-least-once: an offset is committed only once every record before it succeeded, was
  dead-lettered (after the broker acknowledged the dead letter) or was skipped as a
  duplicate. A crash re-delivers at most the uncommitted records.
- order: records of one tenant run one at a time, in offset order (``TenantQueues``); up
  to ``concurrency`` tenants run side by side; otherwise records start in the egress order
  the scheduler chose (with ``concurrency=1``, exactly that order per partition).
- retries: a failing handler is called again after ``backoff_initial``, ``2 x``... up to
  ``backoff_max`` seconds, ``max_attempts`` times in all; then the record goes to the
  dead-letter topic with reason ``handler-failed`` and the last error in
  ``fairstream-dlq-detail``. The tenant's later records wait meanwhile (order).
- rate limits: a handler that raises ``RateLimited`` is called again after its
  ``retry_after`` (or the backoff) without using up an attempt, for as long as the record's
  deadline (``fairstream-deadline-ms``) allows; a retry that would come after the deadline
  dead-letters the record as ``expired`` instead.
- feedback (``feedback_topic``, default ``fairstream.feedback``; None turns it off): one
  record per settled request (ok, dead-lettered) and one per rate-limited or failed call,
  with the cost the handler reported (``Usage``), written without waiting (best effort: a
  full queue or a missing topic loses records, counted in ``feedback_errors``). The
  contract is ``fairstream.wire.feedback``.
- de-duplication (``dedup_window``): a record whose request id is among the last N ids
  handled (or is being handled) is skipped and committed, and counted.
- shutdown (``stop``): no new records start; queued ones are left for the next owner;
  handlers running finish (up to ``drain_timeout``); the done prefix is committed; the
  consumer leaves the group.
- revocation (a rebalance takes partitions away): the rebalance callback returns at once,
  so a slow handler never holds the group past ``max.poll.interval.ms``: queued records of
  those partitions are dropped, the done prefix is committed, and handlers still running
  finish on their own path (or stop retrying) without committing anything. The next owner
  handles them again, so they may run twice; if the partition comes back to this worker,
  a record still running from before runs no second time.
- refused credentials: ``run`` raises ``KafkaAuthenticationError`` with the broker's
  reason as soon as librdkafka reports it, instead of retrying forever.
- metrics: ``metrics`` (a ``WorkerMetrics``) counts handled, retried, rate-limited,
  dead-lettered and in-flight requests, handler latency, and bounded per-tenant series;
  ``metrics_port`` serves them as ``/metrics`` over HTTP while ``run`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka import Producer as _KafkaProducer
from prometheus_client import CollectorRegistry

from fairstream import wire
from fairstream.adapters import clients
from fairstream.adapters.admin import AuthWatch, KafkaAuthenticationError
from fairstream.config import DEFAULT_DLQ, DEFAULT_EGRESS, Connection, KafkaConnection
from fairstream.wire.feedback import (
    DEFAULT_FEEDBACK_TOPIC,
    Feedback,
    FeedbackError,
    Scope,
    encode_feedback,
    feedback_key,
)
from fairstream.wire.feedback import Outcome as Reported
from fairstream.worker_core import (
    PartitionProgress,
    RateLimited,
    RecentIds,
    TenantQueues,
    Usage,
    backoff_delay,
    expires_before,
    rate_limited_delay,
)
from fairstream.worker_metrics import MetricsServer, WorkerMetrics

__all__ = [
    "Handler",
    "KafkaAuthenticationError",
    "RateLimited",
    "Request",
    "Usage",
    "Worker",
    "WorkerMetrics",
    "WorkerStats",
    "request_from_message",
]

log = logging.getLogger("fairstream.worker")

DEFAULT_GROUP = "fairstream-workers"
MAX_DETAIL_CHARS = 2000
# Lost feedback is logged at most this often (with a count), not once per record.
FEEDBACK_WARNING_INTERVAL = 60.0
# How often a worker looks again for a feedback topic that did not exist.
FEEDBACK_TOPIC_CHECK_INTERVAL = 30.0

RawHeaders = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Request:
    """One egress record, as the handler sees it."""

    tenant: str
    payload: bytes
    request_id: str
    cost: int
    headers: tuple[tuple[str, bytes | None], ...]
    enqueued_ms: int | None  # when the scheduler ingested it
    scheduled_ms: int | None  # when the scheduler released it
    deadline_ms: int | None
    topic: str
    partition: int
    offset: int
    attempt: int = 1  # 1 on the first call, 2 on the first retry...

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name``, or None."""
        for key, value in reversed(self.headers):
            if key == name:
                return value
        return None


# Returns None (or a ``Usage``), or an awaitable of it for async handlers.
Handler = Callable[[Request], Any]


def _int_header(name: str, raw: bytes | None, limit: int = wire.MAX_EPOCH_MS) -> int | None:
    """The header's value under the contract's rule, None when missing or outside it."""
    value = wire.header_int(name, raw, limit)
    return value if isinstance(value, int) else None


def request_from_message(msg: Message) -> Request:
    """Build the handler's view of an egress record (missing headers get defaults)."""
    topic, partition, offset = _coordinates(msg)
    # A consumer's header values are bytes (or None); the stubs allow str too.
    raw = msg.headers() or []
    items = raw.items() if isinstance(raw, dict) else raw
    headers: RawHeaders = [(k, _bytes(v)) for k, v in items]
    last: dict[str, bytes | None] = dict(headers)  # later duplicates win
    key = msg.key()
    raw_id = last.get(wire.REQUEST_ID)
    request_id = (
        raw_id.decode("ascii", "replace")
        if raw_id
        else wire.default_request_id(topic, partition, offset)
    )
    cost = _int_header(wire.COST, last.get(wire.COST), wire.MAX_COST)
    return Request(
        tenant=key.decode("utf-8", "replace") if key is not None else "",
        payload=msg.value() or b"",
        request_id=request_id,
        cost=cost or 1,
        headers=tuple(headers),
        enqueued_ms=_int_header(wire.ENQUEUED_MS, last.get(wire.ENQUEUED_MS)),
        scheduled_ms=_int_header(wire.SCHEDULED_MS, last.get(wire.SCHEDULED_MS)),
        deadline_ms=_int_header(wire.DEADLINE_MS, last.get(wire.DEADLINE_MS)),
        topic=topic,
        partition=partition,
        offset=offset,
    )


class Outcome(enum.Enum):
    DONE = "done"  # the handler succeeded
    DEAD_LETTERED = "dead-lettered"  # the dead-letter topic acknowledged it
    DUPLICATE = "duplicate"  # skipped: its request id was seen recently
    # Skipped: the same record, fetched again after its partition came back, was finished
    # by the run that began before the partition was revoked.
    REPEATED = "repeated"
    ABANDONED = "abandoned"  # not finished (revoked, stopping): must not be committed past


# Outcomes after which a record may be committed past and its request id counts as seen.
FINISHED = (Outcome.DONE, Outcome.DEAD_LETTERED)


@dataclass(eq=False, slots=True)
class _Job:
    request: Request
    key: bytes | None
    value: bytes | None
    progress: PartitionProgress
    # The run of the same record still going on from an earlier assignment of its
    # partition, if any: this one runs after it (same tenant), and only if it did not finish.
    predecessor: _Job | None = None
    outcome: Outcome | None = None  # set by the event loop when the run ends
    reason: str = wire.HANDLER_FAILED  # the dead-letter reason, when dead-lettered


@dataclass
class WorkerStats:
    """Counters since the worker started (read them from any thread)."""

    processed: int = 0  # handler succeeded
    failed_attempts: int = 0  # handler raised (each attempt counts), RateLimited aside
    rate_limited: int = 0  # handler raised RateLimited (each call counts)
    dead_lettered: int = 0
    duplicates_skipped: int = 0
    abandoned: int = 0  # left unfinished for the next owner (rebalance, shutdown)
    commits: int = 0


class Worker:
    """Consume the egress topic and call ``handler(request)`` for each record.

    ``run()`` blocks until ``stop()`` (from another thread or a signal handler).
    ``bootstrap``: a ``KafkaConnection`` (servers and authentication) or a bare bootstrap
    string (PLAINTEXT).
    ``consumer_config`` / ``producer_config`` are extra librdkafka settings for the egress
    consumer and for the producers (dead letters, feedback).
    ``feedback_topic``: where outcomes are reported for the scheduler (the contract is
    ``fairstream.wire.feedback``); None reports nothing.
    ``metrics_port``: serve ``/metrics`` (Prometheus text format) on this port of
    ``metrics_host`` while ``run`` runs; 0 picks a free port (``metrics_url`` tells which);
    None (the default) serves nothing. ``metrics_registry``: where the metrics are
    registered, e.g. ``prometheus_client.REGISTRY`` to add them to an application's own
    endpoint; default a registry of their own, ``worker.metrics.registry``.
    ``drain_timeout``: how long ``stop`` waits for running handlers.
    """

    def __init__(  # noqa: PLR0915 (one statement per setting)
        self,
        handler: Handler,
        *,
        bootstrap: Connection,
        egress_topic: str = DEFAULT_EGRESS,
        dlq_topic: str = DEFAULT_DLQ,
        group_id: str = DEFAULT_GROUP,
        max_attempts: int = 5,
        backoff_initial: float = 0.1,
        backoff_max: float = 10.0,
        dedup_window: int | None = 10_000,
        concurrency: int = 1,
        max_pending: int = 1000,
        commit_interval: float = 1.0,
        session_timeout: float = 10.0,
        drain_timeout: float = 30.0,
        consumer_config: dict[str, Any] | None = None,
        producer_config: dict[str, Any] | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "0.0.0.0",
        metrics_registry: CollectorRegistry | None = None,
        feedback_topic: str | None = DEFAULT_FEEDBACK_TOPIC,
    ) -> None:
        if not callable(handler):
            raise TypeError("handler must be callable")
        if feedback_topic is not None and (
            not isinstance(feedback_topic, str) or not feedback_topic
        ):
            raise ValueError(f"feedback_topic must be a topic name or None, got {feedback_topic!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if backoff_initial < 0 or backoff_max < backoff_initial:
            raise ValueError("need 0 <= backoff_initial <= backoff_max")
        if dedup_window is not None and dedup_window < 1:
            raise ValueError("dedup_window must be at least 1, or None to turn it off")
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        if metrics_port is not None and not 0 <= metrics_port <= 65535:
            raise ValueError(f"metrics_port must be 0 to 65535, got {metrics_port}")
        self.handler = handler
        self.kafka = KafkaConnection.of(bootstrap)
        self.bootstrap = self.kafka.bootstrap
        self.egress_topic = egress_topic
        self.dlq_topic = dlq_topic
        self.group_id = group_id
        self.max_attempts = max_attempts
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.concurrency = concurrency
        self.max_pending = max_pending
        self.commit_interval = commit_interval
        self.drain_timeout = drain_timeout
        self.stats = WorkerStats()
        self.metrics = WorkerMetrics(metrics_registry)
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self._metrics_server: MetricsServer | None = None
        # Both clients report a refused login here; the consumer thread checks it.
        self._auth = AuthWatch(self.kafka)
        self._consumer_config = self._watching(
            {
                **self.kafka.librdkafka(),
                "group.id": group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": int(session_timeout * 1000),
                **(consumer_config or {}),
            }
        )
        self._producer_config = self._watching(
            clients.producer_config(self.kafka.librdkafka(), linger_ms=1, overrides=producer_config)
        )
        self._feedback = (
            None
            if feedback_topic is None
            else _FeedbackWriter(
                feedback_topic,
                self._watching(_feedback_settings(self.kafka, producer_config)),
                self.metrics,
            )
        )
        # A coroutine function, or an object whose __call__ is one.
        self._is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            type(handler).__call__
        )
        # Consumer-thread state.
        self._recent = RecentIds(dedup_window) if dedup_window is not None else None
        self._in_flight_ids: Counter[str] = Counter()
        self._progress: dict[tuple[str, int], PartitionProgress] = {}
        # Records handed to the loop whose outcome is not back, by (topic, partition, offset).
        self._jobs: dict[tuple[str, int, int], _Job] = {}
        self._outstanding = 0  # handed to the loop, outcome not back yet
        self._paused = False
        self._completions: queue.SimpleQueue[tuple[_Job, Outcome]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._running = threading.Event()
        # Event-loop state (created in run).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queues: TenantQueues[_Job] = TenantQueues()
        self._wakeup: asyncio.Event | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._dlq: _KafkaProducer | None = None

    # ----------------------------------------------------------------- public

    def stop(self) -> None:
        """Ask ``run`` to finish: safe from any thread and from signal handlers."""
        self._stopping.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._interrupt)

    @property
    def assignment(self) -> list[tuple[str, int]]:
        """The (topic, partition) pairs this worker owns now."""
        return list(self._progress)

    @property
    def running(self) -> bool:
        """True once ``run`` has subscribed, until it returns."""
        return self._running.is_set()

    @property
    def feedback_topic(self) -> str | None:
        """Where outcomes are reported, or None when feedback is off."""
        return None if self._feedback is None else self._feedback.topic

    @property
    def metrics_url(self) -> str | None:
        """Where ``/metrics`` is served while ``run`` runs (with ``metrics_port``), else None."""
        server = self._metrics_server
        return server.url if server is not None else None

    def _watching(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` with an ``error_cb`` that feeds the AuthWatch, then the caller's own."""
        own = config.get("error_cb")

        def on_error(err: KafkaError) -> None:
            self._auth(err)
            if own is not None:
                own(err)

        return {**config, "error_cb": on_error}

    def run(self) -> None:
        """Consume until ``stop()``; then finish running handlers, commit and close.

        Caller: the application (or ``fairstream worker``), on one thread.
        Affects: the group's committed offsets of the egress topic; the dead-letter topic.
        """
        if self.metrics_port is not None:
            self._metrics_server = MetricsServer(
                self.metrics.registry, self.metrics_host, self.metrics_port
            )
            log.info("metrics on %s", self._metrics_server.url)
        loop = asyncio.new_event_loop()
        loop_thread = threading.Thread(
            target=loop.run_forever, name="fairstream-worker-loop", daemon=True
        )
        self._loop = loop
        self._wakeup = asyncio.Event()
        self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="fairstream-handler")
        self._dlq = _KafkaProducer(self._producer_config)
        if self._feedback is not None:
            self._feedback.open()
        consumer = Consumer(self._consumer_config)
        loop_thread.start()
        try:
            consumer.subscribe(
                [self.egress_topic],
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
            self._running.set()
            if self._stopping.is_set():  # stop() came before the loop existed
                self.stop()
            self._consume(consumer)
        finally:
            try:
                self._release(consumer, list(self._progress), commit=True, drain=True)
                consumer.close()
            finally:
                # A dead letter cannot be delivered with refused credentials: do not wait.
                refused = self._auth.failure is not None
                self._dlq.flush(0 if refused else 30)
                if self._feedback is not None:
                    self._feedback.close(0 if refused else 5)
                loop.call_soon_threadsafe(loop.stop)
                loop_thread.join(10)
                self._pool.shutdown(wait=False, cancel_futures=True)
                if self._metrics_server is not None:
                    self._metrics_server.close()
                    self._metrics_server = None
                self._running.clear()
                log.info(
                    "worker stopped: %d processed, %d dead-lettered, %d duplicates skipped",
                    self.stats.processed,
                    self.stats.dead_lettered,
                    self.stats.duplicates_skipped,
                )

    # --------------------------------------------------------- consumer thread

    def _consume(self, consumer: Consumer) -> None:
        next_commit = time.monotonic() + self.commit_interval
        while not self._stopping.is_set():
            self._serve()
            self._apply_backpressure(consumer)
            for msg in consumer.consume(num_messages=500, timeout=0.1):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    if err.fatal():
                        raise KafkaException(err)
                    log.warning("consumer error: %s", err)
                    continue
                self._dispatch(msg)
            self._auth.check()  # librdkafka retries a refused login forever: fail now
            if time.monotonic() >= next_commit:
                self._serve()
                self._commit(consumer, list(self._progress), asynchronous=True)
                next_commit = time.monotonic() + self.commit_interval

    def _dispatch(self, msg: Message) -> None:
        """Hand one record to the loop, or resolve it at once as a duplicate."""
        topic, partition, offset = _coordinates(msg)
        progress = self._progress.get((topic, partition))
        if progress is None:
            log.debug("record from unassigned partition %s[%d] ignored", topic, partition)
            return
        if not progress.add(offset):
            return  # fetched again after a pause/resume: already handed out
        request = request_from_message(msg)
        job = _Job(request, msg.key(), msg.value(), progress)
        rid = request.request_id
        self._outstanding += 1
        self.metrics.fetched(request.tenant)
        earlier = self._jobs.get((topic, partition, offset))
        if earlier is not None:
            # The same record, still running from before its partition was revoked: not a
            # duplicate yet (that run may fail); the loop decides once it ended.
            job.predecessor = earlier
        elif self._recent is not None and (rid in self._recent or rid in self._in_flight_ids):
            self._resolve(job, Outcome.DUPLICATE)
            return
        self._jobs[(topic, partition, offset)] = job
        self._in_flight_ids[rid] += 1
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._enqueue, job)

    def _serve(self, timeout: float = 0.0) -> None:
        """Serve dead-letter delivery reports and apply the outcomes the loop sent back;
        wait up to ``timeout`` s for the first one."""
        assert self._dlq is not None
        self._dlq.poll(0)
        if self._feedback is not None:
            self._feedback.poll()
        block = timeout > 0
        while True:
            try:
                if block:
                    job, outcome = self._completions.get(timeout=timeout)
                else:
                    job, outcome = self._completions.get_nowait()
            except queue.Empty:
                return
            block = False
            self._resolve(job, outcome)

    def _resolve(self, job: _Job, outcome: Outcome) -> None:
        """Apply the outcome of one fetched record: counters, dedup memory, commit position.

        Caller: the consumer thread. Affects: stats, metrics, _jobs, the job's progress.
        """
        self._outstanding -= 1
        request = job.request
        rid = request.request_id
        self.metrics.finished(request.tenant)
        if outcome is not Outcome.DUPLICATE:
            coordinates = (request.topic, request.partition, request.offset)
            if self._jobs.get(coordinates) is job:
                del self._jobs[coordinates]
            self._in_flight_ids[rid] -= 1
            if self._in_flight_ids[rid] <= 0:
                del self._in_flight_ids[rid]
        stats = self.stats
        if outcome is Outcome.ABANDONED:
            stats.abandoned += 1
            self.metrics.abandoned.inc()
            job.progress.resolve(request.offset, done=False)
            return
        if outcome is Outcome.DONE:
            stats.processed += 1
            self.metrics.handled(request.tenant)
        elif outcome is Outcome.DEAD_LETTERED:
            stats.dead_lettered += 1
            self.metrics.dead_lettered(request.tenant, job.reason)
        else:
            stats.duplicates_skipped += 1
            self.metrics.duplicates.inc()
            if outcome is Outcome.REPEATED:
                log.info("skipped %s: finished before its partition came back", _where(request))
            else:
                log.info("skipped duplicate request id %s (%s)", rid, _where(request))
        if self._recent is not None:
            self._recent.add(rid)
        job.progress.resolve(job.request.offset, done=True)

    def _apply_backpressure(self, consumer: Consumer) -> None:
        if self._outstanding >= self.max_pending:
            # Re-applied every round while over the limit: partitions assigned meanwhile
            # start unpaused.
            consumer.pause(consumer.assignment())
            self._paused = True
        elif self._paused and self._outstanding <= self.max_pending // 2:
            consumer.resume(consumer.assignment())
            self._paused = False

    def _commit(
        self, consumer: Consumer, tps: Iterable[tuple[str, int]], *, asynchronous: bool
    ) -> None:
        offsets: list[TopicPartition] = []
        for tp in tps:
            progress = self._progress.get(tp)
            if progress is None:
                continue
            position = progress.commit_position()
            if position is not None and position != progress.committed:
                offsets.append(TopicPartition(tp[0], tp[1], position))
                progress.committed = position
        if not offsets:
            return
        try:
            # The stubs overload on literal True/False; librdkafka takes any bool.
            consumer.commit(offsets=offsets, asynchronous=asynchronous)  # type: ignore[call-overload]
            self.stats.commits += 1
        except KafkaException as exc:
            log.warning("commit of %s failed: %s", offsets, exc)
            for tp_offset in offsets:  # try again next round
                progress = self._progress.get((tp_offset.topic, tp_offset.partition))
                if progress is not None:
                    progress.committed = None

    def _release(
        self, consumer: Consumer, tps: list[tuple[str, int]], *, commit: bool, drain: bool
    ) -> None:
        """Give up partitions: drop their queued records, with ``drain`` wait for their
        running handlers (up to ``drain_timeout``), commit their done prefix, forget them.

        Without ``drain`` (the rebalance callbacks) nothing waits: handlers still running
        end on the event loop, their outcomes are applied by ``_serve`` later and commit
        nothing (the partition is no longer in ``_progress``).
        Caller: the rebalance callbacks (no drain) and shutdown (drain), on the consumer
        thread. Affects: _progress, the committed offsets.
        """
        releasing = {tp: self._progress[tp] for tp in tps if tp in self._progress}
        if not releasing:
            return
        dropping = set(releasing.values())
        for progress in releasing.values():
            progress.live = False
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._purge, dropping)
        deadline = time.monotonic() + self.drain_timeout
        while drain and any(p.unresolved for p in releasing.values()):
            if time.monotonic() >= deadline:
                log.warning(
                    "handlers still running after %.0f s; leaving their records to the "
                    "next owner of %s",
                    self.drain_timeout,
                    sorted(releasing),
                )
                break
            self._serve(timeout=0.05)
        self._serve()  # what finished meanwhile still counts towards the commit
        if commit:  # a failure (e.g. the group moved on already) is logged by _commit
            self._commit(consumer, releasing, asynchronous=False)
        for tp in releasing:
            del self._progress[tp]
        self.metrics.assigned.set(len(self._progress))

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for p in partitions:
            self._progress[(p.topic, p.partition)] = PartitionProgress()
        self.metrics.assigned.set(len(self._progress))
        log.info("assigned %s", [(p.topic, p.partition) for p in partitions])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Returns at once: a callback that waited for slow handlers would hold the whole
        # group's rebalance, and past max.poll.interval.ms get this member evicted.
        log.info("revoked %s", [(p.topic, p.partition) for p in partitions])
        tps = [(p.topic, p.partition) for p in partitions]
        self._release(consumer, tps, commit=True, drain=False)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("lost %s", [(p.topic, p.partition) for p in partitions])
        tps = [(p.topic, p.partition) for p in partitions]
        self._release(consumer, tps, commit=False, drain=False)

    # -------------------------------------------------------------- event loop

    def _enqueue(self, job: _Job) -> None:
        if not self._carry_on(job):  # revoked or stopping since it was dispatched
            self._completions.put((job, Outcome.ABANDONED))
            return
        self._queues.push(job.request.tenant, job)
        self._pump()

    def _pump(self) -> None:
        """Start queued records while fewer than ``concurrency`` run."""
        assert self._loop is not None
        while self._queues.out < self.concurrency and not self._stopping.is_set():
            taken = self._queues.take()
            if taken is None:
                return
            self._loop.create_task(self._run_job(taken[1]))

    def _purge(self, progresses: set[PartitionProgress]) -> None:
        for job in self._queues.purge(lambda job: job.progress in progresses):
            self._completions.put((job, Outcome.ABANDONED))
        self._interrupt()

    def _interrupt(self) -> None:
        """Wake the records sleeping between attempts, to check whether to carry on."""
        if self._stopping.is_set():
            for job in self._queues.purge(lambda job: True):
                self._completions.put((job, Outcome.ABANDONED))
        assert self._wakeup is not None
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    async def _run_job(self, job: _Job) -> None:
        outcome = Outcome.ABANDONED  # unless _process returns
        try:
            outcome = await self._process(job)
        finally:
            # Set before the tenant's turn passes on: a later run of the same record (queued
            # behind this one, same tenant) reads it.
            job.outcome = outcome
            self._queues.done(job.request.tenant)
            self._completions.put((job, outcome))
        self._pump()

    def _carry_on(self, job: _Job) -> bool:
        return job.progress.live and not self._stopping.is_set()

    async def _pause(self, delay: float, job: _Job) -> bool:
        """Sleep ``delay`` s; False (at once) if the record is to be abandoned meanwhile."""
        assert self._loop is not None
        deadline = self._loop.time() + delay
        while self._carry_on(job):
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                return True
            assert self._wakeup is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), remaining)
        return False

    async def _call(self, request: Request) -> Any:
        """Call the handler once; return what it returned (a ``Usage``, or anything)."""
        metrics = self.metrics
        started = time.perf_counter()
        metrics.running.inc()
        try:
            if self._is_async:
                return await self.handler(request)
            assert self._loop is not None
            result = await self._loop.run_in_executor(self._pool, self.handler, request)
            if inspect.isawaitable(result):
                result = await result
            return result
        finally:
            metrics.running.dec()
            metrics.handler_seconds.observe(time.perf_counter() - started)

    async def _process(self, job: _Job) -> Outcome:
        earlier = job.predecessor
        if earlier is not None:
            job.predecessor = None  # no chain of finished jobs kept alive
            if earlier.outcome in FINISHED:
                return Outcome.REPEATED
        if not self._carry_on(job):
            return Outcome.ABANDONED
        request = job.request
        error: Exception | None = None
        attempt = 1
        limited = 0  # rate-limited calls in a row
        while True:
            started = time.perf_counter()
            try:
                result = await self._call(replace(request, attempt=attempt))
            except RateLimited as exc:
                latency = time.perf_counter() - started
                limited += 1
                self.stats.rate_limited += 1
                self.metrics.rate_limited.inc()
                self._report(
                    request,
                    Reported.RATE_LIMITED,
                    attempt,
                    latency,
                    scope=Scope(exc.scope),
                    retry_after=exc.retry_after,
                )
                delay = rate_limited_delay(
                    exc.retry_after, limited, self.backoff_initial, self.backoff_max
                )
                if expires_before(request.deadline_ms, time.time() * 1000, delay):
                    if not self._carry_on(job):
                        return Outcome.ABANDONED
                    detail = (
                        f"rate-limited ({exc.scope}) {limited} time(s) in a row; the next try, "
                        f"in {delay:g} s, would come after the deadline "
                        f"({wire.DEADLINE_MS} {request.deadline_ms})"
                    )
                    return await self._dead_letter(job, wire.EXPIRED, detail, attempt, latency)
                log.debug("%s rate-limited (%s); retry in %g s", _where(request), exc.scope, delay)
                if not await self._pause(delay, job):
                    return Outcome.ABANDONED
                continue
            except Exception as exc:
                latency = time.perf_counter() - started
                limited = 0
                error = exc
                self.stats.failed_attempts += 1
                self._report(request, Reported.FAILED, attempt, latency)
                log.warning(
                    "handler failed on %s (attempt %d of %d): %r",
                    _where(request),
                    attempt,
                    self.max_attempts,
                    exc,
                )
                if attempt >= self.max_attempts:
                    break
                self.metrics.retries.inc()
                delay = backoff_delay(attempt, self.backoff_initial, self.backoff_max)
                if not await self._pause(delay, job):
                    return Outcome.ABANDONED
                attempt += 1
                continue
            latency = time.perf_counter() - started
            cost = result.cost if isinstance(result, Usage) else None
            self._report(request, Reported.OK, attempt, latency, cost=cost)
            return Outcome.DONE
        if not self._carry_on(job):
            return Outcome.ABANDONED  # revoked meanwhile: the next owner tries it again
        detail = (
            f"handler failed {self.max_attempts} time(s); last error: "
            f"{type(error).__name__}: {error}"
        )
        return await self._dead_letter(job, wire.HANDLER_FAILED, detail, attempt, latency)

    async def _dead_letter(
        self, job: _Job, reason: str, detail: str, attempt: int, latency: float
    ) -> Outcome:
        """Write the record to the dead-letter topic and wait for the broker's ack."""
        detail = detail[:MAX_DETAIL_CHARS]
        headers = wire.dead_letter_headers(job.request.headers, reason, detail)
        tries = 0
        while True:
            tries += 1
            err = await self._produce_dead_letter(job, headers)
            if err is None:
                log.warning("dead-lettered %s as %s: %s", _where(job.request), reason, detail)
                job.reason = reason
                self._report(job.request, Reported.DEAD_LETTERED, attempt, latency)
                return Outcome.DEAD_LETTERED
            log.error("dead letter for %s not delivered: %s", _where(job.request), err)
            delay = backoff_delay(tries, max(self.backoff_initial, 0.1), self.backoff_max)
            if not await self._pause(delay, job):
                return Outcome.ABANDONED

    def _report(
        self,
        request: Request,
        outcome: Reported,
        attempt: int,
        latency: float,
        *,
        cost: int | None = None,
        scope: Scope | None = None,
        retry_after: float | None = None,
    ) -> None:
        if self._feedback is not None:
            self._feedback.report(
                request, outcome, attempt, latency, cost=cost, scope=scope, retry_after=retry_after
            )

    def _produce_dead_letter(self, job: _Job, headers: RawHeaders) -> Awaitable[Any]:
        assert self._loop is not None
        assert self._dlq is not None
        loop = self._loop
        future: asyncio.Future[Any] = loop.create_future()

        def settle(err: KafkaError | Exception | None) -> None:
            if not future.done():
                future.set_result(err)

        def delivered(err: KafkaError | None, msg: Message) -> None:
            # Runs on the consumer thread, which polls the producer.
            loop.call_soon_threadsafe(settle, err)

        try:
            self._dlq.produce(
                self.dlq_topic, job.value, job.key, headers=list(headers), on_delivery=delivered
            )
        except (BufferError, KafkaException) as exc:
            settle(exc)
        return future


def _feedback_settings(
    kafka: KafkaConnection, producer_config: dict[str, Any] | None
) -> dict[str, Any]:
    # Feedback is advisory: leader acks, a little batching, no long retries.
    return clients.producer_config(
        kafka.librdkafka(),
        acks=1,
        overrides={
            "message.timeout.ms": 30_000,
            "queue.buffering.max.messages": 100_000,
            **(producer_config or {}),
        },
    )


class _FeedbackWriter:
    """The worker's end of the feedback topic: records handed to librdkafka, never awaited.

    Best effort by design: a full queue or a delivery failure loses the record, counts it
    in ``feedback_errors`` and logs at most once a minute, so feedback never slows down or
    stops the handling of requests. A topic that does not exist is said once and looked
    for again every 30 s; meanwhile records are not produced (librdkafka would hold each
    for ``message.timeout.ms``) but counted as lost.
    Caller: the worker (``report`` from the event loop, as librdkafka's produce is
    thread-safe; ``open``, ``poll`` and ``close`` from the consumer thread, which serves
    the delivery reports). Affects: the feedback topic, ``metrics``.
    """

    def __init__(self, topic: str, config: dict[str, Any], metrics: WorkerMetrics) -> None:
        self.topic = topic
        self._config = config
        self._metrics = metrics
        self._producer: _KafkaProducer | None = None
        # Failures come from both threads (produce on the loop, delivery reports on the
        # consumer thread).
        self._lock = threading.Lock()
        self._lost = 0  # since the last warning
        self._warned = -FEEDBACK_WARNING_INTERVAL  # monotonic time of that warning
        self._exists = True  # False while the topic is known not to exist
        self._next_check = 0.0

    def open(self) -> None:
        self._producer = _KafkaProducer(self._config)
        self._check_topic(timeout=5.0)

    def poll(self) -> None:
        if self._producer is None:
            return
        self._producer.poll(0)
        if not self._exists and time.monotonic() >= self._next_check:
            self._check_topic(timeout=0.5)

    def _check_topic(self, timeout: float) -> None:
        assert self._producer is not None
        self._next_check = time.monotonic() + FEEDBACK_TOPIC_CHECK_INTERVAL
        try:
            metadata = self._producer.list_topics(self.topic, timeout=timeout)
        except KafkaException:
            return  # no answer: keep producing, delivery reports will tell
        info = metadata.topics.get(self.topic)
        error = None if info is None else info.error
        exists = info is not None and (
            error is None
            or error.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
        )
        if not exists and self._exists:
            log.warning(
                "feedback topic %s does not exist: no feedback until it does "
                "(fairstream topics create --feedback-topic %s, or --no-feedback)",
                self.topic,
                self.topic,
            )
        elif exists and not self._exists:
            log.info("feedback topic %s exists now: reporting outcomes", self.topic)
        self._exists = exists

    def close(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for what is queued; count what is left as lost."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        left = producer.flush(timeout)
        if left:
            self._metrics.feedback_errors.inc(left)
        self._lost_some(left, "not delivered by shutdown", force=True)

    def report(
        self,
        request: Request,
        outcome: Reported,
        attempt: int,
        latency: float,
        *,
        cost: int | None = None,
        scope: Scope | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Queue one feedback record about ``request``."""
        producer = self._producer
        if producer is None:
            return
        if not self._exists:
            self._metrics.feedback_errors.inc()  # said once when the topic was found missing
            return
        try:
            record = Feedback(
                request_id=request.request_id,
                tenant=request.tenant,
                outcome=outcome,
                declared_cost=request.cost,
                reported_at_ms=wire.now_ms(),
                attempt=attempt,
                cost=cost,
                latency=latency,
                scheduled_at_ms=request.scheduled_ms,
                scope=scope,
                retry_after=retry_after,
            )
            producer.produce(
                self.topic,
                encode_feedback(record),
                feedback_key(record),
                on_delivery=self._delivered,
            )
        except FeedbackError as exc:
            # An egress record outside the contract (no key, a request id over 1 KB).
            log.debug("no feedback for %s: %s", _where(request), exc)
            self._failed("outside the feedback contract")
        except (BufferError, KafkaException) as exc:
            self._failed(f"not queued: {exc}")  # a full queue is not worth blocking for
        else:
            self._metrics.feedback_records.inc()

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._failed(err.str())

    def _failed(self, reason: str) -> None:
        self._metrics.feedback_errors.inc()
        self._lost_some(1, reason)

    def _lost_some(self, count: int, reason: str, *, force: bool = False) -> None:
        with self._lock:
            self._lost += count
            now = time.monotonic()
            if not self._lost or not (force or now - self._warned >= FEEDBACK_WARNING_INTERVAL):
                return
            lost, self._lost, self._warned = self._lost, 0, now
        log.warning(
            "%d feedback record(s) for topic %s lost (%s); does the topic exist? "
            "(fairstream topics create --feedback-topic %s)",
            lost,
            self.topic,
            reason,
            self.topic,
        )


def _coordinates(msg: Message) -> tuple[str, int, int]:
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    assert topic is not None
    assert partition is not None
    assert offset is not None
    return topic, partition, offset


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode("utf-8") if isinstance(value, str) else value


def _where(request: Request) -> str:
    return (
        f"request {request.request_id} of tenant {request.tenant!r} "
        f"at {request.topic}[{request.partition}]@{request.offset}"
    )
