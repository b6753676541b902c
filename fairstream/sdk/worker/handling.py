"""The event-loop side of ``fairstream.Worker``: run handlers, retry them, wait out rate
limits (the rule is ``calling.Retrying``'s), write dead letters, report outcomes.

``Handling`` is a part of ``Worker`` (its base class), split out by job: the methods here
run on the worker's event loop (``Worker.run`` starts it on a thread of its own) and share
the state the annotations below name, which ``Worker.__init__`` and ``run`` set up. Records
come in through ``_enqueue``, a fetched batch at a time (from the consumer thread, by
``call_soon_threadsafe``); outcomes go back through ``_completions``, which the consumer
thread drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fairstream import wire
from fairstream.sdk.worker.calling import Ending, OutcomeReport, Retrying
from fairstream.sdk.worker.handler import where
from fairstream.sdk.worker.jobs import FINISHED, Job, JobOutcome, WorkerStats
from fairstream.sdk.worker.metrics import WorkerMetrics
from fairstream.sdk.worker.outputs import Outputs
from fairstream.sdk.worker.pacing import Playout, hold_until, start_at, timer_wait
from fairstream.sdk.worker.retry import backoff_delay
from fairstream.sdk.worker.tracking import CommitPosition, TenantQueues
from fairstream.wire.feedback import Outcome as Reported

__all__ = ["MAX_DETAIL_CHARS", "Handling"]

log = logging.getLogger("fairstream.worker")

MAX_DETAIL_CHARS = 2000


class Handling(Retrying):
    """The handler-running half of ``Worker`` (see the module docstring)."""

    _log = log
    # Set by Worker.__init__ (and those ``Retrying`` declares: the handler, the retry rule).
    dlq_topic: str
    concurrency: int
    stats: WorkerStats
    metrics: WorkerMetrics
    _outputs: Outputs
    _completions: queue.SimpleQueue[tuple[Job, JobOutcome]]
    _stopping: threading.Event
    _queues: TenantQueues[Job]
    playout_delay: float | None  # None: calls start on arrival
    _wall: Callable[[], float]  # epoch seconds, what stamps are compared with
    _playout: Playout[Job]  # records whose start time has not come
    _playout_timer: asyncio.TimerHandle | None  # wakes the loop at the earliest of them
    # Set by Worker.run.
    _loop: asyncio.AbstractEventLoop | None
    _wakeup: asyncio.Event | None
    _ended: asyncio.Event | None  # set (and replaced) whenever a run ends
    _pool: ThreadPoolExecutor | None

    def _enqueue(self, jobs: list[Job]) -> None:
        """Take in a batch of fetched records (in fetch order): queue them, or hold them
        until their start time; then start what may start."""
        delay = self.playout_delay
        now = self._wall()
        for job in jobs:
            if not self._carry_on(job):  # revoked or stopping since it was dispatched
                self._abandon(job)
            elif delay is None:
                self._queues.push(job.request.tenant, job)
            else:
                # Held apart from the tenant queues, so that it keeps no concurrency slot
                # while it waits, and enters them in the order of its start time: a record
                # arriving late goes after those due before it that still wait.
                start_ms = job.request.start_ms
                job.due = due = start_at(start_ms, now, delay)
                self._playout.push(due, job, None if start_ms is None else start_ms / 1000)
        if delay is None:
            self._pump()
        else:
            self._release_due(now)

    def _arm_playout(self, after: float) -> None:
        """Wake the loop in ``after`` s, unless it is woken earlier already."""
        assert self._loop is not None
        timer = self._playout_timer
        when = self._loop.time() + after
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._playout_timer = self._loop.call_at(when, self._play_out)

    def _play_out(self) -> None:
        """The playout timer: start what is due, and wake again for the next one."""
        self._playout_timer = None
        self._release_due(self._wall())

    def _release_due(self, now: float) -> None:
        """Queue the records whose start time has come (``now``, on the wall clock), in its
        order, start them, and arm the timer for the next one."""
        for job in self._playout.pop_due(now):
            if self._carry_on(job):
                self._queues.push(job.request.tenant, job)
            else:
                self._abandon(job)
        self._pump()
        due = self._playout.next_due()
        if due is not None:
            # Nothing leaves before its moment on the wall clock (what stamps are read on);
            # the timer, on the loop's clock, only wakes the loop to look (``timer_wait``).
            self._arm_playout(timer_wait(due - now))

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
        job.outcome = JobOutcome.ABANDONED
        self._completions.put((job, JobOutcome.ABANDONED))

    def _purge(self, progresses: set[CommitPosition]) -> None:
        def revoked(job: Job) -> bool:
            return job.progress in progresses

        for job in self._queues.purge(revoked) + self._playout.purge(revoked):
            self._abandon(job)
        self._interrupt()

    def _interrupt(self) -> None:
        """Wake the records sleeping between attempts, to check whether to carry on."""
        if self._stopping.is_set():
            for job in self._queues.purge(_every) + self._playout.purge(_every):
                self._abandon(job)
        assert self._wakeup is not None
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    async def _run_job(self, job: Job) -> None:
        outcome = JobOutcome.ABANDONED  # unless _process returns
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

    async def _begin_paced(self, job: Job) -> Callable[[], None]:
        """Hold a paced record's first call at its gate (it left the playout its lead
        early); return its mark, which the call's start calls right before the handler."""
        start_ms = job.request.start_ms
        assert start_ms is not None  # paced: _process passes this for stamped records only
        stamp, playout = start_ms / 1000, self._playout
        await hold_until(lambda now: playout.gate(stamp, job.due, now), self._wall, asyncio.sleep)
        return functools.partial(self._began, stamp)

    def _began(self, stamp: float) -> None:
        """The paced call stamped ``stamp`` begins now: the next one's gate keeps its
        distance from this moment, read on the handler's doorstep. The gate's own reading
        would not do: the steps after it took 12 us at the median but over 80 us at times
        (a thread preempted on a busy machine), and a previous call that began that late,
        as the API saw it, left the next one's gap short (a strict bucket of one refuses a
        call a microsecond short)."""
        # Once the handler is under way, look at the playout again: a catch-up goes at once,
        # back to back with this call (``Playout.began``). Scheduled first, so that the clock
        # is read last, a step from the handler.
        assert self._loop is not None
        self._loop.call_soon(self._look_again)
        self._playout.began(stamp, self._wall())

    def _look_again(self) -> None:
        self._release_due(self._wall())

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

    async def _process(self, job: Job) -> JobOutcome:
        earlier = job.predecessor
        if earlier is not None:
            job.predecessor = None  # no chain of finished jobs kept alive
            # With ordering="completion" the tenant's turn made it wait already; with
            # "start" it may still run: one run of a record at a time, whatever the ordering.
            while earlier.outcome is None:
                assert self._ended is not None
                await self._ended.wait()
            if earlier.outcome in FINISHED:
                return JobOutcome.REPEATED
        if not self._carry_on(job):
            return JobOutcome.ABANDONED
        paced = self.playout_delay is not None and job.request.start_ms is not None
        ending = await self._calls(
            job.request,
            lambda delay: self._pause(delay, job),
            functools.partial(self._begin_paced, job) if paced else None,
        )
        if ending is None:
            return JobOutcome.ABANDONED
        if ending.reason is None:
            return JobOutcome.DONE
        if not self._carry_on(job):
            return JobOutcome.ABANDONED  # revoked meanwhile: the next owner tries it again
        return await self._dead_letter(job, ending)

    async def _dead_letter(self, job: Job, ending: Ending) -> JobOutcome:
        """Write the record to the dead-letter topic and wait for the broker's ack."""
        assert ending.reason is not None
        reason, detail = ending.reason, ending.detail[:MAX_DETAIL_CHARS]
        headers = wire.dead_letter_headers(job.request.headers, reason, detail)
        tries = 0
        while True:
            tries += 1
            err = await self._outputs.dead_letter(job.key, job.value, headers)
            if err is None:
                log.warning("dead-lettered %s as %s: %s", where(job.request), reason, detail)
                job.reason = reason
                dead = OutcomeReport(
                    job.request, Reported.DEAD_LETTERED, ending.attempt, ending.latency
                )
                await self._report(dead)
                return JobOutcome.DEAD_LETTERED
            log.error("dead letter for %s not delivered: %s", where(job.request), err)
            delay = backoff_delay(tries, max(self.backoff_initial, 0.1), self.backoff_max)
            if not await self._pause(delay, job):
                return JobOutcome.ABANDONED

    async def _report(self, report: OutcomeReport) -> None:
        self._outputs.report(report)


def _every(job: Job) -> bool:
    return True
