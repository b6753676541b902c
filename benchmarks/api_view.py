"""The paid API's view: where fairstream's guarantees stand at the moment a handler starts a
call, measured from outside on the real broker, with real ``fairstream scheduler`` processes
and ``fairstream.Worker``\\ s (threads of this process) in front of a simulated API.

Three scenarios, each on topics of its own (deleted at the end) with a feedback topic of its
own shared by the workers and the scheduler:

- ``strict``: a strict API, a token bucket of ``--rate`` per second holding ``--burst``
  tokens (continuous time; a call finding fewer than one token is refused). One Worker
  (concurrency 8) with a fast async handler that takes the bucket's decision on its first
  line and counts accepted and refused calls: it does not raise ``RateLimited``, so what is
  measured is the schedule the API sees, not the feedback loop. A backlog always waits
  (the ingest topic holds far more than the run consumes); the scheduler runs at the same
  ``--rate`` and ``--burst``. Rows (R, B): (50, 1), (200, 5), (2000, 200). Per row, over a
  steady window (3-13 s after the first call; ``--quick`` 2-8 s): calls started per second,
  the share refused, accepted over R; how late calls start after their
  ``fairstream-scheduled-ms`` stamp and how late records become visible on egress after it
  (a read_committed reader polling all the time, on a thread of this process: it shares
  the workers' interpreter lock, so at 2,000/s its times are upper bounds): what a playout
  delay must cover; and the share the bucket would refuse had every call started exactly at
  its stamp (the schedule's own conformance, which no pacing in the worker can better).
- ``slow-workers``: ``--rate 100``, default options otherwise, 4 egress partitions, 2
  Workers x concurrency 1 x 0.1 s calls (20 calls/s in all). One noisy tenant with a backlog
  of 5,000 records, and 8 quiet tenants (two per partition) sending one record a second
  each for 40 s (``--quick``: 3,000 and 20 s).
- ``queueing-api``: an API with 8 slots of 0.5 s each; calls beyond 8 wait in the API's own
  FIFO (inside the handler); 2 Workers x concurrency 64; ``--rate 100``; same tenants.
- ``plain-consumers``: ``slow-workers`` with 2 plain confluent-kafka consumers instead of
  Workers: each takes one record at a time and commits its offset after the call, and
  sends no feedback; the scheduler gets ``--egress-group`` (their group), the one option a
  deployment of such consumers needs.
- ``faust-agents``: ``slow-workers`` with 2 real Faust workers (``faust -A
  benchmarks.faust_quiet_app worker``, processes of one app id) instead of Workers: each
  runs ``fairstream.faust.PaidApiAgent`` with ``max_in_flight=1`` and its default playout
  delay and feedback, the 0.1 s call inside its handler.
- ``faust-queueing-api``: ``queueing-api`` behind 2 such Faust workers with
  ``max_in_flight=64``: the API (8 slots of 0.5 s and its FIFO) is a TCP server on a thread
  of this process that both workers' handlers call (``api_server``), so its queue is one.

For all but ``strict``, over the window of quiet traffic: the quiet tenants' wait from their
producer's send time (written in the payload) to the moment the API takes the call (the
handler's start; for ``queueing-api`` the moment a slot takes it), p50/p99/max and p99 less
the call time; the quiet requests not taken by the end of the window plus the target's
allowance, and not taken by a drain deadline (20 s later; ``--quick`` 10 s); the API's busy
fraction (call time inside the window over the slots' capacity: workers x concurrency, or
the 8 slots). A request never taken counts in the percentiles with the wait it had at the
deadline (a lower bound; the figure is then marked ``>=``).

``--playout-delay`` (seconds, or ``off``; default: the Worker's own default) is passed to
the Worker only when its signature has ``playout_delay`` (paced starts); otherwise the run
says the Worker does not have it. Prints numbers and the targets beside them, asserts
nothing. Measured on the machine it runs on, with whatever else runs there.

    .venv/bin/python -m benchmarks.api_view [--bootstrap HOST:PORT] [--quick]
        [--scenario strict,slow-workers,queueing-api,plain-consumers,faust-agents,
                    faust-queueing-api]
        [--rate R --burst B]
        [--playout-delay SECONDS|off] [--scheduler-args "OPTIONS"] [--noisy RECORDS]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import functools
import inspect
import itertools
import json
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from benchmarks.common import (
    IN_LOG,
    Broker,
    Row,
    delete_all,
    exited,
    failed_row,
    faust_worker,
    get,
    keys_for,
    logger,
    metrics,
    partitions_shared,
    prefill,
    start_scheduler,
    stop_process,
)
from benchmarks.slow_api import EgressWatch, running_workers
from fairstream import Request, Worker
from fairstream.adapters.admin import create_topics
from fairstream.analysis.stats import percentile
from fairstream.config import Topics
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess

PARTITIONS = 4
STRICT_ROWS: tuple[tuple[float, float], ...] = ((50.0, 1.0), (200.0, 5.0), (2000.0, 200.0))
STRICT_CONCURRENCY = 8
STRICT_TENANTS = 100
QUIET_RATE = 100.0  # the scheduler's --rate in slow-workers and queueing-api
QUIET_TENANTS = 8
NOISY = "noisy"
SCENARIOS = (
    "strict",
    "slow-workers",
    "queueing-api",
    "plain-consumers",
    "faust-agents",
    "faust-queueing-api",
)
STAMP_TOLERANCE = 1e-6  # s: the at-stamp figures' allowance for float epoch seconds
TARGET_REFUSED = 0.01
TARGET_ACCEPTED = 0.97
TARGET_EXTRA_WAIT_S = 0.5  # quiet p99 <= the call time + this
TARGET_BUSY = 0.95


@dataclass(frozen=True, slots=True)
class QuietSetUp:
    """One of the quiet-tenant scenarios: the workers and the API behind them."""

    workers: int
    concurrency: int
    call_s: float
    slots: int | None  # the API's own slots (queueing-api); None: no queue, the workers bind
    plain: bool = False  # plain confluent-kafka consumers (no feedback), not Workers
    faust: bool = False  # Faust workers running PaidApiAgent (processes), not Workers

    @property
    def capacity(self) -> int:
        """Calls the API can run at once."""
        return self.slots if self.slots is not None else self.workers * self.concurrency


QUIET_SETUPS = {
    "slow-workers": QuietSetUp(workers=2, concurrency=1, call_s=0.1, slots=None),
    "queueing-api": QuietSetUp(workers=2, concurrency=64, call_s=0.5, slots=8),
    "plain-consumers": QuietSetUp(workers=2, concurrency=1, call_s=0.1, slots=None, plain=True),
    "faust-agents": QuietSetUp(workers=2, concurrency=1, call_s=0.1, slots=None, faust=True),
    "faust-queueing-api": QuietSetUp(workers=2, concurrency=64, call_s=0.5, slots=8, faust=True),
}

log = logger("api_view")


def _sizes(quick: bool) -> dict[str, Any]:
    if quick:
        return {"window": (2.0, 8.0), "noisy": 3000, "quiet_s": 20.0, "drain_s": 10.0}
    return {"window": (3.0, 13.0), "noisy": 5000, "quiet_s": 40.0, "drain_s": 20.0}


# -- the pure parts: the strict API's bucket, the API's FIFO, windows and percentiles ---------


class TokenBucket:
    """A strict API's limit: ``rate`` tokens a second, at most ``burst`` held, full at the
    start; a call takes one token or, finding fewer than one, is refused. Continuous time:
    ``take(now)`` is told the time (seconds, any clock that does not jump), so tests drive
    it. A ``now`` earlier than the last one (two threads' clocks read out of order) adds
    nothing. Not thread-safe: the caller holds its lock.
    """

    def __init__(self, rate: float, burst: float, tolerance: float = 0.0) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a bucket needs rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        # Seconds early a call may be and still pass: 0 for the API itself; a microsecond
        # where float epoch seconds (0.24 us apart at today's epoch) stand for whole ms.
        self._short = tolerance * rate
        self._at: float | None = None

    def take(self, now: float) -> bool:
        """True: the call goes through (a token taken); False: refused."""
        if self._at is not None and now > self._at:
            self.tokens = min(self.burst, self.tokens + (now - self._at) * self.rate)
        if self._at is None or now > self._at:
            self._at = now
        if self.tokens + self._short >= 1:
            self.tokens = max(0.0, self.tokens - 1)
            return True
        return False


def refused_share(
    times: Sequence[float], rate: float, burst: float, tolerance: float = 0.0
) -> float:
    """The share of calls at ``times`` (sorted) that a fresh ``TokenBucket`` would refuse."""
    if not times:
        return 0.0
    bucket = TokenBucket(rate, burst, tolerance)
    return sum(not bucket.take(t) for t in times) / len(times)


class SlotQueue:
    """An API's own slots and its FIFO: ``acquire`` takes a free slot, or waits behind every
    call that waited before it; ``release`` hands the slot to the longest waiter. Shared by
    several workers' event loops on their own threads (hence a lock and futures woken with
    ``call_soon_threadsafe``, where an ``asyncio.Semaphore`` belongs to one loop).
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        self._free = slots
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self._lock = threading.Lock()

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiters)

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, future))
        await future

    def release(self) -> None:
        with self._lock:
            while self._waiters:
                loop, future = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(self._grant, future)
                    return
                except RuntimeError:  # that worker's loop has closed (a run ending)
                    continue
            self._free += 1

    def _grant(self, future: asyncio.Future[None]) -> None:
        # On the waiter's loop. A waiter cancelled meanwhile (its worker stopping) passes the
        # slot on, or a slot would be lost for good.
        if future.cancelled():
            self.release()
        else:
            future.set_result(None)


def short_gaps(times: Sequence[float], rate: float, tolerance: float = 0.0) -> float:
    """The share of gaps between consecutive ``times`` (sorted) shorter than ``1 / rate``
    by more than ``tolerance`` s: with a bucket of one token, each such call is refused
    however the calls are paced."""
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return sum(g < 1 / rate - tolerance for g in gaps) / len(gaps) if gaps else 0.0


def stats(values: Sequence[float]) -> dict[str, float] | None:
    """p50, p99 and max of ``values`` in seconds (3 places), None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return {
        "p50_s": round(percentile(ordered, 50, presorted=True), 3),
        "p99_s": round(percentile(ordered, 99, presorted=True), 3),
        "max_s": round(ordered[-1], 3),
    }


def count_in(times: Sequence[float], begin: float, end: float) -> int:
    """How many of ``times`` (sorted) fall in [begin, end)."""
    return bisect.bisect_left(times, end) - bisect.bisect_left(times, begin)


def busy_fraction(
    intervals: Sequence[tuple[float, float]], begin: float, end: float, capacity: int
) -> float:
    """Time the (start, end) calls spent inside [begin, end), over ``capacity`` slots for
    the whole window."""
    inside = sum(max(0.0, min(e, end) - max(s, begin)) for s, e in intervals)
    return inside / (capacity * (end - begin))


# -- the workers -------------------------------------------------------------------------------


def playout_options(choice: str) -> tuple[dict[str, Any], str]:
    """The Worker's keyword for ``--playout-delay`` (``default``, ``off``/``none`` or
    seconds), and what the run used, as words: only a Worker whose signature has
    ``playout_delay`` gets it."""
    parameter = inspect.signature(Worker).parameters.get("playout_delay")
    if parameter is None:
        return {}, "not in this Worker (starts on arrival)"
    if choice == "default":
        return {}, f"default ({parameter.default!r})"
    if choice.lower() in ("off", "none"):
        return {"playout_delay": None}, "off (None: start on arrival)"
    return {"playout_delay": float(choice)}, f"{float(choice):g} s"


@contextlib.contextmanager
def worker_pool(
    d: Deployment,
    feedback_topic: str,
    handler: Callable[[Request], Any],
    count: int,
    concurrency: int,
    options: dict[str, Any],
) -> Iterator[list[Worker]]:
    """``count`` Workers of one group on threads, owning every egress partition when this
    yields; stopped (and their threads joined) when the block ends."""
    group = unique("api-view-workers")
    pool = [
        Worker(
            handler,
            bootstrap=d.bootstrap,
            egress_topic=d.topics.egress,
            dlq_topic=d.topics.dlq,
            group_id=group,
            concurrency=concurrency,
            commit_interval=0.2,
            drain_timeout=5.0,
            feedback_topic=feedback_topic,
            **options,
        )
        for _ in range(count)
    ]
    with running_workers(pool, d.partitions) as running:
        yield running


def deployment_with_feedback(
    bootstrap: str, prefix: str, cleanup: list[Callable[[], None]]
) -> tuple[Deployment, str]:
    """Topics of one base (deleted by ``cleanup``) and a feedback topic of its own."""
    base = unique(prefix)
    topics = Topics(f"{base}.ingest", f"{base}.egress", f"{base}.dlq", f"{base}.policy")
    d = Deployment(bootstrap, partitions=PARTITIONS, topics=topics, app_id=f"{base}-app")
    feedback = f"{base}.feedback"
    cleanup.append(functools.partial(delete_all, d))
    create_topics(bootstrap, topics, PARTITIONS, d.app_id, feedback_topic=feedback)
    return d, feedback


def _check(scheduler: SchedulerProcess) -> None:
    if not scheduler.alive():
        raise RuntimeError(f"scheduler exited:\n{scheduler.tail()}")


# -- strict ------------------------------------------------------------------------------------


@dataclass(slots=True)
class StrictCall:
    started: float  # epoch s, as the API sees it
    accepted: bool
    scheduled: float | None  # fairstream-scheduled-ms / 1000
    request_id: str


@dataclass
class StrictApi:
    """The strict API the handler calls: the bucket's decision on the handler's first line."""

    bucket: TokenBucket
    calls: list[StrictCall] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle(self, request: Request) -> None:
        now = time.time()
        with self._lock:
            ok = self.bucket.take(now)
            stamp = None if request.scheduled_ms is None else request.scheduled_ms / 1000
            self.calls.append(StrictCall(now, ok, stamp, request.request_id))

    def snapshot(self) -> list[StrictCall]:
        with self._lock:
            return list(self.calls)


def measure_strict(
    calls: Sequence[StrictCall],
    visible: dict[str, float],
    rate: float,
    burst: float,
    window: tuple[float, float],
) -> dict[str, Any]:
    """A strict row's figures over [first call + window[0], first call + window[1])."""
    calls = sorted(calls, key=lambda c: c.started)
    if not calls:
        raise RuntimeError("the API saw no call")
    begin, end = calls[0].started + window[0], calls[0].started + window[1]
    inside = [c for c in calls if begin <= c.started < end]
    seconds = end - begin
    accepted = sum(c.accepted for c in inside)
    stamped = [c for c in inside if c.scheduled is not None]
    stamps = sorted(c.scheduled for c in stamped if c.scheduled is not None)
    return {
        "window_s": [window[0], window[1]],
        "calls": len(inside),
        "started_per_s": round(len(inside) / seconds, 1),
        "refused": round(1 - accepted / max(1, len(inside)), 4),
        "accepted_per_s": round(accepted / seconds, 1),
        "accepted_of_rate": round(accepted / seconds / rate, 3),
        "start_after_stamp": stats([c.started - c.scheduled for c in stamped if c.scheduled]),
        "visible_after_stamp": stats(
            [
                visible[c.request_id] - c.scheduled
                for c in stamped
                if c.scheduled and c.request_id in visible
            ]
        ),
        # The stamps are whole ms, as float epoch seconds: a microsecond's tolerance keeps
        # the floats' rounding from passing for a short gap.
        "refused_at_stamps": round(refused_share(stamps, rate, burst, STAMP_TOLERANCE), 4),
        "stamp_gaps_short": round(short_gaps(stamps, rate, STAMP_TOLERANCE), 4),
    }


def run_strict(
    bootstrap: str,
    workdir: Path,
    rate: float,
    burst: float,
    sizes: dict[str, Any],
    playout: str,
    cleanup: list[Callable[[], None]],
) -> dict[str, Any]:
    """One strict row (see the module docstring)."""
    options, used = playout_options(playout)
    window: tuple[float, float] = sizes["window"]
    d, feedback = deployment_with_feedback(bootstrap, "apiview-strict", cleanup)
    # Far more than the run consumes (the window's end plus the scheduler's start-up).
    backlog = int(rate * (window[1] + 10) * 2 + burst)
    prefill(bootstrap, d.topics.ingest, backlog, STRICT_TENANTS)
    api = StrictApi(TokenBucket(rate, burst))
    name = f"strict-{rate:g}-{burst:g}"
    with worker_pool(d, feedback, api.handle, 1, STRICT_CONCURRENCY, options):
        egress = EgressWatch(bootstrap, d.topics.egress)
        cleanup.append(egress.close)
        scheduler = start_scheduler(
            d,
            workdir,
            name,
            ["--rate", f"{rate:g}", "--burst", f"{burst:g}", "--feedback-topic", feedback],
            cleanup,
        )

        def done() -> bool:
            _check(scheduler)
            calls = api.snapshot()
            return bool(calls) and time.time() >= calls[0].started + window[1] + 0.5

        wait_until(done, window[1] + 120, f"{name}: {window[1]:g} s of calls", interval=0.2)
        calls = api.snapshot()
        visible = dict(egress.visible)
    row = {
        "rate": rate,
        "burst": burst,
        "playout_delay": used,
        "backlog_records": backlog,
        **measure_strict(calls, visible, rate, burst, window),
    }
    log(f"{name}: {json.dumps(row)}")
    return row


# -- the quiet tenants: slow workers, a queueing API ----------------------------------------------


@dataclass(slots=True)
class Taken:
    """One call as the API saw it."""

    tenant: str
    sent: float | None  # the quiet producer's send time (epoch s), None for the noisy tenant
    taken: float  # when the API took it: the handler's start, or a slot's
    ended: float | None = None


@dataclass
class QuietApi:
    """The API behind the quiet-tenant scenarios: every call takes ``call_s``; with
    ``slots``, at most that many run at once and the rest wait in the API's FIFO."""

    call_s: float
    slots: SlotQueue | None
    calls: list[Taken] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle(self, request: Request) -> None:
        await self.serve(request.tenant, _sent(request.payload))

    async def serve(self, tenant: str, sent: float | None) -> None:
        """One call: a slot (waiting in the FIFO when there are ``slots``), then the call."""
        if self.slots is not None:
            await self.slots.acquire()
        try:
            call = Taken(tenant, sent, time.time())
            with self._lock:
                self.calls.append(call)
            await asyncio.sleep(self.call_s)  # the remote call
            call.ended = time.time()
        finally:
            if self.slots is not None:
                self.slots.release()

    def call(self, tenant: str, payload: bytes) -> None:
        """The same call from a plain consumer's thread (no API queue: ``slots`` None)."""
        call = Taken(tenant, _sent(payload), time.time())
        with self._lock:
            self.calls.append(call)
        time.sleep(self.call_s)  # the remote call
        call.ended = time.time()

    def snapshot(self) -> list[Taken]:
        with self._lock:
            return list(self.calls)


@contextlib.contextmanager
def api_server(api: QuietApi) -> Iterator[str]:
    """``api`` as a TCP server on a thread of this process, for workers in other processes
    (the Faust workers): one call per connection, a line ``<tenant> <sent epoch s or ->``
    answered ``ok`` when the call is over, so the callers share one API and its FIFO.
    Yields its address (``host:port``)."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    address: list[str] = []

    async def call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            tenant, sent = (await reader.readline()).decode().split()
            await api.serve(tenant, None if sent == "-" else float(sent))
            writer.write(b"ok\n")
            await writer.drain()
        except (ConnectionError, ValueError) as exc:
            log(f"the API refused a malformed or dropped call: {exc!r}")
        finally:
            writer.close()

    def run() -> None:
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(asyncio.start_server(call, "127.0.0.1", 0))
        host, port = server.sockets[0].getsockname()[:2]
        address.append(f"{host}:{port}")
        started.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            loop.run_until_complete(server.wait_closed())
            loop.close()

    thread = threading.Thread(target=run, daemon=True, name="api-server")
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the API server did not start")
    try:
        yield address[0]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@contextlib.contextmanager
def plain_pool(d: Deployment, api: QuietApi, count: int, group: str) -> Iterator[None]:
    """``count`` plain confluent-kafka consumers of ``group`` on threads, owning every
    egress partition when this yields: each takes one record at a time, calls the API and
    commits the record's offset after the call, and sends no feedback (the scheduler learns
    their pace from the group's committed offsets: ``--egress-group``)."""
    stop = threading.Event()
    errors: list[str] = []
    owned: dict[int, int] = {}

    def run(index: int) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": d.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )

        def assigned(_c: Consumer, parts: list[TopicPartition]) -> None:
            owned[index] = owned.get(index, 0) + len(parts)

        def revoked(_c: Consumer, parts: list[TopicPartition]) -> None:
            owned[index] = owned.get(index, 0) - len(parts)

        consumer.subscribe([d.topics.egress], on_assign=assigned, on_revoke=revoked)
        try:
            while not stop.is_set():
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        errors.append(msg.error().str())
                    continue
                api.call((msg.key() or b"").decode(), msg.value() or b"")
                consumer.commit(message=msg, asynchronous=False)
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            consumer.close()

    threads = [
        threading.Thread(target=run, args=(i,), daemon=True, name=f"plain-{i}")
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    try:
        wait_until(
            lambda: (
                partitions_shared([owned.get(i, 0) for i in range(count)], d.partitions)
                or bool(errors)
            ),
            90,
            "the plain consumers share every egress partition",
        )
        if errors:
            raise RuntimeError(f"a plain consumer failed: {errors[0]}")
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    if errors:
        raise RuntimeError(f"a plain consumer failed: {errors[0]}")


@contextlib.contextmanager
def faust_pool(
    d: Deployment, feedback: str, set_up: QuietSetUp, workdir: Path, api: str | None = None
) -> Iterator[Callable[[], list[Taken]]]:
    """``set_up.workers`` Faust workers (``benchmarks.faust_quiet_app``, one app id: one
    consumer group) as processes, sharing the egress partitions (``partitions_shared``)
    when this yields a function that reads the calls they logged so far; stopped when the
    block ends. A call's end is its start plus the call time (the handler sleeps it).
    ``api``: the address of an ``api_server`` their handlers call instead (it logs the
    calls as it takes them; the handlers' own logs then hold when they called it)."""
    app_id = unique("api-view-faust")
    logs = [workdir / f"{app_id}-{i}.calls" for i in range(set_up.workers)]
    outputs = [workdir / f"{app_id}-{i}.log" for i in range(set_up.workers)]
    procs: list[subprocess.Popen[bytes]] = []

    def alive() -> None:
        for proc, out in zip(procs, outputs, strict=True):
            exited(proc, out, "a Faust worker")

    admin = AdminClient({"bootstrap.servers": d.bootstrap})

    def shared() -> bool:
        alive()
        try:
            group = admin.describe_consumer_groups([app_id])[app_id].result(10)
        except KafkaException:
            return False  # not there yet
        owned = [
            sum(1 for tp in m.assignment.topic_partitions if tp.topic == d.topics.egress)
            for m in group.members
        ]
        return len(owned) == set_up.workers and partitions_shared(owned, d.partitions)

    def calls() -> list[Taken]:
        taken: list[Taken] = []
        for path in logs:
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                at, tenant, sent = line.split()
                start = float(at)
                taken.append(
                    Taken(
                        tenant, None if sent == "-" else float(sent), start, start + set_up.call_s
                    )
                )
        return sorted(taken, key=lambda c: c.taken)

    try:
        for i in range(set_up.workers):
            env = {
                "KAFKA_BOOTSTRAP_SERVERS": d.bootstrap,
                "FAIRSTREAM_EGRESS_TOPIC": d.topics.egress,
                "FAIRSTREAM_DLQ_TOPIC": d.topics.dlq,
                "FAIRSTREAM_FEEDBACK_TOPIC": feedback,
                "BENCH_APP_ID": app_id,
                "BENCH_DATADIR": str(workdir / f"{app_id}-{i}.data"),
                "BENCH_CALLS_LOG": str(logs[i]),
                "BENCH_CALL_S": f"{set_up.call_s:g}",
                "BENCH_MAX_IN_FLIGHT": str(set_up.concurrency),
                **({"BENCH_API": api} if api is not None else {}),
            }
            procs.append(
                faust_worker("benchmarks.faust_quiet_app", env, outputs[i], "--without-web")
            )
        wait_until(shared, 120, "the Faust workers share every egress partition", interval=0.5)
        yield calls
    finally:
        for proc in procs:  # SIGTERM to all first: they leave the group together
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            stop_process(proc)


@contextlib.contextmanager
def _faust_behind_server(
    d: Deployment, feedback: str, set_up: QuietSetUp, workdir: Path, api: QuietApi
) -> Iterator[None]:
    with api_server(api) as address, faust_pool(d, feedback, set_up, workdir, address):
        yield


def _sent(payload: bytes) -> float | None:
    """The send time a quiet record carries (``q <epoch s> <n>``), None for other records."""
    if not payload.startswith(b"q "):
        return None
    return float(payload.split()[1])


def _quiet_traffic(
    bootstrap: str,
    topic: str,
    tenants: list[str],
    t0: float,
    seconds: float,
    stop: threading.Event,
    sent: list[float],
) -> None:
    """Each quiet tenant sends one record a second from ``t0`` for ``seconds``, the tenants
    spread over each second; the send times go into the payloads and ``sent``."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 1, "partitioner": "murmur2_random"}
    )
    for step in range(int(seconds)):
        for k, tenant in enumerate(tenants):
            at = t0 + step + k / len(tenants)
            if stop.wait(max(0.0, at - time.time())):
                producer.flush(10)
                return
            stamp = b"%.6f" % time.time()
            producer.produce(topic, key=tenant.encode(), value=b"q %s %d" % (stamp, step))
            sent.append(float(stamp))  # as the payload says it: the key measure_quiet matches
            producer.poll(0)
    producer.flush(30)


def _noisy(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"}
    )
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=NOISY.encode(), value=b"n %d" % i)
                break
            except BufferError:  # a --noisy backlog past the client's queue: let it drain
                producer.poll(0.1)
        if i % 1000 == 999:
            producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("noisy records not acknowledged by the broker")


def measure_quiet(
    calls: Sequence[Taken],
    sent: Sequence[float],
    set_up: QuietSetUp,
    begin: float,
    end: float,
    deadline: float,
    scheduled: Sequence[float],
) -> dict[str, Any]:
    """A quiet-tenant run's figures over the traffic window [begin, end); ``deadline``: the
    drain deadline; ``scheduled``: the egress stamps (epoch s)."""
    quiet: dict[float, Taken] = {}
    for c in calls:  # a redelivered record (a rebalance) counts at its first call
        if c.sent is not None:
            quiet.setdefault(c.sent, c)
    allowance = end + set_up.call_s + TARGET_EXTRA_WAIT_S
    waits: list[float] = []
    unserved_at_end = unserved = 0
    for at in sent:
        call = quiet.get(at)
        taken = call.taken if call is not None and call.taken <= deadline else None
        unserved_at_end += taken is None or taken > allowance
        unserved += taken is None
        # Never taken: the wait it had at the deadline, a lower bound.
        waits.append((deadline if taken is None else taken) - at)
    wait = stats(waits)
    intervals = [(c.taken, c.ended if c.ended is not None else deadline) for c in calls]
    stamps = sorted(scheduled)
    started = sorted(c.taken for c in calls)
    return {
        "window_s": round(end - begin, 1),
        "quiet_sent": len(sent),
        "quiet_wait": wait,
        "quiet_wait_censored": unserved,  # waits that are lower bounds
        "quiet_p99_less_call_s": None if wait is None else round(wait["p99_s"] - set_up.call_s, 3),
        "quiet_unserved_at_end": unserved_at_end,
        "quiet_unserved_at_deadline": unserved,
        "busy": round(busy_fraction(intervals, begin, end, set_up.capacity), 3),
        "calls_per_s": round(count_in(started, begin, end) / (end - begin), 1),
        "noisy_calls": sum(1 for c in calls if c.sent is None and begin <= c.taken < end),
        "egress_per_s": round(count_in(stamps, begin, end) / (end - begin), 1),
        # Released by the scheduler but not yet taken by the API at the window's end: where
        # the scheduler can no longer reorder them (egress, the workers, the API's FIFO).
        "downstream_at_end": count_in(stamps, 0.0, end) - count_in(started, 0.0, end),
    }


def run_quiet(
    bootstrap: str,
    workdir: Path,
    scenario: str,
    sizes: dict[str, Any],
    playout: str,
    cleanup: list[Callable[[], None]],
    scheduler_args: Sequence[str] = (),
) -> dict[str, Any]:
    """slow-workers or queueing-api (see the module docstring); ``scheduler_args``: more
    options for the scheduler (``--egress-spread key``, say)."""
    set_up = QUIET_SETUPS[scenario]
    options, used = playout_options(playout)
    d, feedback = deployment_with_feedback(bootstrap, f"apiview-{scenario}", cleanup)
    tenants = [k for p in range(PARTITIONS) for k in keys_for("quiet", p, 2, PARTITIONS)]
    api = QuietApi(set_up.call_s, None if set_up.slots is None else SlotQueue(set_up.slots))
    seconds: float = sizes["quiet_s"]
    sent: list[float] = []
    group = unique(f"api-view-{scenario}")
    pool: contextlib.AbstractContextManager[Any]
    if set_up.plain:
        pool = plain_pool(d, api, set_up.workers, group)
    elif set_up.faust and set_up.slots is not None:
        # The API's slots and FIFO are one, across the Faust processes: a server here.
        pool = _faust_behind_server(d, feedback, set_up, workdir, api)
    elif set_up.faust:
        pool = faust_pool(d, feedback, set_up, workdir)
    else:
        pool = worker_pool(d, feedback, api.handle, set_up.workers, set_up.concurrency, options)
    # Plain consumers report nothing: the scheduler reads their group's committed offsets.
    credit = ["--egress-group", group] if set_up.plain else []
    if set_up.plain:
        used = "none (plain consumers call on arrival)"
    elif set_up.faust:
        used = "the Faust agent's default"
    with pool as running:
        # The Faust workers log their calls in files of their own; the others call ``api``.
        taken: Callable[[], list[Taken]] = (
            cast(Callable[[], list[Taken]], running)
            if set_up.faust and set_up.slots is None
            else api.snapshot
        )
        egress = EgressWatch(bootstrap, d.topics.egress)
        cleanup.append(egress.close)
        scheduler = start_scheduler(
            d,
            workdir,
            scenario,
            ["--rate", f"{QUIET_RATE:g}", "--feedback-topic", feedback, *credit, *scheduler_args],
            cleanup,
        )
        scheduler.wait_ready(timeout=120)
        _noisy(bootstrap, d.topics.ingest, sizes["noisy"])
        stop = threading.Event()
        t0 = time.time() + 0.5
        quiet = threading.Thread(
            target=_quiet_traffic,
            args=(bootstrap, d.topics.ingest, tenants, t0, seconds, stop, sent),
            daemon=True,
        )
        quiet.start()
        end = t0 + seconds
        deadline = end + sizes["drain_s"]
        in_log = [0.0]  # the most records seen waiting in the ingest log (a tenant far behind)
        try:

            def drained() -> bool:
                _check(scheduler)
                in_log[0] = max(in_log[0], metrics(scheduler).get(IN_LOG, 0.0))
                if time.time() < end:
                    return False
                # Distinct requests: a record redelivered at a rebalance is called twice.
                served = {c.sent for c in taken() if c.sent is not None}
                return len(served) >= len(sent)

            with contextlib.suppress(AssertionError):  # the deadline passed: say who waits
                wait_until(drained, deadline - time.time(), "quiet drained", interval=0.2)
        finally:
            stop.set()
            quiet.join(15)
        calls = taken()
        scheduled = list(egress.scheduled)
    result = {
        "scenario": scenario,
        "rate": QUIET_RATE,
        "consumers": (
            "plain, --egress-group" if set_up.plain else "Faust" if set_up.faust else "Worker"
        ),
        "workers": set_up.workers,
        "concurrency": set_up.concurrency,
        "call_s": set_up.call_s,
        "api_slots": set_up.slots,
        "noisy_records": sizes["noisy"],
        "noisy_in_log_max": int(in_log[0]),
        "quiet_tenants": len(tenants),
        "drain_s": sizes["drain_s"],
        "playout_delay": used,
        "scheduler_args": " ".join(scheduler_args),
        **measure_quiet(calls, sent, set_up, t0, end, deadline, scheduled),
    }
    log(f"{scenario}: {json.dumps(result)}")
    return result


# -- the phase and the report ------------------------------------------------------------------


def _one(key: str, runs: dict[str, Any], run: Callable[[list[Callable[[], None]]], Any]) -> None:
    """``run`` with clean-up steps of its own; a failure is recorded, not raised, so one
    failed run does not lose the others' numbers."""
    undo: list[Callable[[], None]] = []
    try:
        runs[key] = {"status": "ok", **run(undo)}
    except Exception as exc:
        log(f"{key} failed: {exc!r}")
        runs[key] = {"status": "error", "error": repr(exc)[:300]}
    finally:
        for step in reversed(undo):
            try:
                step()
            except Exception as exc:  # one step's failure must not skip the others
                log(f"{key} clean-up: {exc!r}")


def phase(
    bootstrap: str,
    workdir: Path,
    quick: bool,
    _cleanup: list[Callable[[], None]] | None = None,
    scenarios: Sequence[str] = SCENARIOS,
    rows: Sequence[tuple[float, float]] = STRICT_ROWS,
    playout: str = "default",
    scheduler_args: Sequence[str] = (),
    noisy: int | None = None,
) -> dict[str, Any]:
    """Every scenario asked for; each run cleans up after itself. ``scheduler_args`` go to
    the quiet scenarios' scheduler; ``noisy``: the noisy tenant's backlog instead of the
    size's default."""
    sizes = _sizes(quick)
    if noisy is not None:
        sizes["noisy"] = noisy
    strict: dict[str, Any] = {}
    quiet: dict[str, Any] = {}
    for scenario in scenarios:
        if scenario == "strict":
            for rate, burst in rows:
                row = functools.partial(run_strict, bootstrap, workdir, rate, burst, sizes, playout)
                _one(f"{rate:g}/{burst:g}", strict, row)
        else:
            run = functools.partial(
                run_quiet,
                bootstrap,
                workdir,
                scenario,
                sizes,
                playout,
                scheduler_args=scheduler_args,
            )
            _one(scenario, quiet, run)
    return {"status": "ok", "quick": quick, "strict": strict, "quiet": quiet}


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _s(stats_: dict[str, float] | None, key: str, bound: bool = False) -> str:
    return "-" if not stats_ else f"{'>=' if bound else ''}{stats_[key]:.3f}"


def report(result: dict[str, Any]) -> list[str]:
    """The figures as lines, each target beside its number."""
    lines: list[str] = []
    strict = result.get("strict") or {}
    if strict:
        lines += [
            "strict API: token bucket = the scheduler's --rate/--burst; 1 Worker x concurrency "
            f"{STRICT_CONCURRENCY}; targets: refused <= {TARGET_REFUSED:.0%}, accepted >= "
            f"{TARGET_ACCEPTED}x R",
            "  R/B        | playout delay | started/s | refused (target)  | accepted/R (target)"
            " | refused at stamps (gaps < 1/R) | start-stamp p50/p99/max s"
            " | visible-stamp p50/p99/max s",
        ]
        for key, row in strict.items():
            if row.get("status") != "ok":
                lines.append(f"  {key:<10} | failed: {row.get('error')}")
                continue
            start, seen = row["start_after_stamp"], row["visible_after_stamp"]
            lines.append(
                f"  {key:<10} | {row['playout_delay']:<13} | {row['started_per_s']:>9.1f} | "
                f"{row['refused']:>6.1%} ({_met(row['refused'] <= TARGET_REFUSED)}) | "
                f"{row['accepted_of_rate']:.3f}x "
                f"({_met(row['accepted_of_rate'] >= TARGET_ACCEPTED)}) | "
                f"{row['refused_at_stamps']:.1%} ({row['stamp_gaps_short']:.1%}) | "
                f"{_s(start, 'p50_s')}/{_s(start, 'p99_s')}/{_s(start, 'max_s')} | "
                f"{_s(seen, 'p50_s')}/{_s(seen, 'p99_s')}/{_s(seen, 'max_s')}"
            )
    for key, run in (result.get("quiet") or {}).items():
        if run.get("status") != "ok":
            lines.append(f"{key}: failed: {run.get('error')}")
            continue
        wait, censored = run["quiet_wait"], run["quiet_wait_censored"] > 0
        p99 = None if wait is None else wait["p99_s"]
        target = run["call_s"] + TARGET_EXTRA_WAIT_S
        slots = f"{run['api_slots']} API slots" if run["api_slots"] else "no API queue"
        lines += [
            f"{key}: --rate {run['rate']:g}; {run['workers']} {who(run)} x concurrency "
            f"{run['concurrency']} x {run['call_s']:g} s calls, {slots}; {run['noisy_records']:,}"
            f" noisy records"
            + (
                f" (up to {run['noisy_in_log_max']:,} waiting in the ingest log)"
                if run.get("noisy_in_log_max")
                else ""
            )
            + f", {run['quiet_sent']} quiet requests ({run['quiet_tenants']} tenants)"
            f" over {run['window_s']:g} s; playout delay {run['playout_delay']}"
            + (f"; scheduler {run['scheduler_args']}" if run.get("scheduler_args") else ""),
            f"  quiet wait, arrival to the API taking it: p50 {_s(wait, 'p50_s', censored)} s, "
            f"p99 {_s(wait, 'p99_s', censored)} s, max {_s(wait, 'max_s', censored)} s; p99 - "
            f"call {run['quiet_p99_less_call_s']} s (target p99 <= {target:g} s: "
            f"{_met(p99 is not None and not censored and p99 <= target)})",
            f"  quiet not taken by the window's end + {target:g} s: "
            f"{run['quiet_unserved_at_end']} of {run['quiet_sent']}; by the drain deadline "
            f"(+{run['drain_s']:g} s): {run['quiet_unserved_at_deadline']} "
            f"(target 0: {_met(run['quiet_unserved_at_deadline'] == 0)})",
            f"  API busy {run['busy']:.3f}x (target >= {TARGET_BUSY}: "
            f"{_met(run['busy'] >= TARGET_BUSY)}); calls {run['calls_per_s']:g}/s, egress "
            f"{run['egress_per_s']:g}/s, released but not taken at the end: "
            f"{run['downstream_at_end']:,}",
        ]
    return lines


def who(run: dict[str, Any]) -> str:
    """The consumers a quiet run had, as words."""
    consumers = run.get("consumers", "Worker")
    if consumers == "Worker":
        return "Workers"
    if consumers == "Faust":
        return "Faust workers (PaidApiAgent, max_in_flight)"
    return "plain consumers (--egress-group, no feedback)"


def _rows(rate: float | None, burst: float | None) -> tuple[tuple[float, float], ...]:
    if rate is None and burst is None:
        return STRICT_ROWS
    if rate is None or burst is None:
        raise SystemExit("--rate and --burst go together (a strict row)")
    return ((rate, burst),)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--scenario", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--rate", type=float, help="strict: one row at this rate (with --burst)")
    parser.add_argument("--burst", type=float, help="strict: one row's bucket size")
    parser.add_argument(
        "--playout-delay",
        default="default",
        help="seconds, or off: start on arrival (default: the Worker's default)",
    )
    parser.add_argument(
        "--scheduler-args",
        default="",
        help="more scheduler options for the quiet scenarios, as one string",
    )
    parser.add_argument(
        "--noisy",
        type=int,
        help="the quiet scenarios' noisy backlog, in records (default 5,000; --quick 3,000): "
        "past 20,000 at --rate 100 it is far behind, and the rest waits in the ingest log",
    )
    parser.add_argument("--json", type=Path, help="write the JSON here instead of stdout")
    args = parser.parse_args()
    if args.noisy is not None and args.noisy < 1:
        parser.error("--noisy: at least one record")
    scenarios = [s.strip() for s in args.scenario.split(",") if s.strip()]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s) {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    rows = _rows(args.rate, args.burst)
    playout_options(args.playout_delay)  # a bad value fails now, not after a run
    broker = Broker.find(args.bootstrap)
    workdir = Path(tempfile.mkdtemp(prefix="fairstream-api-view-"))
    try:
        result = phase(
            broker.bootstrap,
            workdir,
            args.quick,
            None,
            scenarios,
            rows,
            args.playout_delay,
            shlex.split(args.scheduler_args),
            args.noisy,
        )
    finally:
        broker.stop()
    results = {"api_view": result}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    else:
        print(json.dumps(results, indent=2))
    print("\n".join(report(result)))


# -- run_all's "api_view" phase: its targets and its table in docs/benchmarks.md --------------


def targets(results: dict[str, Any]) -> list[Row]:
    """The "api_view" phase's target rows: per strict row, refused <= 1% and accepted >=
    0.97x R; per quiet-tenant scenario, quiet p99 <= the call time + 0.5 s (a censored p99,
    a lower bound, does not meet it), no quiet request untaken by the drain deadline, and the
    API busy >= 0.95x."""
    out: list[Row] = []
    for key, row in (get(results, "api_view", "strict") or {}).items():
        if row.get("status") != "ok":
            continue
        refused, accepted = row["refused"], row["accepted_of_rate"]
        out += [
            (
                f"API view, strict bucket R/B {key}: refused <= {TARGET_REFUSED:.0%}",
                f"{refused:.1%} ({row['started_per_s']:g} calls/s; playout delay "
                f"{row['playout_delay']})",
                refused <= TARGET_REFUSED,
                f"{abs(refused - TARGET_REFUSED) * 100:.1f} points",
            ),
            (
                f"API view, strict bucket R/B {key}: accepted >= {TARGET_ACCEPTED}x R",
                f"{accepted:.3f}x ({row['accepted_per_s']:g}/s of {row['rate']:g})",
                accepted >= TARGET_ACCEPTED,
                f"{abs(accepted - TARGET_ACCEPTED):.3f}x",
            ),
        ]
    for key, run in (get(results, "api_view", "quiet") or {}).items():
        if run.get("status") != "ok":
            continue
        wait, censored = run["quiet_wait"], run["quiet_wait_censored"]
        bound = run["call_s"] + TARGET_EXTRA_WAIT_S
        p99 = None if wait is None else wait["p99_s"]
        unserved, busy = run["quiet_unserved_at_deadline"], run["busy"]
        out += [
            (
                f"API view, {key}: quiet p99 wait <= the call time + {TARGET_EXTRA_WAIT_S:g} s "
                f"({bound:g} s)",
                "no quiet request sent"
                if p99 is None
                else f"{'>= ' if censored else ''}{p99:.3f} s ({censored} of "
                f"{run['quiet_sent']} never taken; playout delay {run['playout_delay']})",
                p99 is not None and not censored and p99 <= bound,
                "" if p99 is None else f"{abs(bound - p99):.3f} s",
            ),
            (
                f"API view, {key}: every quiet request taken by the drain deadline "
                f"(+{run['drain_s']:g} s)",
                f"{unserved} of {run['quiet_sent']} not taken",
                unserved == 0,
                "",
            ),
            (
                f"API view, {key}: API busy >= {TARGET_BUSY}x",
                f"{busy:.3f}x ({run['calls_per_s']:g} calls/s)",
                busy >= TARGET_BUSY,
                f"{abs(busy - TARGET_BUSY):.3f}x",
            ),
        ]
    return out


def _seconds3(stats_: dict[str, float] | None, bound: bool = False) -> str:
    """p50 / p99 / max in seconds, ``>=`` before each when they are lower bounds."""
    if not stats_:
        return "-"
    mark = ">= " if bound else ""
    return " / ".join(f"{mark}{stats_[k]:.3f}" for k in ("p50_s", "p99_s", "max_s"))


def table(results: dict[str, Any]) -> list[str]:
    """The "The paid API's view" tables of docs/benchmarks.md (nothing when the phase did
    not run)."""
    r = get(results, "api_view")
    if not r:
        return []
    if r.get("status") != "ok":
        return ["", f"**The paid API's view**: failed: {str(r.get('error'))[:200]}"]
    lines: list[str] = []
    strict = r.get("strict") or {}
    if strict:
        lines += [
            "",
            "**The paid API's view, a strict bucket** (a token bucket of R calls/s holding B, "
            f"the scheduler at `--rate R --burst B`; one Worker x {STRICT_CONCURRENCY}; a "
            "backlog always waiting; over a steady window after the first call; refused at "
            "stamps: what the bucket would refuse had every call started at its "
            "`fairstream-scheduled-ms`, and the share of stamp gaps under 1/R; "
            "`benchmarks/api_view.py`):",
            "",
            "| R/B | playout delay | calls started | refused | accepted / R | refused at stamps "
            "(gaps < 1/R) | start after stamp p50 / p99 / max | visible after stamp p50 / p99 "
            "/ max |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for key, row in strict.items():
            if row.get("status") != "ok":
                lines.append(failed_row(key, row.get("error"), 8))
                continue
            lines.append(
                f"| {key} | {row['playout_delay']} | {row['started_per_s']:g}/s | "
                f"{row['refused']:.1%} | {row['accepted_of_rate']:.3f}x | "
                f"{row['refused_at_stamps']:.1%} ({row['stamp_gaps_short']:.1%}) | "
                f"{_seconds3(row['start_after_stamp'])} s | "
                f"{_seconds3(row['visible_after_stamp'])} s |"
            )
    quiet = r.get("quiet") or {}
    if quiet:
        lines += [
            "",
            f"**The paid API's view, quiet tenants** (`--rate {QUIET_RATE:g}`; one noisy "
            f"tenant's backlog and {QUIET_TENANTS} quiet tenants at 1 request/s; wait: from the "
            "quiet producer's send to the API taking the call, `>=` where some were never "
            "taken; not taken: by the window's end + the call time + "
            f"{TARGET_EXTRA_WAIT_S:g} s, and by the drain deadline; busy: call time over the "
            "slots' capacity; `benchmarks/api_view.py`):",
            "",
            "| scenario | workers x concurrency x call | API slots | playout delay | quiet "
            "requests | quiet wait p50 / p99 / max | p99 - call | not taken (end / deadline) "
            "| API busy | calls | egress |",
            "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for key, run in quiet.items():
            if run.get("status") != "ok":
                lines.append(failed_row(key, run.get("error"), 11))
                continue
            censored = run["quiet_wait_censored"] > 0
            wait = _seconds3(run["quiet_wait"], censored)
            less = run["quiet_p99_less_call_s"]
            less_call = "-" if less is None else f"{'>= ' if censored else ''}{less:.3f} s"
            lines.append(
                f"| {key} | {run['workers']} x {run['concurrency']} x {run['call_s']:g} s | "
                f"{run['api_slots'] or '-'} | {run['playout_delay']} | {run['quiet_sent']} | "
                f"{wait} s | {less_call} | "
                f"{run['quiet_unserved_at_end']} / {run['quiet_unserved_at_deadline']} | "
                f"{run['busy']:.3f}x | {run['calls_per_s']:g}/s | {run['egress_per_s']:g}/s |"
            )
    return lines


if __name__ == "__main__":
    main()
