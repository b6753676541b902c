"""A simulated paid API behind real workers, in front of a real scheduler: the feedback loop
(429s, measured costs, the adaptive rate) on the test broker, for
``tests/integration/test_feedback_loop.py`` and ``benchmarks/feedback.py``.

``PaidApi`` is what the workers' handlers call: a thread-safe token bucket whose capacity
the scheduler does not know (it may change over time on a schedule). A call without a
token is refused at once with ``RateLimited(retry_after=...)``: the time until the next
token, rounded up to ``grain`` (as an API answering 429 with a Retry-After would). A call
that goes through takes ``latency`` seconds (the API's pacing). Every call is recorded
(wall-clock time, tenant, ok or refused), so that tests count events in windows.

``FeedbackLoop`` wires it up: fresh fairstream topics and a feedback topic, ``Worker``\\ s
(threads of this process) whose handler calls the API, one ``fairstream scheduler``
process, and a read_committed reader of the egress topic.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Message, Producer

from fairstream import RateLimited, Request, Usage, Worker, wire
from fairstream.adapters.admin import create_topics
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader

HOLDS = 3.0  # seconds a convergence must last, at the end of a run, to count


@dataclass(frozen=True, slots=True)
class Call:
    at: float  # epoch seconds (the clock of fairstream-scheduled-ms)
    tenant: str
    ok: bool
    retry_after: float | None = None  # what a refused call was told


class PaidApi:
    """A token bucket of ``capacity`` calls/s holding up to ``burst_seconds`` of capacity
    (default half a second of it: a rate of exactly the capacity must go through, and the
    pipeline delivers in batches: the scheduler commits every 0.1 s, workers fetch in bulk).

    ``schedule``: (seconds after the first call, capacity) pairs, in order, the first at 0.
    ``retry_after`` False: a refused call carries no Retry-After (the worker backs off).
    Thread-safe: the workers' handler threads share one instance.
    """

    def __init__(
        self,
        schedule: Sequence[tuple[float, float]] | float,
        *,
        burst_seconds: float = 0.5,
        grain: float = 0.1,
        latency: float = 0.01,
        retry_after: bool = True,
    ) -> None:
        steps = [(0.0, float(schedule))] if isinstance(schedule, int | float) else list(schedule)
        if not steps or steps[0][0] != 0 or any(c <= 0 for _, c in steps):
            raise ValueError("the schedule starts at 0 s with a positive capacity")
        self.schedule = steps
        self.burst_seconds = burst_seconds
        self.grain = grain
        self.latency = latency
        self.retry_after = retry_after  # False: refusals say no Retry-After (a bare 429)
        self.calls: list[Call] = []
        self.start: float | None = None  # the first call
        self._lock = threading.Lock()
        self._tokens = steps[0][1] * burst_seconds
        self._at = 0.0

    def capacity_at(self, elapsed: float) -> float:
        """The capacity ``elapsed`` seconds after the first call."""
        capacity = self.schedule[0][1]
        for begin, value in self.schedule:
            if elapsed >= begin:
                capacity = value
        return capacity

    def elapsed(self) -> float:
        """Seconds since the first call (0 before it)."""
        start = self.start
        return 0.0 if start is None else time.time() - start

    def call(self, tenant: str) -> None:
        """One call to the API: returns after ``latency`` s, or raises ``RateLimited``."""
        with self._lock:
            now = time.time()
            if self.start is None:
                self.start = self._at = now
            capacity = self.capacity_at(now - self.start)
            burst = max(1.0, capacity * self.burst_seconds)
            self._tokens = min(burst, self._tokens + (now - self._at) * capacity)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                self.calls.append(Call(now, tenant, True))
                retry_after = None
            else:
                wait = (1 - self._tokens) / capacity
                retry_after = max(self.grain, math.ceil(wait / self.grain) * self.grain)
                self.calls.append(Call(now, tenant, False, retry_after))
        if retry_after is not None:
            raise RateLimited(retry_after=retry_after if self.retry_after else None)
        time.sleep(self.latency)

    # -- counting ---------------------------------------------------------------------------

    def window(self, begin: float, end: float) -> list[Call]:
        """The calls from ``begin`` to ``end`` seconds after the first call."""
        start = self.start or 0.0
        with self._lock:
            calls = list(self.calls)
        return [c for c in calls if begin <= c.at - start < end]

    def goodput(self, begin: float, end: float) -> float:
        """Calls that went through per second, from ``begin`` to ``end`` s after the first."""
        return sum(c.ok for c in self.window(begin, end)) / (end - begin)

    def limited_share(self, begin: float, end: float) -> float:
        """The share of the calls in the window the API refused."""
        calls = self.window(begin, end)
        return sum(not c.ok for c in calls) / max(1, len(calls))

    def convergence(
        self, change: float, end: float, fraction: float = 0.9, refused: float | None = None
    ) -> float | None:
        """Seconds from ``change`` to the first 1 s window from which on every 1 s window
        (stepping by 0.5 s) up to ``end`` has goodput at least ``fraction`` of the capacity
        (and, with ``refused``, at most that share of its calls refused); None: never, or
        not for the last ``HOLDS`` seconds at least.
        """
        start = self.start or 0.0
        with self._lock:
            calls = sorted((c.at - start, c.ok) for c in self.calls)
        capacity = self.capacity_at(change)
        times = [t for t, _ in calls]

        def good(t: float) -> bool:
            window = calls[bisect.bisect_left(times, t) : bisect.bisect_left(times, t + 1)]
            ok = sum(1 for _, went in window if went)
            if ok < fraction * capacity:
                return False
            return refused is None or len(window) - ok <= refused * len(window)

        steps = [change + 0.5 * i for i in range(int((end - 1 - change) / 0.5) + 1)]
        verdicts = [good(t) for t in steps]
        for i, t in enumerate(steps):
            if t > end - HOLDS:
                break
            if all(verdicts[i:]):
                return t - change
        return None


def api_handler(
    api: PaidApi | None,
    costs: dict[str, int] | None = None,
    before: Callable[[Request], None] | None = None,
) -> Callable[[Request], Usage | None]:
    """A worker handler: ``before`` (may raise), the API call, and the tenant's cost
    (``costs``, 1 when not named) as ``Usage``; ``api`` None: an API that takes everything.
    """

    def handler(request: Request) -> Usage | None:
        if before is not None:
            before(request)
        if api is not None:
            api.call(request.tenant)
        return Usage((costs or {}).get(request.tenant, 1)) if costs is not None else None

    return handler


@dataclass
class FeedbackLoop:
    """What a running loop is made of (see ``feedback_loop``)."""

    deployment: Deployment
    feedback_topic: str
    scheduler: SchedulerProcess
    workers: list[Worker]
    egress: TopicReader
    samples: list[tuple[float, float | None]] = field(default_factory=list)  # adaptive rate

    def produce(self, per_tenant: dict[str, int], cost: int | None = None) -> None:
        """Write ``per_tenant[t]`` records for each tenant, interleaved."""
        producer = Producer(
            {
                "bootstrap.servers": self.deployment.bootstrap,
                "linger.ms": 5,
                "partitioner": "murmur2_random",
            }
        )
        headers: list[tuple[str, str | bytes | None]] = []
        if cost is not None:
            headers.append((wire.COST, str(cost).encode()))
        for i in range(max(per_tenant.values())):
            for tenant, count in per_tenant.items():
                if i < count:
                    producer.produce(
                        self.deployment.topics.ingest,
                        value=b"%s-%d" % (tenant.encode(), i),
                        key=tenant.encode(),
                        headers=headers,
                    )
            if i % 1000 == 999:
                producer.poll(0)
        assert producer.flush(30) == 0

    def metric(self, name: str, labels: str = "") -> float | None:
        """One sample of the scheduler's /metrics (``labels`` as written there), or None."""
        return self.scheduler.metric(name, labels)

    def sample(self) -> None:
        """Read egress and take a sample of the adaptive rate (for plots)."""
        self.egress.poll(0.05)
        self.samples.append((time.time(), self.metric("fairstream_adaptive_rate")))

    def run_until(
        self, done: Callable[[], bool], timeout: float, what: str | Callable[[], str]
    ) -> None:
        """Sample every 0.2 s until ``done``, failing after ``timeout`` s."""

        def check() -> bool:
            self.sample()
            return done()

        wait_until(check, timeout, what, interval=0.2)

    def scheduled(self) -> list[tuple[float, str]]:
        """(fairstream-scheduled-ms / 1000, tenant) of every egress record read so far."""
        return [(_stamp(m) / 1000, (m.key() or b"").decode()) for m in self.egress.messages]


def _stamp(msg: Message) -> int:
    raw = dict(msg.headers() or [])[wire.SCHEDULED_MS]
    assert isinstance(raw, bytes)
    return int(raw)


def scheduled_counts(loop: FeedbackLoop, begin: float, end: float) -> Counter[str]:
    """Egress records per tenant scheduled from ``begin`` to ``end`` (epoch seconds)."""
    return Counter(t for at, t in loop.scheduled() if begin <= at < end)


def _run_worker(worker: Worker, errors: list[BaseException]) -> None:
    try:
        worker.run()
    except BaseException as exc:  # reported by feedback_loop
        errors.append(exc)


@contextmanager
def feedback_loop(
    bootstrap: str,
    workdir: Path,
    handler: Callable[[Request], Any],
    *scheduler_args: str,
    partitions: int = 4,
    workers: int = 1,
    concurrency: int = 16,
    worker_feedback: bool = True,
    worker_options: dict[str, Any] | None = None,
) -> Iterator[FeedbackLoop]:
    """Topics, ``workers`` Workers calling ``handler`` (each ``concurrency`` at a time,
    reporting to the feedback topic unless ``worker_feedback`` is False), and one scheduler
    run with ``scheduler_args`` (which name ``--feedback-topic``; the loop's topic is
    ``loop.feedback_topic``, made up before the scheduler starts: pass ``FEEDBACK`` in
    ``scheduler_args`` for it). ``worker_options``: more keywords for each ``Worker`` (a
    ``playout_delay``, say). Both are ready (workers own every egress partition) when
    this yields; nothing is produced yet.
    """
    deployment = Deployment(bootstrap, partitions=partitions)
    feedback_topic = unique("fs-feedback")
    create_topics(
        bootstrap, deployment.topics, partitions, deployment.app_id, feedback_topic=feedback_topic
    )
    group = unique("fb-workers")
    pool = [
        Worker(
            handler,
            bootstrap=bootstrap,
            egress_topic=deployment.topics.egress,
            dlq_topic=deployment.topics.dlq,
            group_id=group,
            concurrency=concurrency,
            commit_interval=0.2,
            feedback_topic=feedback_topic if worker_feedback else None,
            **(worker_options or {}),
        )
        for _ in range(workers)
    ]
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_run_worker, args=(w, errors), daemon=True, name=f"worker-{i}")
        for i, w in enumerate(pool)
    ]
    args = [feedback_topic if a == FEEDBACK else a for a in scheduler_args]
    scheduler = SchedulerProcess(deployment, workdir, *args)
    egress: TopicReader | None = None
    try:
        for thread in threads:
            thread.start()
        wait_until(
            lambda: sum(len(w.assignment) for w in pool) == partitions or errors,
            60,
            "the workers own every egress partition",
            interval=0.1,
        )
        assert not errors, errors
        scheduler.start().wait_ready()
        egress = TopicReader(bootstrap, deployment.topics.egress)
        yield FeedbackLoop(deployment, feedback_topic, scheduler, pool, egress)
    finally:
        if egress is not None:
            egress.close()
        if scheduler.alive():
            scheduler.terminate()
        for worker in pool:
            worker.stop()
        for thread in threads:
            thread.join(60)
    assert not errors, errors


FEEDBACK = "{feedback-topic}"  # stands for the loop's feedback topic in scheduler_args
