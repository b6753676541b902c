"""Issue 20, "What it must show", item 3, on the real broker: concurrency limits.

1. ``--max-concurrency 20``, 1 s calls, no ``--rate``: the API holds at most 20 calls in
   flight, at least 18 on average while a backlog waits (with a worker that starts each
   call as it reads it; through ``fairstream.Worker`` and an async handler at least 16,
   as its consumer batches reads for up to 0.1 s).
2. A tenant's policy ``max_concurrency=2`` holds, while a tenant without one goes past 2.
3. Weights 3:1 under ``--max-concurrency 20`` come out about 3:1 in calls in flight.
4. A worker killed with -9 mid-call: the slots its calls held come back within the lease
   (``--concurrency-lease 3``), with no completion from anywhere, and everything is done
   once another worker takes over.

The SDK's Worker on main runs one call per tenant at a time (the worker-sdk branch lifts
that), so 1. spreads the backlog over 40 tenants, and 2.-4. use ``SlotWorker``
(``fairstream_dev.harness.slots``): a read_committed consumer that starts every record's
call at once and writes the feedback record a Worker writes for a settled request.
The counts come from the API's side (``CallLog``: every start and end, and samples of the
calls in flight every 50 ms), never from timings.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fairstream import Request
from fairstream.adapters.admin import create_topics
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.paid_api import FEEDBACK, feedback_loop
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess
from fairstream_dev.harness.slots import CallLog, Sampler, SlotWorker
from tests.integration.policies import produce, set_policy

REPO = Path(__file__).resolve().parents[2]


def metric(scheduler: SchedulerProcess, name: str) -> float | None:
    status, body = scheduler.get("/metrics")
    if status != 200:
        return None
    for line in body.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


def mean(values: list[float]) -> float:
    assert values, "no samples in the window"
    return sum(values) / len(values)


# -- 2.-4. the per-tenant limit, weights, a worker killed: SlotWorker -------------------------


@contextmanager
def slot_loop(
    bootstrap: str,
    workdir: Path,
    *scheduler_args: str,
    latency: float,
    policies: dict[str, dict[str, object]] | None = None,
    worker: bool = True,
    cost_factor: float | None = None,
) -> Iterator[tuple[Deployment, str, SchedulerProcess, CallLog, str]]:
    """Topics, policies, a scheduler run with ``scheduler_args`` and the feedback topic,
    and (``worker``) a SlotWorker thread of group ``<group>`` calling for ``latency`` s
    (reporting measured costs of ``cost_factor`` x the declared ones, if given)."""
    deployment = Deployment(bootstrap, partitions=4)
    feedback = unique("fs-feedback")
    create_topics(bootstrap, deployment.topics, 4, deployment.app_id, feedback_topic=feedback)
    for tenant, fields in (policies or {}).items():
        set_policy(bootstrap, deployment.topics.policy, tenant.encode(), **fields)
    group = unique("slot-workers")
    log = CallLog()
    scheduler = SchedulerProcess(deployment, workdir, "--feedback-topic", feedback, *scheduler_args)
    slot_worker: SlotWorker | None = None
    thread: threading.Thread | None = None
    try:
        if worker:
            slot_worker = SlotWorker(
                bootstrap,
                deployment.topics.egress,
                feedback,
                group,
                latency,
                log,
                cost_factor=cost_factor,
            )
            thread = threading.Thread(target=slot_worker.run, daemon=True, name="slot-worker")
            thread.start()
            wait_until(slot_worker.assigned.is_set, 60, "the slot worker joined its group")
        scheduler.start().wait_ready()
        with Sampler(log):
            yield deployment, feedback, scheduler, log, group
    finally:
        if scheduler.alive():
            scheduler.terminate()
        if slot_worker is not None and thread is not None:
            slot_worker.stop()
            thread.join(30)


def test_a_tenants_limit_of_2_holds(kafka_bootstrap: str, tmp_path: Path) -> None:
    records = 40
    with slot_loop(
        kafka_bootstrap,
        tmp_path,
        latency=0.5,
        policies={"limited": {"max_concurrency": 2}},
    ) as (deployment, _, _scheduler, log, _):
        produce(kafka_bootstrap, deployment.topics.ingest, [b"limited", b"free"], records)
        wait_until(
            lambda: len(log.ended) >= 2 * records,
            120,
            lambda: f"{2 * records} calls done (have {len(log.ended)})",
            interval=0.2,
        )
    print(f"\nper-tenant limit 2: most in flight per tenant {dict(log.max_per_tenant)}")
    assert log.max_per_tenant["limited"] == 2  # reached, never passed
    assert log.max_per_tenant["free"] > 2  # the other tenant is not held to it
    assert sum(t == "limited" for _, t, _ in log.ended) == records


def test_weights_3_to_1_share_the_slots_3_to_1(kafka_bootstrap: str, tmp_path: Path) -> None:
    records = 240
    with slot_loop(
        kafka_bootstrap,
        tmp_path,
        "--max-concurrency",
        "20",
        latency=0.5,
        policies={"heavy": {"weight": 3}, "light": {"weight": 1}},
    ) as (deployment, _, _scheduler, log, _):
        produce(kafka_bootstrap, deployment.topics.ingest, [b"heavy", b"light"], records)
        # While both are backlogged: until heavy's backlog (3/4 of the slots) runs out.
        wait_until(
            lambda: sum(t == "heavy" for _, t, _ in log.started) >= records,
            120,
            lambda: f"heavy's {records} calls started (have {len(log.started)})",
            interval=0.2,
        )
    last_heavy = max(at for at, t, _ in log.started if t == "heavy")
    begin = log.started[0][0] + 1.0
    shares = [per.get("heavy", 0) / n for _, n, per in log.between(begin, last_heavy - 0.5) if n]
    share = mean(shares)
    print(
        f"\nweights 3:1 under --max-concurrency 20: heavy's share of the calls in flight "
        f"{share:.3f} (3:1 is 0.750) over {len(shares)} samples; max in flight "
        f"{log.max_in_flight}"
    )
    assert log.max_in_flight <= 20
    assert 0.68 <= share <= 0.82


def test_a_worker_killed_mid_call_gives_its_slots_back_within_the_lease(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    records, limit = 30, 10
    with slot_loop(
        kafka_bootstrap,
        tmp_path,
        "--max-concurrency",
        str(limit),
        "--concurrency-lease",
        "3",
        latency=0.5,
        worker=False,
    ) as (deployment, feedback, scheduler, log, group):
        # A worker in a process of its own, whose calls take far longer than the lease.
        doomed = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fairstream_dev.harness.slots",
                kafka_bootstrap,
                deployment.topics.egress,
                feedback,
                group,
                "600",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            produce(kafka_bootstrap, deployment.topics.ingest, [b"a", b"b", b"c"], records // 3)
            started: list[str] = []
            assert doomed.stdout is not None
            while len(started) < limit:  # it holds every slot, mid-call
                line = doomed.stdout.readline()
                assert line, "the doomed worker exited"
                if line.startswith("started "):
                    started.append(line.split()[1])
        finally:
            doomed.send_signal(signal.SIGKILL)
            doomed.wait()
        # No worker runs, no completion comes: the leases give the slots back, and the
        # scheduler releases the next records.
        wait_until(
            lambda: (
                (metric(scheduler, "fairstream_concurrency_lease_expired_total") or 0) >= limit
                and (metric(scheduler, "fairstream_egress_records_total") or 0) >= 2 * limit
            ),
            60,
            lambda: (
                "the killed worker's slots expired and the next records went out: "
                + " ".join(
                    f"{n}={metric(scheduler, n)}"
                    for n in (
                        "fairstream_concurrency_lease_expired_total",
                        "fairstream_concurrency_in_flight",
                        "fairstream_egress_records_total",
                    )
                )
            ),
            interval=0.2,
        )
        assert not log.ended  # nothing completed anywhere meanwhile
        # Another worker of the same group takes over once the dead one's session ends,
        # calls what was left undone and what was released since; everything settles.
        successor = SlotWorker(kafka_bootstrap, deployment.topics.egress, feedback, group, 0.5, log)
        thread = threading.Thread(target=successor.run, daemon=True, name="successor")
        thread.start()
        try:
            wait_until(
                lambda: (
                    len({rid for _, _, rid in log.ended}) >= records
                    and metric(scheduler, "fairstream_concurrency_in_flight") == 0
                ),
                120,
                lambda: f"{records} requests done (have {len({r for _, _, r in log.ended})})",
                interval=0.2,
            )
        finally:
            successor.stop()
            thread.join(30)
        expired = metric(scheduler, "fairstream_concurrency_lease_expired_total")
    print(
        f"\nworker killed with -9 holding {limit} slots: {expired:.0f} leases expired; "
        f"all {records} requests done by its successor"
    )
    assert set(started) <= {rid for _, _, rid in log.ended}  # the killed calls were redone


# -- 1. the group limit -------------------------------------------------------------------------

TENANTS = [f"t{i:02d}" for i in range(40)]
PER_TENANT = 8


def check_group_limit(
    log: CallLog, held: list[float], limit: float | None, total: int, what: str, at_least: float
) -> None:
    begin, end = log.busy_window(margin=1.0)
    in_flight = mean([n for _, n, _ in log.between(begin, end)])
    seconds = log.ended[-1][0] - log.started[0][0]
    print(
        f"\n--max-concurrency 20, 1 s calls, {what}: {total} calls in {seconds:.1f} s "
        f"({total / seconds:.1f} calls/s), in flight at the API max {log.max_in_flight}, "
        f"mean {in_flight:.2f} while the backlog lasted; scheduler's slots max {max(held)}"
    )
    assert limit == 20
    assert log.max_in_flight <= 20
    assert max(held) <= 20
    assert len({rid for _, _, rid in log.ended}) == total  # each request called once
    assert in_flight >= at_least


# Alone (serial): the mean in flight is set by how fast a freed slot is filled again
# (feedback, a commit, a fetch), which tests beside it slow.
@pytest.mark.serial
def test_max_concurrency_20_holds_20_calls_in_flight(kafka_bootstrap: str, tmp_path: Path) -> None:
    """A backlog over 40 tenants and a worker that calls every record at once."""
    total = len(TENANTS) * PER_TENANT
    held: list[float] = []
    with slot_loop(kafka_bootstrap, tmp_path, "--max-concurrency", "20", latency=1.0) as (
        deployment,
        _,
        scheduler,
        log,
        _,
    ):
        produce(
            kafka_bootstrap, deployment.topics.ingest, [t.encode() for t in TENANTS], PER_TENANT
        )

        def done() -> bool:
            value = metric(scheduler, "fairstream_concurrency_in_flight")
            if value is not None:
                held.append(value)
            return len(log.ended) >= total

        wait_until(done, 120, lambda: f"{total} calls done (have {len(log.ended)})", interval=0.2)
        limit = metric(scheduler, "fairstream_concurrency_limit")
    check_group_limit(log, held, limit, total, "SlotWorker", at_least=18)


# Alone (serial): the mean in flight is set by how fast a freed slot is filled again
# (feedback, a commit, a fetch), which tests beside it slow.
@pytest.mark.serial
def test_max_concurrency_20_through_the_worker_sdk(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The same through ``fairstream.Worker`` and an async handler (one call per tenant at
    a time on main: 40 tenants, so that 20 slots find 20 tenants to call for)."""
    log = CallLog()

    async def call(request: Request) -> None:
        log.start(request.tenant, request.request_id)
        try:
            await asyncio.sleep(1.0)  # the paid API's latency
        finally:
            log.end(request.tenant, request.request_id)

    total = len(TENANTS) * PER_TENANT
    held: list[float] = []
    with (
        feedback_loop(
            kafka_bootstrap,
            tmp_path,
            call,
            "--max-concurrency",
            "20",
            "--feedback-topic",
            FEEDBACK,
            concurrency=64,
        ) as loop,
        Sampler(log),
    ):
        loop.produce(dict.fromkeys(TENANTS, PER_TENANT))

        def done() -> bool:
            value = metric(loop.scheduler, "fairstream_concurrency_in_flight")
            if value is not None:
                held.append(value)
            return len(log.ended) >= total

        wait_until(done, 120, lambda: f"{total} calls done (have {len(log.ended)})", interval=0.2)
        limit = metric(loop.scheduler, "fairstream_concurrency_limit")
    # The SDK's consumer on main asks librdkafka for 500 records with a 0.1 s timeout, and
    # librdkafka waits out the whole timeout unless 500 come: each call starts up to 0.1 s
    # after its release (measured: 0.094 s on average), which costs about a tenth of the
    # slots. The 18 of the issue is held by the worker that starts calls at once (above).
    check_group_limit(log, held, limit, total, "fairstream.Worker", at_least=16)


def test_two_instances_split_the_group_limit(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Two schedulers of one group, 2 of the 4 ingest partitions each: 10 slots each, never
    more than 20 calls in flight at the API together."""
    deployment = Deployment(kafka_bootstrap, partitions=4)
    feedback = unique("fs-feedback")
    create_topics(kafka_bootstrap, deployment.topics, 4, deployment.app_id, feedback_topic=feedback)
    log = CallLog()
    worker = SlotWorker(
        kafka_bootstrap, deployment.topics.egress, feedback, unique("slot-workers"), 0.5, log
    )
    thread = threading.Thread(target=worker.run, daemon=True, name="slot-worker")
    args = ("--feedback-topic", feedback, "--max-concurrency", "20")
    schedulers = [
        SchedulerProcess(deployment, tmp_path, *args, name=f"sched-{i}") for i in range(2)
    ]
    total = len(TENANTS) * 6
    try:
        thread.start()
        wait_until(worker.assigned.is_set, 60, "the slot worker joined its group")
        for scheduler in schedulers:
            scheduler.start()
        for scheduler in schedulers:
            scheduler.wait_ready()
        wait_until(
            lambda: [metric(s, "fairstream_concurrency_limit") for s in schedulers] == [10, 10],
            60,
            lambda: (
                f"10 slots each: {[metric(s, 'fairstream_concurrency_limit') for s in schedulers]}"
            ),
            interval=0.2,
        )
        with Sampler(log):
            produce(kafka_bootstrap, deployment.topics.ingest, [t.encode() for t in TENANTS], 6)
            wait_until(
                lambda: len({rid for _, _, rid in log.ended}) >= total,
                120,
                lambda: f"{total} calls done (have {len(log.ended)})",
                interval=0.2,
            )
    finally:
        for scheduler in schedulers:
            if scheduler.alive():
                scheduler.terminate()
        worker.stop()
        thread.join(30)
    print(f"\ntwo instances, --max-concurrency 20: max in flight {log.max_in_flight}")
    assert log.max_in_flight <= 20
