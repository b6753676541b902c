"""The Worker's intake on its event loop (``Handling._enqueue``): a fetched batch is taken in
whole before any of it starts, so records that arrived after their moment start in the order
of their start stamps, whatever partition each came from. Broker-free: the batch is handed
to the loop as the consumer thread hands it."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from fairstream import Request, Worker
from fairstream.sdk.worker.jobs import Job
from fairstream.sdk.worker.tracking import CommitPosition

NOW = 1_000.0  # the worker's wall clock (epoch s)


def late_job(progress: CommitPosition, partition: int, offset: int, start_ms: int) -> Job:
    """A record of tenant ``t`` stamped ``start_ms``, long before ``NOW``: late."""
    progress.add(offset)
    request = Request(
        tenant="t",
        payload=b"",
        request_id=f"r-{start_ms}",
        cost=1,
        headers=(),
        enqueued_ms=None,
        scheduled_ms=start_ms,
        deadline_ms=None,
        topic="egress",
        partition=partition,
        offset=offset,
        start_ms=start_ms,
    )
    return Job(request, b"t", b"", progress)


def test_a_batch_of_late_records_from_three_partitions_starts_in_stamp_order() -> None:
    started: list[int] = []

    async def api(request: Request) -> None:
        assert request.start_ms is not None
        started.append(request.start_ms)

    worker = Worker(
        api,
        bootstrap="localhost:9",  # never contacted: no consumer runs
        egress_topic="egress",
        group_id="g",
        feedback_topic=None,
        concurrency=1,
        wall_clock=lambda: NOW,
    )
    # One tenant's records spread over three partitions (stamps 1-6 ms past a second
    # before NOW), in a batch as fetched: partition by partition.
    progress = [CommitPosition() for _ in range(3)]
    stamps = {0: [1, 4], 1: [2, 5], 2: [3, 6]}
    base_ms = int((NOW - 1.0) * 1000)
    batch = [
        late_job(progress[p], p, i, base_ms + stamp)
        for p, part_stamps in stamps.items()
        for i, stamp in enumerate(part_stamps)
    ]

    async def run() -> None:
        worker._loop = asyncio.get_running_loop()
        worker._wakeup = asyncio.Event()
        worker._ended = asyncio.Event()
        worker._pool = ThreadPoolExecutor(1)
        worker._enqueue(batch)
        async with asyncio.timeout(10):
            while len(started) < len(batch):
                await asyncio.sleep(0.01)

    asyncio.run(run())
    assert started == sorted(started) == [base_ms + s for s in range(1, 7)]
