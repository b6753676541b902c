"""The worker's two orderings against a real broker: with ``ordering="start"`` (the
default) one backlogged tenant keeps every ``concurrency`` slot busy, its calls start in
egress order and finish in any order, and offsets are still committed only below what is
done, through a kill -9, a stop and a rebalance, and a rate-limited record holds up
nothing else of its tenant; with ``ordering="completion"`` a tenant runs one call at a time
and a rate-limited record holds up the tenant's later ones.

Records are written straight to a fresh egress topic with a plain producer (no scheduler).
Every assertion is on counts and orders, none on durations: the handlers hold their calls
on conditions (how many calls are in flight, whether another call finished), never on time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fairstream import RateLimited, Request, Worker
from fairstream.sdk.worker.tracking import Ordering
from fairstream_dev.harness.kafka import wait_until
from tests.integration.workers import REPO, Setup, committed, egress_record, feed, running


class Cohorts:
    """An async handler that holds each call until ``size`` calls are held at once (or no
    record is left to start), then lets them all go: every trip is a moment when ``size``
    calls of the tenant were in flight together. A worker that ran fewer at once would
    never trip; the bounded wait turns that into a counted failure, not a hang."""

    def __init__(self, size: int, total: int) -> None:
        self.size = size
        self.total = total
        self.started: list[int] = []  # offsets, in the order the calls started
        self.trips: list[int] = []  # calls let go at each trip
        self.timeouts = 0
        self.active = 0
        self.peak = 0
        self._held = 0
        self._gate: asyncio.Event | None = None

    async def __call__(self, request: Request) -> None:
        self.started.append(request.offset)
        self.active += 1
        self.peak = max(self.peak, self.active)
        if self._gate is None:
            self._gate = asyncio.Event()
        gate = self._gate
        self._held += 1
        if self._held == self.size or len(self.started) == self.total:
            self.trips.append(self._held)
            self._held = 0
            self._gate = None
            gate.set()
        try:
            await asyncio.wait_for(gate.wait(), 60)
        except TimeoutError:
            self.timeouts += 1
        self.active -= 1


def test_start_ordering_keeps_every_slot_busy_for_one_backlogged_tenant(
    kafka_bootstrap: str,
) -> None:
    s = Setup(kafka_bootstrap)
    total, concurrency = 200, 16
    feed(kafka_bootstrap, s.egress, [egress_record("big", f"r{i}", b"x") for i in range(total)])
    handler = Cohorts(concurrency, total)
    with running(s.worker(handler, concurrency=concurrency)) as worker:  # the default ordering
        s.wait_committed([total])
    assert worker.ordering == "start"
    assert handler.timeouts == 0
    # 12 times 16 calls of the one tenant in flight at once, then the last 8.
    assert handler.trips == [concurrency] * (total // concurrency) + [total % concurrency]
    assert handler.peak == concurrency
    assert handler.started == list(range(total))  # started in egress order
    assert worker.stats.processed == total


def test_completion_ordering_keeps_one_call_per_tenant(kafka_bootstrap: str) -> None:
    s = Setup(kafka_bootstrap)
    per_tenant = 40
    records = [
        egress_record(t, f"{t}-{n}", str(n).encode()) for n in range(per_tenant) for t in "ab"
    ]
    feed(kafka_bootstrap, s.egress, records)
    active: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    finished: dict[str, list[int]] = {"a": [], "b": []}

    async def handler(request: Request) -> None:
        active[request.tenant] += 1
        peak[request.tenant] = max(peak[request.tenant], active[request.tenant])
        # Hand the loop over: a second call of the tenant, if the worker started one, would
        # run now and be counted.
        for _ in range(3):
            await asyncio.sleep(0)
        finished[request.tenant].append(int(request.payload))
        active[request.tenant] -= 1

    with running(s.worker(handler, concurrency=8, ordering="completion")) as worker:
        s.wait_committed([2 * per_tenant])
    assert peak == {"a": 1, "b": 1}
    assert finished == {"a": list(range(per_tenant)), "b": list(range(per_tenant))}
    assert worker.stats.processed == 2 * per_tenant


def test_unknown_ordering_is_refused() -> None:
    with pytest.raises(ValueError, match="ordering must be one of start, completion"):
        Worker(lambda r: None, bootstrap="127.0.0.1:1", ordering="per-tenant")  # type: ignore[arg-type]


# A handler for `fairstream worker` processes: async, many calls of a tenant in flight; every
# fifth record of a tenant (r<n>, n % 20 == 0) waits until the tenant's next record (r<n+4>)
# finished, so calls finish out of egress order by construction. One whole line per finished
# call (one os.write on an O_APPEND descriptor), so that a kill -9 leaves whole lines only.
OUT_OF_ORDER_HANDLER = """
import asyncio, os

_finished = {}
_fd = os.open(os.environ["OUT"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def _event(rid):
    return _finished.setdefault(rid, asyncio.Event())


async def handle(request):
    n = int(request.request_id[1:])
    if n % 20 == 0:
        try:
            await asyncio.wait_for(_event(f"r{n + 4}").wait(), 10)
        except TimeoutError:
            pass
    else:
        await asyncio.sleep(0.05 + 0.05 * (n % 3))  # so that a kill comes mid-way
    os.write(_fd, f"{request.request_id} {request.partition} {request.offset}\\n".encode())
    _event(request.request_id).set()
"""


def read_lines(out: Path) -> list[tuple[str, int, int]]:
    if not out.exists():
        return []
    rows = []
    for line in out.read_text().splitlines():
        rid, partition, offset = line.split()
        rows.append((rid, int(partition), int(offset)))
    return rows


def start_worker(
    s: Setup, workdir: Path, out: Path, name: str
) -> tuple[subprocess.Popen[bytes], Path]:
    log = workdir / f"{name}.log"
    (workdir / "outoforder.py").write_text(OUT_OF_ORDER_HANDLER)
    env = {
        **os.environ,
        "OUT": str(out),
        "PYTHONUNBUFFERED": "1",
        "FAIRSTREAM_BOOTSTRAP": s.bootstrap,
        "FAIRSTREAM_WORKER_ORDERING": "start",  # the variable works like --ordering
        "FAIRSTREAM_WORKER_CONCURRENCY": "16",
    }
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    with log.open("ab") as handle:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fairstream",
                "worker",
                "--handler",
                "outoforder:handle",
                "--egress-topic",
                s.egress,
                "--dlq-topic",
                s.dlq,
                "--group-id",
                s.group,
                "--session-timeout",
                "6",
                "--no-feedback",
            ],
            cwd=workdir,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
        )
    return proc, log


def tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-30:])


def test_kill_9_with_many_calls_in_flight_commits_only_below_what_is_done(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Calls finish out of order (16 in flight, 4 tenants on 2 partitions); a kill -9
    mid-way: every record below the committed offsets had finished; a second worker then
    handles the rest, and the only records handled twice are ones the first finished at or
    above the committed offsets (at-least-once, recognisable by request id)."""
    s = Setup(kafka_bootstrap, partitions=2)
    total = 1000
    records = [
        {**egress_record(f"t{i % 4}", f"r{i}", b"x"), "partition": i % 2} for i in range(total)
    ]
    feed(kafka_bootstrap, s.egress, records)
    out = tmp_path / "finished.txt"
    first, first_log = start_worker(s, tmp_path, out, "first")
    try:
        wait_until(
            lambda: len(read_lines(out)) >= 100,
            90,
            lambda: f"first worker progressing:\n{tail(first_log)}",
        )
        wait_until(
            lambda: min(committed(kafka_bootstrap, s.group, s.egress, 2)) > 0,
            30,
            "a commit on both partitions before the kill",
        )
    finally:
        first.kill()  # SIGKILL: no drain, no final commit
        first.wait()
    before = read_lines(out)
    at_kill = committed(kafka_bootstrap, s.group, s.egress, 2)
    assert len(before) < total, "the first worker finished everything before the kill"
    done_before = {(p, o) for _, p, o in before}
    for partition in (0, 1):
        assert all((partition, o) in done_before for o in range(at_kill[partition])), partition
    # The calls did finish out of egress order: r<n> after r<n + 4>, for n % 20 == 0.
    position = {rid: i for i, (rid, _, _) in enumerate(before)}
    overtaken = [n for n in range(0, total, 20) if f"r{n}" in position and f"r{n + 4}" in position]
    assert overtaken
    assert all(position[f"r{n}"] > position[f"r{n + 4}"] for n in overtaken)

    second, second_log = start_worker(s, tmp_path, out, "second")
    try:
        wait_until(
            lambda: {r[0] for r in read_lines(out)} >= {f"r{i}" for i in range(total)},
            120,
            lambda: f"every record finished; second worker:\n{tail(second_log)}",
        )
        s.wait_committed([total // 2, total // 2])
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0, tail(second_log)
    seen = Counter(rid for rid, _, _ in read_lines(out))
    assert set(seen) == {f"r{i}" for i in range(total)}
    assert max(seen.values()) <= 2
    repeated = {rid for rid, n in seen.items() if n > 1}
    finished_uncommitted = {rid for rid, p, o in before if o >= at_kill[p]}
    assert repeated == finished_uncommitted


def test_stop_with_many_calls_in_flight_commits_exactly_what_finished(
    kafka_bootstrap: str,
) -> None:
    """stop() mid-way with 16 calls of one tenant in flight: the running calls finish, the
    queued records are left, and the committed offset is exactly the number finished (calls
    start in egress order, so what finished is a prefix), with nothing below it unfinished."""
    s = Setup(kafka_bootstrap)
    total = 300
    feed(kafka_bootstrap, s.egress, [egress_record("big", f"r{i}", b"x") for i in range(total)])
    lock = threading.Lock()
    finished: list[int] = []
    enough = threading.Event()

    async def handler(request: Request) -> None:
        await asyncio.sleep(0.002 * (request.offset % 5))  # finishing out of order
        with lock:
            finished.append(request.offset)
            if len(finished) >= 60:
                enough.set()

    worker = s.worker(handler, concurrency=16)
    with running(worker):
        assert enough.wait(90), "the worker made no progress"
    # running() stopped it: drained, committed, left the group.
    with lock:
        done = sorted(finished)
    assert len(done) < total
    assert done == list(range(len(done)))  # a prefix: nothing below the commit unfinished
    assert s.committed() == [len(done)]
    assert worker.stats.abandoned > 0  # queued records were left for the next owner


def in_flight(worker: Worker) -> float:
    return worker.metrics.registry.get_sample_value("fairstream_worker_in_flight_records") or 0


def test_revoke_with_many_calls_in_flight_runs_a_returning_record_once(
    kafka_bootstrap: str,
) -> None:
    """ordering="start", 2 calls in flight, hanging, when a second worker joins: the records
    running on the partition that moved are handled again by the new owner (at-least-once);
    those on the partition that came back are fetched again and wait for their first run,
    which may still be running beside them with "start", and are not run a second time.

    The hanging calls are let go last-started first, so that a slot frees while the first
    record still hangs: its copy, if on the partition that came back, starts meanwhile."""
    from tests.integration.test_worker import group_members

    s = Setup(kafka_bootstrap, partitions=2)
    per_partition = 30

    def records(p: int) -> list[dict[str, Any]]:
        return [
            {**egress_record(f"t{p}", f"p{p}-{i}", b"x"), "partition": p}
            for i in range(per_partition)
        ]

    # Partition 0 first, so that both hanging calls are of one partition and one tenant:
    # the range assignor gives it back to the first worker (client ids sort "first" before
    # "second"), whose copies of the two records then run beside the first runs.
    feed(kafka_bootstrap, s.egress, records(0))
    lock = threading.Lock()
    hanging: list[tuple[str, int]] = []  # the first two calls: (request id, partition)
    gates: dict[str, threading.Event] = {}
    others = threading.Event()
    by_first: list[str] = []
    handled: list[str] = []

    def slow(request: Request) -> None:
        rid = request.request_id
        with lock:
            if len(hanging) < 2 and rid not in gates:
                hanging.append((rid, request.partition))
                gates[rid] = threading.Event()
            gate = gates.get(rid, others)
        gate.wait(180)
        with lock:
            by_first.append(rid)
            handled.append(rid)

    def fast(request: Request) -> None:
        with lock:
            handled.append(request.request_id)

    strict = {"max.poll.interval.ms": 7000}
    first = s.worker(
        slow, concurrency=2, session_timeout=6, consumer_config={**strict, "client.id": "first"}
    )
    second = s.worker(
        fast, concurrency=2, session_timeout=6, consumer_config={**strict, "client.id": "second"}
    )
    assert first.ordering == "start"
    try:
        with running(first):
            wait_until(lambda: len(hanging) == 2, 60, "the first worker's two slow calls")
            feed(kafka_bootstrap, s.egress, records(1))
            with running(second):
                settled = wait_until(
                    lambda: (m := group_members(kafka_bootstrap, s.group)) and len(m) == 2 and m,
                    60,
                    "a stable group of two",
                )
                by_client = {client: parts for _, client, parts in settled}
                [kept] = by_client["first"]
                [moved] = by_client["second"]
                (early, _), (late, _) = hanging
                # The kept partition's records fetched again (the hanging ones among them,
                # when it is partition 0) beside the two first runs, before either ends.
                wait_until(
                    lambda: in_flight(first) == 2 + per_partition,
                    60,
                    lambda: f"the first worker fetched partition {kept} again",
                )
                gates[late].set()
                wait_until(lambda: late in by_first, 60, "the later hanging call ended")
                gates[early].set()
                others.set()
                s.wait_committed([per_partition, per_partition])
    finally:
        for gate in [*gates.values(), others]:
            gate.set()
    everything = {f"p{p}-{i}" for p in (0, 1) for i in range(per_partition)}
    assert set(handled) == everything
    repeated = {rid for rid in handled if handled.count(rid) > 1}
    assert repeated == {rid for rid, p in hanging if p == moved}
    assert first.stats.duplicates_skipped == sum(1 for _, p in hanging if p == kept)


@pytest.mark.parametrize("ordering", ["start", "completion"])
def test_a_rate_limited_record_holds_up_its_tenant_only_in_completion_order(
    kafka_bootstrap: str, ordering: Ordering
) -> None:
    """The tenant's first record is refused once (``RateLimited``). With "start" the
    tenant's later records go on while it is in progress (its retry is held until all of
    them finished; the commit does not pass it meanwhile). With "completion" none of them
    starts before it succeeded."""
    s = Setup(kafka_bootstrap)
    total = 20
    feed(kafka_bootstrap, s.egress, [egress_record("acme", f"r{i}", b"x") for i in range(total)])
    lock = threading.Lock()
    refused: list[int] = []
    finished: list[str] = []
    others_done = threading.Event()
    at_retry: list[int] = []  # the tenant's other records finished when r0 was retried
    held: list[bool] = []
    committed_while_held: list[int] = []

    def handler(request: Request) -> None:
        if request.request_id == "r0":
            if not refused:
                refused.append(request.attempt)
                raise RateLimited(retry_after=0.01, scope="tenant")
            with lock:
                at_retry.append(len(finished))
            if ordering == "start":
                held.append(others_done.wait(60))
                committed_while_held.extend(s.committed())
        with lock:
            finished.append(request.request_id)
            if len(finished) == total - 1 and "r0" not in finished:
                others_done.set()

    with running(s.worker(handler, concurrency=4, ordering=ordering)) as worker:
        s.wait_committed([total])
    assert refused == [1]
    assert (worker.stats.rate_limited, worker.stats.processed) == (1, total)
    if ordering == "start":
        assert held == [True], "the tenant's other records waited for the rate-limited one"
        assert finished[-1] == "r0"
        assert committed_while_held[0] <= 0  # nothing committed past the unfinished r0
    else:
        assert at_retry == [0]  # nothing of the tenant ran meanwhile
        assert finished == [f"r{i}" for i in range(total)]
