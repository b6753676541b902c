"""The event-loop side of ``fairstream.Worker``: run handlers, retry them, wait out rate
limits, write dead letters, report outcomes.

``Handling`` is a part of ``Worker`` (its base class), split out by job: the methods here
run on the worker's event loop (``Worker.run`` starts it on a thread of its own) and share
the state the annotations below name, which ``Worker.__init__`` and ``run`` set up. Records
come in through ``_enqueue`` (from the consumer thread, by ``call_soon_threadsafe``);
outcomes go back through ``_completions``, which the consumer thread drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import queue
import threading
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka import Producer as _KafkaProducer

from fairstream import wire
from fairstream.sdk.worker.feedback import FeedbackWriter
from fairstream.sdk.worker.handler import (
    Handler,
    RateLimited,
    RawHeaders,
    Request,
    Usage,
    where,
)
from fairstream.sdk.worker.jobs import FINISHED, Job, Outcome, WorkerStats
from fairstream.sdk.worker.metrics import WorkerMetrics
from fairstream.sdk.worker.retry import backoff_delay, expires_before, rate_limited_delay
from fairstream.sdk.worker.tracking import PartitionProgress, TenantQueues
from fairstream.wire.feedback import Outcome as Reported
from fairstream.wire.feedback import Scope

__all__ = ["MAX_DETAIL_CHARS", "Handling"]

log = logging.getLogger("fairstream.worker")

MAX_DETAIL_CHARS = 2000


class Handling:
    """The handler-running half of ``Worker`` (see the module docstring)."""

    # Set by Worker.__init__.
    handler: Handler
    dlq_topic: str
    max_attempts: int
    backoff_initial: float
    backoff_max: float
    concurrency: int
    stats: WorkerStats
    metrics: WorkerMetrics
    _is_async: bool
    _feedback: FeedbackWriter | None
    _completions: queue.SimpleQueue[tuple[Job, Outcome]]
    _stopping: threading.Event
    _queues: TenantQueues[Job]
    # Set by Worker.run.
    _loop: asyncio.AbstractEventLoop | None
    _wakeup: asyncio.Event | None
    _ended: asyncio.Event | None  # set (and replaced) whenever a run ends
    _pool: ThreadPoolExecutor | None
    _dlq: _KafkaProducer | None

    def _enqueue(self, job: Job) -> None:
        if not self._carry_on(job):  # revoked or stopping since it was dispatched
            self._abandon(job)
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

    def _abandon(self, job: Job) -> None:
        """End a record that never ran: left to the partition's next owner."""
        # Set on the loop like every outcome: a later run of the same record waits for
        # the outcome of this one (_process), and must not wait forever.
        job.outcome = Outcome.ABANDONED
        self._completions.put((job, Outcome.ABANDONED))

    def _purge(self, progresses: set[PartitionProgress]) -> None:
        for job in self._queues.purge(lambda job: job.progress in progresses):
            self._abandon(job)
        self._interrupt()

    def _interrupt(self) -> None:
        """Wake the records sleeping between attempts, to check whether to carry on."""
        if self._stopping.is_set():
            for job in self._queues.purge(lambda job: True):
                self._abandon(job)
        assert self._wakeup is not None
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    async def _run_job(self, job: Job) -> None:
        outcome = Outcome.ABANDONED  # unless _process returns
        try:
            outcome = await self._process(job)
        finally:
            # Set before the tenant's turn passes on: a later run of the same record (same
            # tenant, waiting for this one in _process) reads it.
            job.outcome = outcome
            self._queues.done(job.request.tenant)
            self._completions.put((job, outcome))
            assert self._ended is not None
            self._ended.set()  # wake the runs waiting for an earlier run to end
            self._ended = asyncio.Event()
        self._pump()

    def _carry_on(self, job: Job) -> bool:
        return job.progress.live and not self._stopping.is_set()

    async def _pause(self, delay: float, job: Job) -> bool:
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

    async def _process(self, job: Job) -> Outcome:
        earlier = job.predecessor
        if earlier is not None:
            job.predecessor = None  # no chain of finished jobs kept alive
            # With ordering="completion" the tenant's turn made it wait already; with
            # "start" it may still run: one run of a record at a time, whatever the ordering.
            while earlier.outcome is None:
                assert self._ended is not None
                await self._ended.wait()
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
                log.debug("%s rate-limited (%s); retry in %g s", where(request), exc.scope, delay)
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
                    where(request),
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
        self, job: Job, reason: str, detail: str, attempt: int, latency: float
    ) -> Outcome:
        """Write the record to the dead-letter topic and wait for the broker's ack."""
        detail = detail[:MAX_DETAIL_CHARS]
        headers = wire.dead_letter_headers(job.request.headers, reason, detail)
        tries = 0
        while True:
            tries += 1
            err = await self._produce_dead_letter(job, headers)
            if err is None:
                log.warning("dead-lettered %s as %s: %s", where(job.request), reason, detail)
                job.reason = reason
                self._report(job.request, Reported.DEAD_LETTERED, attempt, latency)
                return Outcome.DEAD_LETTERED
            log.error("dead letter for %s not delivered: %s", where(job.request), err)
            delay = backoff_delay(tries, max(self.backoff_initial, 0.1), self.backoff_max)
            if not await self._pause(delay, job):
                return Outcome.ABANDONED

    def _report(
        self, request: Request, outcome: Reported, attempt: int, latency: float, **details: Any
    ) -> None:
        """``FeedbackWriter.report`` (``details``: cost, scope, retry_after), when feedback
        is on."""
        if self._feedback is not None:
            self._feedback.report(request, outcome, attempt, latency, **details)

    def _produce_dead_letter(self, job: Job, headers: RawHeaders) -> Awaitable[Any]:
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
