"""``--egress-spread backlogged`` on the real broker: a backlogged tenant's records spread
over the egress partitions, so every worker of the group gets some, and its order holds
where it is promised, by the start stamp.

A backlog of one busy tenant and a few quiet records goes through a scheduler under
``--rate`` to two paced ``Worker`` processes' worth of consumers (two Workers, one group,
each owning two of the four egress partitions). Judged:

- egress, read_committed: every record exactly once; the busy tenant's on every partition;
  each tenant's start stamps rise in its ingest order (the scheduler's FIFO, now carried by
  the stamp rather than by one partition's order), and records sharing a stamp (a burst)
  share a partition;
- the workers: every record called, the busy tenant's calls shared by both; each worker
  starts a tenant's calls in the order of their stamps, and none before its stamp plus
  the playout delay (paced starts: what keeps the order across workers, which the test
  prints as the count of pairs started out of stamp order across the two). A record
  fetched after its start time starts at once, after later stamps already begun: that is
  the promise's one exception, and the test tells it by the call having begun after its
  own start time (printed as a count); ``DELAY`` says why it is long.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fairstream import Request, Worker, wire
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.workers import running

pytestmark = pytest.mark.integration

PARTITIONS = 4
RATE = 50  # records/s: stamps 20 ms apart, the test takes a few seconds
BUSY = 160  # the backlogged tenant's records
QUIET = ("quiet-a", "quiet-b", "quiet-c")  # one record each
# The playout delay. Across partitions the stamp keeps a tenant's order only for records
# that arrive within it: one fetched later starts at once, after later stamps fetched from
# another partition on time. The default 0.25 s was outrun once in seven runs on a loaded
# two-core machine; this test is about the order, not the delay's size.
DELAY = 1.0


@dataclass(frozen=True)
class Call:
    worker: int
    started: float  # epoch seconds, when the handler began
    tenant: str
    value: bytes
    start_ms: int
    partition: int


def test_a_backlogged_tenant_spreads_over_the_workers_and_keeps_its_start_order(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=PARTITIONS).create()
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    expected: dict[str, list[bytes]] = {"busy": [b"busy:%d" % i for i in range(BUSY)]}
    for value in expected["busy"]:
        producer.produce(deployment.topics.ingest, value, b"busy")
    for tenant in QUIET:
        expected[tenant] = [f"{tenant}:0".encode()]
        producer.produce(deployment.topics.ingest, expected[tenant][0], tenant.encode())
    assert producer.flush(30) == 0
    total = sum(len(v) for v in expected.values())

    calls: list[Call] = []
    lock = threading.Lock()

    def handler(worker: int) -> Callable[[Request], Awaitable[None]]:
        async def api(request: Request) -> None:
            assert request.start_ms is not None, "under a rate every record has its start"
            call = Call(
                worker,
                time.time(),
                request.tenant,
                request.payload,
                request.start_ms,
                request.partition,
            )
            with lock:
                calls.append(call)

        return api

    group = unique("spread")
    workers = [
        Worker(
            handler(i),
            bootstrap=kafka_bootstrap,
            egress_topic=deployment.topics.egress,
            dlq_topic=deployment.topics.dlq,
            group_id=group,
            concurrency=8,
            feedback_topic=None,
            playout_delay=DELAY,
        )
        for i in range(2)
    ]

    def owned(worker: Worker) -> float:
        return (
            worker.metrics.registry.get_sample_value("fairstream_worker_assigned_partitions") or 0
        )

    scheduler = SchedulerProcess(
        deployment, tmp_path, "--rate", str(RATE), "--egress-spread", "backlogged"
    )
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    try:
        with ExitStack() as stack:
            for worker in workers:
                stack.enter_context(running(worker))
            # Both in the group before any record lands: no rebalance re-delivers one.
            wait_until(
                lambda: [owned(w) for w in workers] == [2, 2],
                60,
                lambda: f"two partitions per worker (have {[owned(w) for w in workers]})",
            )
            scheduler.start().wait_ready()
            messages = egress.read_until(total, 90)
            wait_until(lambda: len(calls) >= total, 60, lambda: f"{total} calls ({len(calls)})")
    finally:
        egress.close()
        scheduler.terminate()

    # Egress, read_committed: each record once, the busy tenant's on every partition.
    values = Counter(m.value() for m in messages)
    assert len(values) == total
    assert max(values.values()) == 1
    assert set(values) == {v for vs in expected.values() for v in vs}
    busy = [m for m in messages if m.key() == b"busy"]
    assert {m.partition() for m in busy} == set(range(PARTITIONS))
    stamps: dict[bytes | None, int] = {}
    for m in messages:
        stamp = dict(m.headers() or []).get(wire.START_MS)
        assert isinstance(stamp, bytes), "under a rate every egress record has its start"
        stamps[m.value()] = int(stamp)
    in_ingest_order = [stamps[v] for v in expected["busy"]]
    assert in_ingest_order == sorted(in_ingest_order)
    # Records released back to back (the burst) share a stamp: those stay on one partition,
    # whose FIFO keeps their order; distinct stamps carry it across partitions.
    on: dict[int, set[int]] = defaultdict(set)
    for m in busy:
        partition = m.partition()
        assert partition is not None
        on[stamps[m.value()]].add(partition)
    assert all(len(partitions) == 1 for partitions in on.values()), on

    # The workers: every record called once, the busy tenant's by both.
    called = Counter(c.value for c in calls)
    assert set(called) == set(values)
    assert max(called.values()) == 1
    assert {c.worker for c in calls if c.tenant == "busy"} == {0, 1}
    for call in calls:  # paced: never before its stamp plus the delay (one host, one clock)
        assert call.started >= call.start_ms / 1000 + DELAY - 0.002, call
    by_worker: dict[tuple[int, str], list[Call]] = defaultdict(list)
    for call in calls:  # appended as the handlers began
        by_worker[call.worker, call.tenant].append(call)
    late: list[Call] = []
    for (index, tenant), begun in by_worker.items():
        for i, call in enumerate(begun):
            after = [earlier for earlier in begun[:i] if earlier.start_ms > call.start_ms]
            if not after:
                continue
            # A call begun after one stamped later: only a record fetched after its own
            # start time may be (it starts at once). One that waited in time is released
            # before any later stamp, so it would have begun by its start plus the delay.
            assert call.started > call.start_ms / 1000 + DELAY, (index, tenant, call, after[0])
            late.append(call)
    # Across the two workers each call starts at its own stamp plus the delay, as each
    # worker's timer fires: the order holds to within their jitter (printed, not judged).
    ordered = [c for c in sorted(calls, key=lambda c: c.started) if c.tenant == "busy"]
    behind = [
        (b.started - a.started) * 1000
        for a, b in itertools.pairwise(ordered)
        if b.start_ms < a.start_ms
    ]
    print(
        f"{len(late)} calls fetched after their start time began after later stamps; "
        f"busy tenant: {Counter(m.partition() for m in busy)} records per egress partition, "
        f"{Counter(c.worker for c in calls if c.tenant == 'busy')} calls per worker; "
        f"{len(behind)} adjacent starts out of stamp order across the two workers, "
        f"{max(behind, default=0.0):.1f} ms apart at most (stamps {1000 // RATE} ms apart)"
    )
