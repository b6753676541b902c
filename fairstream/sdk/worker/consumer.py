"""``fairstream.Worker``: the consumer-thread side and the public face of the worker.

``Worker`` owns the confluent-kafka consumer (poll, dispatch, commit, pause, rebalance
callbacks) and serves the producers' delivery reports (``Outputs``: dead letters,
feedback); the handler-running half it inherits from ``Handling`` (``handling.py``) runs on
an event loop of its own. The guarantees are in the package's docstring
(``fairstream.sdk.worker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry

from fairstream.adapters import clients
from fairstream.adapters.admin import AuthWatch
from fairstream.config import Connection, KafkaConnection
from fairstream.sdk.auth import watched
from fairstream.sdk.worker.calling import is_async_handler
from fairstream.sdk.worker.feedback import FeedbackWriter, feedback_settings
from fairstream.sdk.worker.handler import Handler, coordinates, request_from_message, where
from fairstream.sdk.worker.handling import Handling
from fairstream.sdk.worker.jobs import Job, JobOutcome, WorkerStats
from fairstream.sdk.worker.metrics import MetricsServer, WorkerMetrics
from fairstream.sdk.worker.outputs import Outputs
from fairstream.sdk.worker.pacing import Playout
from fairstream.sdk.worker.serving import Hook, Serving
from fairstream.sdk.worker.settings import DEFAULT_GROUP, WorkerSettings
from fairstream.sdk.worker.tracking import (
    CommitPosition,
    Ordering,
    RecentIds,
    TenantQueues,
    per_tenant,
)

__all__ = ["DEFAULT_GROUP", "Worker"]

log = logging.getLogger("fairstream.worker")

# The declared defaults (``WorkerSettings``), which the keyword arguments of ``Worker`` take.
_DECLARED = WorkerSettings()


class Worker(Serving, Handling):
    """Consume the egress topic and call ``handler(request)`` for each record.

    The keyword arguments that ``fairstream worker`` also takes as options are declared,
    with their defaults, limits and help, once in ``WorkerSettings`` (``settings.py``); a
    value outside its limits raises ``SettingsError`` (a ``ValueError``) naming the option.
    ``dedup_window``: request ids remembered to skip duplicates; None or 0 turns it off.

    ``run()`` blocks until ``stop()`` (from another thread or a signal handler), with
    handlers on an event loop of its own; ``await serve()`` (or ``async with worker:``)
    does the same on the caller's event loop. ``on_startup`` / ``on_shutdown``: coroutine
    functions awaited on the handlers' loop before the first record and after the last
    (an HTTP client shared by every call, say); a failing ``on_startup`` ends ``run``.
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
    ``concurrency``: records in progress at once (a handler call running, or waiting to be
    retried). ``ordering``: ``"start"`` (the default) starts a tenant's records in egress
    order, as many at once as ``concurrency`` allows, and they finish in any order (what an
    API with latency needs: a backlogged tenant gets ``concurrency / latency`` calls/s);
    ``"completion"`` runs a tenant's records one at a time, each after the previous one
    finished (a tenant gets ``1 / latency`` calls/s). Either way an offset is committed
    only once every record before it is done.
    ``playout_delay``: each call starts that many seconds after the record's scheduled
    moment (its ``fairstream-scheduled-ms`` stamp), not when its transaction's batch lands,
    so the API sees the scheduler's pace (``fairstream.sdk.worker.pacing``); 0 or None starts
    each call as its record arrives. ``wall_clock``: the epoch-seconds clock pacing reads
    (``time.time``; tests pass their own).
    """

    def __init__(
        self,
        handler: Handler,
        *,
        bootstrap: Connection,
        egress_topic: str = _DECLARED.egress_topic,
        dlq_topic: str = _DECLARED.dlq_topic,
        group_id: str = _DECLARED.group_id,
        max_attempts: int = _DECLARED.max_attempts,
        backoff_initial: float = _DECLARED.backoff_initial,
        backoff_max: float = _DECLARED.backoff_max,
        dedup_window: int | None = _DECLARED.dedup_window,
        concurrency: int = _DECLARED.concurrency,
        ordering: Ordering = _DECLARED.ordering,
        playout_delay: float | None = _DECLARED.playout_delay,
        max_pending: int = _DECLARED.max_pending,
        commit_interval: float = 1.0,
        session_timeout: float = _DECLARED.session_timeout,
        drain_timeout: float = 30.0,
        consumer_config: dict[str, Any] | None = None,
        producer_config: dict[str, Any] | None = None,
        metrics_port: int | None = _DECLARED.metrics_port,
        metrics_host: str = _DECLARED.metrics_host,
        metrics_registry: CollectorRegistry | None = None,
        feedback_topic: str | None = _DECLARED.feedback_topic,
        on_startup: Hook | None = None,
        on_shutdown: Hook | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not callable(handler):
            raise TypeError("handler must be callable")
        arguments = locals()
        # The declared checks (a SettingsError, a ValueError, names the setting's flag), on
        # the keyword arguments named after WorkerSettings' fields.
        self.settings = settings = WorkerSettings(
            **{field.name: arguments[field.name] for field in dataclasses.fields(WorkerSettings)}
        )
        self.handler = handler
        self._is_async = is_async_handler(handler)
        self.on_startup, self.on_shutdown = on_startup, on_shutdown
        self.egress_topic = settings.egress_topic
        self.dlq_topic = settings.dlq_topic
        self.group_id = settings.group_id
        self.max_attempts = settings.max_attempts
        self.backoff_initial = settings.backoff_initial
        self.backoff_max = settings.backoff_max
        self.concurrency = settings.concurrency
        self.ordering = settings.ordering
        self.playout_delay = settings.pacing
        self.max_pending = settings.max_pending
        self.commit_interval = commit_interval
        self.drain_timeout = drain_timeout
        self._wall = wall_clock
        self.stats = WorkerStats()
        self.metrics = WorkerMetrics(metrics_registry)
        self.metrics_port = settings.metrics_port
        self.metrics_host = settings.metrics_host
        self._metrics_server: MetricsServer | None = None
        self._configure_clients(bootstrap, consumer_config, producer_config)
        self._init_state()

    def _configure_clients(
        self,
        bootstrap: Connection,
        consumer_config: dict[str, Any] | None,
        producer_config: dict[str, Any] | None,
    ) -> None:
        """The settings of the egress consumer and the producers (``Outputs``: dead letters,
        feedback), every one with an ``error_cb`` that feeds the credentials' watch."""
        self.kafka = KafkaConnection.of(bootstrap)
        self.bootstrap = self.kafka.bootstrap
        # The clients report a refused login here; the consumer thread checks it.
        self._auth = AuthWatch(self.kafka)
        base = self.kafka.librdkafka()
        self._consumer_config = watched(
            self._auth,
            {
                **base,
                "group.id": self.settings.group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": int(self.settings.session_timeout * 1000),
                **(consumer_config or {}),
            },
        )
        topic = self.settings.feedback_topic
        feedback = (
            None
            if topic is None
            else FeedbackWriter(
                topic,
                watched(self._auth, feedback_settings(self.kafka, producer_config)),
                self.metrics,
            )
        )
        self._outputs = Outputs(
            self.dlq_topic,
            watched(
                self._auth, clients.producer_config(base, linger_ms=1, overrides=producer_config)
            ),
            feedback,
        )

    def _init_state(self) -> None:
        """The state of the consumer thread and of the handlers' loop, before ``run``."""
        # Consumer-thread state.
        dedup = self.settings.dedup
        self._recent = RecentIds(dedup) if dedup is not None else None
        self._in_flight_ids: Counter[str] = Counter()
        self._progress: dict[tuple[str, int], CommitPosition] = {}
        # Records handed to the loop whose outcome is not back, by (topic, partition, offset).
        self._jobs: dict[tuple[str, int, int], Job] = {}
        self._outstanding = 0  # handed to the loop, outcome not back yet
        self._paused = False
        self._completions: queue.SimpleQueue[tuple[Job, JobOutcome]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._running = threading.Event()
        # Event-loop state (created in run).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queues: TenantQueues[Job] = TenantQueues(per_tenant(self.ordering))
        self._playout: Playout[Job] = Playout()  # records waiting for their start time
        self._playout_timer: asyncio.TimerHandle | None = None
        self._wakeup: asyncio.Event | None = None
        self._ended: asyncio.Event | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._serving: asyncio.Future[None] | None = None  # ``async with``
        self._on_running: Callable[[], object] | None = None  # called once subscribed

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
        feedback = self._outputs.feedback
        return None if feedback is None else feedback.topic

    @property
    def metrics_url(self) -> str | None:
        """Where ``/metrics`` is served while ``run`` runs (with ``metrics_port``), else None."""
        server = self._metrics_server
        return server.url if server is not None else None

    def run(self) -> None:
        """Consume until ``stop()``; then finish running handlers, commit and close.

        Handlers run on an event loop of the worker's own, on a thread of its own.
        Caller: the application (or ``fairstream worker``), on one thread.
        Affects: the group's committed offsets of the egress topic; the dead-letter topic.
        """
        loop = asyncio.new_event_loop()
        loop_thread = threading.Thread(
            target=loop.run_forever, name="fairstream-worker-loop", daemon=True
        )
        loop_thread.start()
        try:
            self._run_on(loop)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            loop_thread.join(10)

    def _run_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """The consumer's life, with handlers on ``loop`` (running on another thread).
        Caller: ``run`` or ``serve``, on the thread that will consume."""
        if self.on_startup is not None:  # shared clients, on the loop the handlers use
            asyncio.run_coroutine_threadsafe(self.on_startup(), loop).result()
        if self.metrics_port is not None:
            self._metrics_server = MetricsServer(
                self.metrics.registry, self.metrics_host, self.metrics_port
            )
            log.info("metrics on %s", self._metrics_server.url)
        self._loop = loop
        self._wakeup = asyncio.Event()
        self._ended = asyncio.Event()
        self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="fairstream-handler")
        self._outputs.open()
        consumer = Consumer(self._consumer_config)
        try:
            consumer.subscribe(
                [self.egress_topic],
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
            self._running.set()
            if self._on_running is not None:
                self._on_running()
            if self._stopping.is_set():  # stop() came before the loop existed
                self.stop()
            self._consume(consumer)
        finally:
            try:
                self._release(consumer, list(self._progress), commit=True, drain=True)
                consumer.close()
            finally:
                # A dead letter cannot be delivered with refused credentials: do not wait.
                self._outputs.close(wait=self._auth.failure is None)
                if self.on_shutdown is not None:
                    self._shut_down(loop)
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

    def _shut_down(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self.on_shutdown is not None
        try:
            asyncio.run_coroutine_threadsafe(self.on_shutdown(), loop).result(30)
        except Exception:  # the worker has stopped and committed: say it, end anyway
            log.exception("the worker's on_shutdown hook failed")

    # --------------------------------------------------------- consumer thread

    def _consume(self, consumer: Consumer) -> None:
        next_commit = time.monotonic() + self.commit_interval
        while not self._stopping.is_set():
            self._serve()
            self._apply_backpressure(consumer)
            # What has arrived, else wait for one record: consume() waits out its whole
            # timeout unless it fills num_messages (measured: a record released by the
            # scheduler started its call 0.094 s late on average, a tenth of 1 s calls).
            messages = consumer.consume(num_messages=500, timeout=0)
            if not messages:
                messages = consumer.consume(num_messages=1, timeout=0.1)
            jobs: list[Job] = []
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    if err.fatal():
                        raise KafkaException(err)
                    log.warning("consumer error: %s", err)
                    continue
                job = self._dispatch(msg)
                if job is not None:
                    jobs.append(job)
            if jobs:
                # One hand-over per batch: the loop takes in every record of it before it
                # starts any, so records that arrived late together start in the order of
                # their stamps, whatever partition each came from (one at a time, a late
                # record on one partition started before an earlier-stamped one of the same
                # tenant on another partition of the same fetch was taken in).
                assert self._loop is not None
                self._loop.call_soon_threadsafe(self._enqueue, jobs)
            self._auth.check()  # librdkafka retries a refused login forever: fail now
            if time.monotonic() >= next_commit:
                self._serve()
                self._commit(consumer, list(self._progress), asynchronous=True)
                next_commit = time.monotonic() + self.commit_interval

    def _dispatch(self, msg: Message) -> Job | None:
        """The job of one record, for the loop; None for a record resolved at once (a
        duplicate) or not this worker's."""
        topic, partition, offset = coordinates(msg)
        progress = self._progress.get((topic, partition))
        if progress is None:
            log.debug("record from unassigned partition %s[%d] ignored", topic, partition)
            return None
        if not progress.add(offset):
            return None  # fetched again after a pause/resume: already handed out
        request = request_from_message(msg)
        job = Job(request, msg.key(), msg.value(), progress)
        rid = request.request_id
        self._outstanding += 1
        self.metrics.fetched(request.tenant)
        earlier = self._jobs.get((topic, partition, offset))
        if earlier is not None:
            # The same record, still running from before its partition was revoked: not a
            # duplicate yet (that run may fail); the loop decides once it ended.
            job.predecessor = earlier
        elif self._recent is not None and (rid in self._recent or rid in self._in_flight_ids):
            self._resolve(job, JobOutcome.DUPLICATE)
            return None
        self._jobs[(topic, partition, offset)] = job
        self._in_flight_ids[rid] += 1
        return job

    def _serve(self, timeout: float = 0.0) -> None:
        """Serve dead-letter delivery reports and apply the outcomes the loop sent back;
        wait up to ``timeout`` s for the first one."""
        self._outputs.poll()
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

    def _resolve(self, job: Job, outcome: JobOutcome) -> None:
        """Apply the outcome of one fetched record: counters, dedup memory, commit position.

        Caller: the consumer thread. Affects: stats, metrics, _jobs, the job's progress.
        """
        self._outstanding -= 1
        request = job.request
        rid = request.request_id
        self.metrics.finished(request.tenant)
        if outcome is not JobOutcome.DUPLICATE:
            coordinates = (request.topic, request.partition, request.offset)
            if self._jobs.get(coordinates) is job:
                del self._jobs[coordinates]
            self._in_flight_ids[rid] -= 1
            if self._in_flight_ids[rid] <= 0:
                del self._in_flight_ids[rid]
        stats = self.stats
        if outcome is JobOutcome.ABANDONED:
            stats.abandoned += 1
            self.metrics.abandoned.inc()
            job.progress.resolve(request.offset, done=False)
            return
        if outcome is JobOutcome.DONE:
            stats.processed += 1
            self.metrics.handled(request.tenant)
        elif outcome is JobOutcome.DEAD_LETTERED:
            stats.dead_lettered += 1
            self.metrics.dead_lettered(request.tenant, job.reason)
        else:
            stats.duplicates_skipped += 1
            self.metrics.duplicates.inc()
            if outcome is JobOutcome.REPEATED:
                log.info("skipped %s: finished before its partition came back", where(request))
            else:
                log.info("skipped duplicate request id %s (%s)", rid, where(request))
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
            self._progress[(p.topic, p.partition)] = CommitPosition()
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
