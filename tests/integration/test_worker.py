"""The worker SDK against a real broker: retries, dead letters, commits, dedup, ordering,
async handlers, kill -9 and SIGTERM of a ``fairstream worker`` process.

Records are written straight to a fresh egress topic with a plain producer (no scheduler).
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

from fairstream import Request, wire
from fairstream_dev.harness.kafka import consume, wait_until
from tests.integration.workers import (
    REPO,
    Setup,
    committed,
    egress_record,
    feed,
    running,
)


def test_flaky_handler_is_retried_then_committed(kafka_bootstrap: str) -> None:
    s = Setup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record("acme", "r-1", b"hello")])
    attempts: list[int] = []
    seen: list[Request] = []

    def handler(request: Request) -> None:
        attempts.append(request.attempt)
        if len(attempts) <= 2:
            raise RuntimeError("flaky upstream")
        seen.append(request)

    with running(s.worker(handler)) as worker:
        s.wait_committed([1])
    assert attempts == [1, 2, 3]
    assert len(seen) == 1
    request = seen[0]
    assert (request.tenant, request.payload, request.request_id, request.cost) == (
        "acme",
        b"hello",
        "r-1",
        3,
    )
    assert (request.enqueued_ms, request.scheduled_ms, request.offset) == (1000, 2000, 0)
    assert request.header("trace") == b"\x00t"
    assert worker.stats.processed == 1
    assert worker.stats.failed_attempts == 2
    assert worker.stats.dead_lettered == 0


def test_always_failing_handler_dead_letters_after_max_attempts(kafka_bootstrap: str) -> None:
    s = Setup(kafka_bootstrap)
    bad = egress_record("acme", "r-bad", b"\x00poison\xff")
    feed(kafka_bootstrap, s.egress, [bad, egress_record("acme", "r-ok", b"fine")])
    calls: list[tuple[str, int]] = []

    def handler(request: Request) -> None:
        calls.append((request.request_id, request.attempt))
        if request.payload.startswith(b"\x00poison"):
            raise ValueError("upstream said 422: prompt too long")

    with running(s.worker(handler, max_attempts=3)) as worker:
        s.wait_committed([2])
    assert calls == [("r-bad", 1), ("r-bad", 2), ("r-bad", 3), ("r-ok", 1)]
    assert worker.stats.dead_lettered == 1
    [dead] = consume(kafka_bootstrap, s.dlq, 1)
    assert dead.key() == b"acme"
    assert dead.value() == b"\x00poison\xff"
    headers = dead.headers()
    assert headers[: len(bad["headers"])] == bad["headers"]  # the original ones, in order
    extra = dict(headers[len(bad["headers"]) :])
    assert extra[wire.DLQ_REASON] == wire.HANDLER_FAILED.encode()
    detail = extra[wire.DLQ_DETAIL].decode()
    assert "ValueError: upstream said 422: prompt too long" in detail
    assert "3 time" in detail


def test_repeated_request_id_is_skipped_and_committed(kafka_bootstrap: str) -> None:
    s = Setup(kafka_bootstrap)
    records = [
        egress_record("acme", "r-1", b"one"),
        egress_record("acme", "r-2", b"two"),
        egress_record("acme", "r-1", b"one again (a scheduler crash re-sent it)"),
        egress_record("zeta", "r-3", b"three"),
    ]
    feed(kafka_bootstrap, s.egress, records)
    handled: list[str] = []
    with running(s.worker(lambda r: handled.append(r.request_id), dedup_window=100)) as worker:
        s.wait_committed([4])
    assert handled == ["r-1", "r-2", "r-3"]
    assert worker.stats.duplicates_skipped == 1


def test_dedup_off_handles_every_record(kafka_bootstrap: str) -> None:
    s = Setup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record("acme", "r-1", b"x")] * 2)
    handled: list[str] = []
    with running(s.worker(lambda r: handled.append(r.request_id), dedup_window=None)):
        s.wait_committed([2])
    assert handled == ["r-1", "r-1"]


def test_completion_ordering_runs_a_tenant_one_at_a_time_in_order(kafka_bootstrap: str) -> None:
    s = Setup(kafka_bootstrap, partitions=2)
    tenants = [f"t{i}" for i in range(6)]
    per_tenant = 15
    records = []
    for n in range(per_tenant):
        for i, t in enumerate(tenants):
            # Several tenants share each partition, so the partition order alone proves
            # nothing: the worker must keep each tenant's order itself.
            records.append({**egress_record(t, f"{t}-{n}", str(n).encode()), "partition": i % 2})
    feed(kafka_bootstrap, s.egress, records)
    lock = threading.Lock()
    active: dict[str, int] = {}
    order: dict[str, list[int]] = {t: [] for t in tenants}
    overlap = {"max": 0, "same_tenant": 0}

    def handler(request: Request) -> None:
        with lock:
            active[request.tenant] = active.get(request.tenant, 0) + 1
            if active[request.tenant] > 1:
                overlap["same_tenant"] += 1
            overlap["max"] = max(overlap["max"], sum(active.values()))
            order[request.tenant].append(int(request.payload))
        # Uneven durations would reorder a tenant's records if two could run at once. CRC32,
        # not hash(): the same durations in every process, whatever PYTHONHASHSEED is.
        time.sleep(0.002 * (zlib.crc32(request.request_id.encode()) % 5))
        with lock:
            active[request.tenant] -= 1

    with running(s.worker(handler, concurrency=4, ordering="completion")):
        s.wait_committed([per_tenant * 3, per_tenant * 3])
    assert overlap["same_tenant"] == 0
    assert overlap["max"] > 1, "concurrency 4 never ran two handlers at once"
    assert overlap["max"] <= 4
    for t in tenants:
        assert order[t] == list(range(per_tenant)), t


def test_async_handler_runs_on_the_workers_loop(kafka_bootstrap: str) -> None:
    s = Setup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record(f"t{i}", f"r{i}", b"x") for i in range(8)])
    state = {"running": 0, "max": 0, "calls": 0}

    async def handler(request: Request) -> None:
        state["running"] += 1
        state["max"] = max(state["max"], state["running"])
        if state["calls"] == 0:
            state["calls"] += 1
            state["running"] -= 1
            raise ConnectionError("first call fails")  # async handlers retry too
        state["calls"] += 1
        await asyncio.sleep(0.05)
        state["running"] -= 1

    with running(s.worker(handler, concurrency=4)) as worker:
        s.wait_committed([8])
    assert worker.stats.processed == 8
    assert worker.stats.failed_attempts == 1
    assert state["max"] > 1  # coroutines of different tenants overlapped


HANDLER_MODULE = """
import os, time

def handle(request):
    time.sleep(float(os.environ.get("SLOW", "0")))
    with open(os.environ["OUT"], "a") as f:
        f.write(f"{request.request_id} {request.partition} {request.offset}\\n")
"""


class WorkerProcess:
    def __init__(self, s: Setup, workdir: Path, out: Path, name: str, slow: float) -> None:
        self.log = workdir / f"{name}.log"
        (workdir / "slowhandler.py").write_text(HANDLER_MODULE)
        env = {**os.environ, "OUT": str(out), "SLOW": str(slow), "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        env["FAIRSTREAM_BOOTSTRAP"] = s.bootstrap  # the environment works like the flags
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fairstream",
                    "worker",
                    "--handler",
                    "slowhandler:handle",
                    "--egress-topic",
                    s.egress,
                    "--dlq-topic",
                    s.dlq,
                    "--group-id",
                    s.group,
                    "--session-timeout",
                    "6",
                ],
                cwd=workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


def lines(out: Path) -> list[tuple[str, int, int]]:
    if not out.exists():
        return []
    rows = []
    for line in out.read_text().splitlines():
        rid, partition, offset = line.split()
        rows.append((rid, int(partition), int(offset)))
    return rows


def test_kill_9_mid_stream_loses_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
    s = Setup(kafka_bootstrap, partitions=2)
    total = 300
    records = [
        {**egress_record(f"t{i % 5}", f"r{i}", b"x"), "partition": i % 2} for i in range(total)
    ]
    feed(kafka_bootstrap, s.egress, records)
    out = tmp_path / "processed.txt"
    first = WorkerProcess(s, tmp_path, out, "first", slow=0.02)
    wait_until(
        lambda: len(lines(out)) >= 60, 60, lambda: f"first worker progressing:\n{first.tail()}"
    )
    wait_until(
        lambda: sum(max(o, 0) for o in committed(kafka_bootstrap, s.group, s.egress, 2)) > 0,
        30,
        "a first commit before the kill",
    )
    first.proc.kill()  # SIGKILL: no shutdown, no final commit
    first.proc.wait()
    before = lines(out)
    at_kill = [max(o, 0) for o in committed(kafka_bootstrap, s.group, s.egress, 2)]

    second = WorkerProcess(s, tmp_path, out, "second", slow=0)
    try:
        wait_until(
            lambda: {r[0] for r in lines(out)} >= {f"r{i}" for i in range(total)},
            90,
            lambda: f"every record processed; second worker:\n{second.tail()}",
        )
        s.wait_committed([total // 2, total // 2])
    finally:
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(30) == 0, second.tail()
    rows = lines(out)
    seen: dict[str, int] = {}
    for rid, _, _ in rows:
        seen[rid] = seen.get(rid, 0) + 1
    repeated = {rid for rid, n in seen.items() if n > 1}
    assert all(n <= 2 for n in seen.values())
    # Repeats are exactly records the first worker finished but had not committed yet.
    uncommitted_done = {rid for rid, p, o in before if o >= at_kill[p]}
    assert repeated == uncommitted_done


def test_sigterm_finishes_in_flight_and_commits_what_was_processed(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    s = Setup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record("acme", f"r{i}", b"x") for i in range(200)])
    out = tmp_path / "processed.txt"
    proc = WorkerProcess(s, tmp_path, out, "w", slow=0.05)
    wait_until(lambda: len(lines(out)) >= 10, 60, lambda: f"worker progressing:\n{proc.tail()}")
    proc.proc.send_signal(signal.SIGTERM)
    assert proc.proc.wait(30) == 0, proc.tail()
    done = lines(out)
    assert len(done) < 200
    # Everything processed is committed, and nothing past it: a restart repeats nothing.
    assert s.committed() == [len(done)]
    assert [o for _, _, o in done] == list(range(len(done)))


def test_rebalance_hands_over_without_loss(kafka_bootstrap: str) -> None:
    """A second worker joins mid-stream: the first commits what it finished and gives up
    its queued records at once, which the new owner processes. Only a record whose handler
    was still running at the revoke may be handled twice (at most one per running handler);
    nothing is lost.

    The first worker's handlers hold after 20 records until the second worker owns a
    partition, so the rebalance falls mid-stream by construction, on any machine."""
    s = Setup(kafka_bootstrap, partitions=2)
    total = 400
    records = [
        {**egress_record(f"t{i % 4}", f"r{i}", b"x"), "partition": i % 2} for i in range(total)
    ]
    feed(kafka_bootstrap, s.egress, records)
    lock = threading.Lock()
    handled: list[str] = []
    joined = threading.Event()  # set once the second worker owns a partition

    def held(request: Request) -> None:
        with lock:
            hold = len(handled) >= 20
        if hold:
            joined.wait(120)  # in flight across the revoke, like a slow upstream call
        with lock:
            handled.append(request.request_id)

    def fast(request: Request) -> None:
        with lock:
            handled.append(request.request_id)

    first = s.worker(held, concurrency=2)
    second = s.worker(fast, concurrency=2)
    try:
        with running(first):
            wait_until(lambda: len(handled) >= 20, 60, "first worker progressing")
            with running(second):
                wait_until(lambda: second.assignment, 60, "second worker got a partition")
                joined.set()
                s.wait_committed([total // 2, total // 2])
    finally:
        joined.set()
    assert set(handled) == {f"r{i}" for i in range(total)}
    repeated = [rid for rid, n in collections.Counter(handled).items() if n > 1]
    assert len(handled) - total == len(repeated) <= 2  # concurrency=2 handlers were running
    assert second.stats.processed > 0
    assert first.stats.abandoned > 0  # it did hand queued records over


def group_members(bootstrap: str, group: str) -> list[tuple[str, str, list[int]]] | None:
    """(member id, client id, partitions) of a stable group's members, else None."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(timeout=15)
    if description.state != ConsumerGroupState.STABLE:
        return None
    return sorted(
        (
            m.member_id,
            m.client_id,
            sorted(tp.partition for tp in (m.assignment.topic_partitions if m.assignment else [])),
        )
        for m in description.members
    )


def test_revoke_with_a_slow_handler_returns_at_once_and_stays_in_the_group(
    kafka_bootstrap: str,
) -> None:
    """A second worker joins while the first one's handlers hang in slow calls, for longer
    than max.poll.interval.ms: the revoke callback does not wait for them, so the first
    worker keeps its membership (same member id), the second one works meanwhile, and
    nothing is lost. Only the record running at the revoke on the partition that moved is
    handled twice (at-least-once); the one on the partition that came back runs once."""
    s = Setup(kafka_bootstrap, partitions=2)
    per_partition = 30
    feed(
        kafka_bootstrap,
        s.egress,
        [
            {**egress_record(f"t{p}", f"p{p}-{i}", b"x"), "partition": p}
            for i in range(per_partition)
            for p in (0, 1)
        ],
    )
    release = threading.Event()
    lock = threading.Lock()
    started: list[str] = []
    handled: list[str] = []

    def slow(request: Request) -> None:
        with lock:
            started.append(request.request_id)
        release.wait(180)  # set by the test once the group settled without this worker's help
        with lock:
            handled.append(request.request_id)

    def fast(request: Request) -> None:
        with lock:
            handled.append(request.request_id)

    # A revoke callback that drained the hanging handlers would outlast this (the group's
    # rebalance timeout too) and get the first worker evicted.
    strict = {"max.poll.interval.ms": 7000}
    # One call per tenant, so one slow call per partition (ordering="start" could run both
    # of one partition's first records).
    first = s.worker(
        slow,
        concurrency=2,
        ordering="completion",
        session_timeout=6,
        consumer_config={**strict, "client.id": "first"},
    )
    second = s.worker(
        fast,
        concurrency=2,
        ordering="completion",
        session_timeout=6,
        consumer_config={**strict, "client.id": "second"},
    )
    try:
        with running(first):
            wait_until(lambda: len(started) >= 2, 60, "the first worker's two slow calls")
            alone = wait_until(
                lambda: group_members(kafka_bootstrap, s.group), 60, "a stable group of one"
            )
            [(first_id, _, both)] = alone
            assert both == [0, 1]
            with running(second):
                settled = wait_until(
                    lambda: (m := group_members(kafka_bootstrap, s.group)) and len(m) == 2 and m,
                    60,
                    "a stable group of two",
                )
                by_client = {client: (member, parts) for member, client, parts in settled}
                assert by_client["first"][0] == first_id, "the first worker was evicted"
                [kept] = by_client["first"][1]
                [moved] = by_client["second"][1]
                # The second worker finished its partition while the slow calls still hang;
                # the first one committed nothing past them (0: the revoke's commit).
                s.wait_committed([per_partition if p == moved else 0 for p in (0, 1)])
                assert not release.is_set()
                release.set()
                s.wait_committed([per_partition, per_partition])
                members = group_members(kafka_bootstrap, s.group)
                assert members is not None
                assert first_id in {member for member, _, _ in members}
    finally:
        release.set()
    everything = {f"p{p}-{i}" for p in (0, 1) for i in range(per_partition)}
    assert set(handled) == everything
    repeated = {rid for rid in handled if handled.count(rid) > 1}
    assert repeated == {f"p{moved}-0"}
    assert f"p{kept}-0" in handled
    assert first.stats.duplicates_skipped == 1  # p{kept}-0, fetched again after the revoke
    assert first.stats.abandoned > 0  # the queued records it gave up at the revoke


METRICS_HANDLER = """
def handle(request):
    if request.payload == b"bad":
        raise RuntimeError("upstream said 500")
"""


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """{sample name: {sorted labels: value}} of a /metrics page."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_worker_metrics_scraped_over_http(kafka_bootstrap: str, tmp_path: Path) -> None:
    from fairstream_dev.kafka import free_port

    s = Setup(kafka_bootstrap)
    tenants = [f"t{i:02d}" for i in range(25)]
    records = [egress_record(t, f"{t}-{n}", b"ok") for n in range(2) for t in tenants]
    records += [egress_record("t00", f"bad-{n}", b"bad") for n in range(2)]
    # t00 has the most records and t01..t24 as many each: 20 named series and __other__.
    records += [egress_record("t00", f"t00-extra-{n}", b"ok") for n in range(3)]
    feed(kafka_bootstrap, s.egress, records)
    good = len(records) - 2
    (tmp_path / "metricshandler.py").write_text(METRICS_HANDLER)
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "FAIRSTREAM_BOOTSTRAP": s.bootstrap}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    log_path = tmp_path / "worker.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fairstream",
                "worker",
                "--handler",
                "metricshandler:handle",
                "--egress-topic",
                s.egress,
                "--dlq-topic",
                s.dlq,
                "--group-id",
                s.group,
                "--max-attempts",
                "3",
                "--backoff-initial",
                "0.01",
                "--backoff-max",
                "0.05",
                "--metrics-port",
                str(port),
                "--metrics-host",
                "127.0.0.1",
            ],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}/metrics"

    def finished() -> dict[str, dict[tuple[tuple[str, str], ...], float]] | None:
        try:
            samples = scrape(url)
        except OSError:
            return None  # not listening yet
        done = samples.get("fairstream_worker_handled_records_total", {}).get((), 0)
        dead = sum(samples.get("fairstream_worker_dead_letters_total", {}).values())
        return samples if done == good and dead == 2 else None

    try:
        samples = wait_until(
            finished, 90, lambda: f"every record handled or dead-lettered:\n{log_path.read_text()}"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, log_path.read_text()

    def one(name: str) -> float:
        return samples[name][()]

    assert one("fairstream_worker_retries_total") == 4  # 2 records x (3 attempts - 1)
    assert one("fairstream_worker_rate_limited_total") == 0
    assert samples["fairstream_worker_dead_letters_total"] == {(("reason", "handler-failed"),): 2}
    assert one("fairstream_worker_in_flight_records") == 0
    assert one("fairstream_worker_running_handlers") == 0
    assert one("fairstream_worker_assigned_partitions") == 1
    assert one("fairstream_worker_handler_seconds_count") == good + 2 * 3
    per_tenant = {
        dict(labels)["tenant"]: value
        for labels, value in samples["fairstream_worker_tenant_handled_records_total"].items()
    }
    assert len(per_tenant) == 21  # the top 20 tenants and __other__, not 25
    assert per_tenant["t00"] == 5
    assert sum(per_tenant.values()) == good
    assert per_tenant["__other__"] == 5 * 2  # the 5 tenants beyond the top 20
    dead = {
        dict(labels)["tenant"]: value
        for labels, value in samples["fairstream_worker_tenant_dead_letters_total"].items()
    }
    assert dead == {"t00": 2, "__other__": 0}
    assert f"metrics on {url}" in log_path.read_text()
