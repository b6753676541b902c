"""The rate where it is promised: on the scheduler's stamps, and at the API's door.

- The egress rate bound at ``--burst 1`` with commits in the way: a backlog waits while the
  scheduler commits every 20 ms (``--commit-interval 0.1``, paced), so the emitter is late
  again and again and catches the missed slots up. Judged on counts over the scheduler's
  own ``fairstream-scheduled-ms`` stamps: every record arrives once, and no window of
  stamps holds more than ``rate x w + burst`` records.
- Paced starts: the same kind of backlog behind the SDK's ``Worker``, judged when each
  handler call starts, as the API sees it: a strict API (a token bucket of ``--rate``
  holding ``--burst``) refuses almost none of the calls, although egress lands a
  transaction at a time. Workers that started calls as batches landed had 37% refused.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fairstream import Request, Worker, wire
from fairstream.sdk.worker.pacing import PLAYOUT_DELAY
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.test_group_shares import wait_for_split
from tests.integration.workers import running

# Counts of calls a strict API refuses, and start times at the API: alone (make test).
pytestmark = [pytest.mark.integration, pytest.mark.serial]

RATE = 100
BURST = 1
RECORDS = 400


def test_egress_stamps_keep_rate_times_window_plus_burst(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=3).create()
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    for i in range(RECORDS):
        producer.produce(deployment.topics.ingest, b"r-%d" % i, b"tenant-%d" % (i % 4))
    assert producer.flush(30) == 0
    scheduler = SchedulerProcess(
        deployment,
        tmp_path,
        "--rate",
        str(RATE),
        "--burst",
        str(BURST),
        "--commit-interval",
        "0.1",
    ).start()
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    try:
        scheduler.wait_ready()
        messages = egress.read_until(RECORDS, 90)
    finally:
        egress.close()
        scheduler.terminate()
    headers = [dict(m.headers() or []) for m in messages]
    ids = Counter(h[wire.REQUEST_ID] for h in headers)
    assert len(ids) == RECORDS
    assert max(ids.values()) == 1
    stamps = sorted(int(h[wire.SCHEDULED_MS]) for h in headers)
    for window_ms in (10, 20, 50, 100, 500, 1000, 2000):
        worst = max(bisect.bisect_left(stamps, s + window_ms) - i for i, s in enumerate(stamps))
        bound = RATE * window_ms / 1000 + BURST
        print(f"window {window_ms} ms: at most {worst} records (bound {bound:g})")
        assert worst <= bound, window_ms


def paced_worker(deployment: Deployment, api: Callable[[Request], Awaitable[None]]) -> Worker:
    """A Worker of a group of its own on ``deployment``'s egress, 8 calls at once, starting
    each at its stamp plus the default playout delay; no feedback."""
    return Worker(
        api,
        bootstrap=deployment.bootstrap,
        egress_topic=deployment.topics.egress,
        dlq_topic=deployment.topics.dlq,
        group_id=unique("paced"),
        concurrency=8,
        feedback_topic=None,
        playout_delay=PLAYOUT_DELAY,
    )


def strictly_refused(starts: list[float], rate: float, burst: float) -> int:
    """How many of the calls started at ``starts`` a strict API would refuse: a token bucket
    of ``rate`` per second holding ``burst``, full at the first call; a call needs a whole
    token, and a refused call takes none."""
    tokens, last, refused = burst, starts[0], 0
    for at in starts:
        tokens = min(burst, tokens + (at - last) * rate)
        last = at
        if tokens >= 1 - 1e-9:
            tokens -= 1
        else:
            refused += 1
    return refused


def test_a_strict_api_refuses_none_of_the_workers_paced_calls(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    rate, burst, calls = 200, 5, 800
    deployment = Deployment(kafka_bootstrap, partitions=3).create()
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    for i in range(2 * calls):  # a backlog that never runs out while calls are counted
        producer.produce(deployment.topics.ingest, b"r-%d" % i, b"tenant-%d" % (i % 4))
    assert producer.flush(30) == 0
    started: list[tuple[float, str, int | None]] = []

    async def api(request: Request) -> None:
        started.append((time.time(), request.tenant, request.start_ms))

    worker = paced_worker(deployment, api)
    scheduler = SchedulerProcess(
        deployment, tmp_path, "--rate", str(rate), "--burst", str(burst)
    ).start()
    try:
        with running(worker):
            scheduler.wait_ready()
            wait_until(
                lambda: len(started) >= calls, 90, lambda: f"{calls} calls (have {len(started)})"
            )
    finally:
        scheduler.terminate()
    counted = started[:calls]
    assert all(start is not None for _, _, start in counted), "every record carries its start"
    starts = [at for at, _, _ in counted]
    refused = strictly_refused(starts, rate, burst)
    print(f"{refused} of {calls} calls refused by a bucket of {rate}/s holding {burst}")
    assert refused <= calls // 100
    # A tenant's calls start in the order of their start stamps.
    stamps: dict[str, list[int]] = defaultdict(list)
    for _, tenant, start in counted:
        assert start is not None
        stamps[tenant].append(start)
    assert all(s == sorted(s) for s in stamps.values())


def test_two_instances_keep_the_group_rate_at_the_call_start(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The group's --rate and --burst hold where the API is with two instances, each pacing
    its share on its own schedule: the merged calls conform to one strict bucket."""
    rate, burst, calls, partitions = 200, 10, 800, 4
    deployment = Deployment(kafka_bootstrap, partitions=partitions).create()
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    for i in range(4000):  # a backlog on every partition that outlasts the count
        producer.produce(deployment.topics.ingest, b"r-%d" % i, b"tenant-%d" % (i % 8))
    assert producer.flush(30) == 0
    started: list[float] = []

    async def api(request: Request) -> None:
        started.append(time.time())

    worker = paced_worker(deployment, api)
    args = ("--rate", str(rate), "--burst", str(burst), "--session-timeout", "6")
    procs = [SchedulerProcess(deployment, tmp_path, *args, name=f"s{i}").start() for i in range(2)]
    try:
        with running(worker):
            for proc in procs:
                proc.wait_ready()
            wait_for_split(procs, partitions)
            # Counted from a second after the split: each instance has its share by then.
            begin = time.time() + 1.0
            wait_until(
                lambda: sum(at >= begin for at in started) >= calls,
                90,
                lambda: f"{calls} calls after the split (have {len(started)})",
            )
    finally:
        for proc in procs:
            proc.terminate()
    counted = sorted(at for at in started if at >= begin)[:calls]
    refused = strictly_refused(counted, rate, burst)
    per_s = (len(counted) - 1) / (counted[-1] - counted[0])
    print(f"two instances: {per_s:.1f} calls/s, {refused} of {calls} refused ({rate}/s, {burst})")
    assert refused <= calls // 100
    assert per_s >= 0.9 * rate  # the whole group rate, with a backlog on both
