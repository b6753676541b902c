"""Burst scenario (issue 10, "What it must show", item 3): quiet tenants beside a huge burst.

One run, on topics and an app id of its own:

1. An ingest topic of 4 partitions; ``fairstream scheduler --rate 500`` (the harness of
   ``tests/integration/scheduler.py``), waited for until /readyz says ready.
2. 8 quiet tenants send 2 records/s each, two tenants per partition (keys chosen so that
   Kafka's murmur2 partitioner puts them there, and produced with an explicit ``partition=``
   so placement is certain).
3. After a short warm-up, a burst tenant writes N records of 100 B into ONE partition (the
   quiet tenants' partition 0) as fast as confluent-kafka goes: ``produce_batch``, large
   batches, linger, lz4, from one or two writer processes. The achieved write time (first
   produce call to last acknowledgement) is printed: the scenario asks for under 1 s.
4. The quiet tenants go on for ``--after`` seconds (20) after the burst started, then the
   harness waits (at most ``--drain-timeout`` s) until every quiet record is on egress.

A quiet record's dwell is the time a ``read_committed`` egress consumer (assigned to every
egress partition, in this process, on the same clock) receives it minus its ingest
CreateTime. Reported separately for the 4 quiet tenants on the burst's partition and the 4
on the other partitions, over the quiet records created from the burst's first record on,
beside FIFO (one queue) and the ideal fluid schedule (GPS) computed by
``fairstream.reference`` from the same arrivals (quiet CreateTimes, burst records spread over
the times their batches were handed to librdkafka) at the same rate. Targets: quiet p99 at
most 0.5 s on the other partitions, at most 5 s (goal 3 s) on the burst's partition.

A quiet record still missing when the drain wait ends counts with the dwell it had reached
then; a statistic such a record can change is marked as a lower bound (">=").

    .venv/bin/python benchmarks/burst.py [--bootstrap HOST:PORT] [--records 300000,1000000]
        [--rate 500] [--after 20] [--quick] [--json]

Without ``--bootstrap`` (or ``KAFKA_BOOTSTRAP_SERVERS``) the running development broker is
used. ``benchmarks/run_all.py`` runs it as its ``burst`` phase (``phase()``) and puts
``markdown()`` and ``targets()`` into docs/benchmarks.md. Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the harness lives in tests/integration

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from fairstream.config import Topics  # noqa: E402
from fairstream.reference import Arrival, fifo_starts, gps_starts  # noqa: E402
from fairstream_dev.harness.kafka import unique  # noqa: E402
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess  # noqa: E402

PARTITIONS = 4
BURST_PARTITION = 0
QUIET_PER_PARTITION = 2
QUIET_RATE = 2.0  # records/s per quiet tenant
VALUE_SIZE = 100
RATE = 500.0
SIZES = (300_000, 1_000_000)
QUICK_SIZES = (30_000, 100_000)
TARGET_OTHER_P99 = 0.5  # seconds
TARGET_BURST_P99 = 5.0
GOAL_BURST_P99 = 3.0
INGESTED = "fairstream_ingested_records_total"
EGRESS = "fairstream_egress_records_total"
BATCH = 10_000  # records per produce_batch call of a burst writer


def log(message: str) -> None:
    print(f"[burst {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- helpers shared with restart.py -------------------------------------------------------


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default (murmur2) partitioner gives ``key``: Java clients,
    aiokafka, and librdkafka's ``murmur2_random`` agree on it."""
    m, h = 0x5BD1E995, (0x9747B28C ^ len(key)) & 0xFFFFFFFF
    whole = len(key) & ~3
    for i in range(0, whole, 4):
        k = (int.from_bytes(key[i : i + 4], "little") * m) & 0xFFFFFFFF
        k = ((k ^ (k >> 24)) * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = len(key) - whole
    if rest == 3:
        h ^= key[whole + 2] << 16
    if rest >= 2:
        h ^= key[whole + 1] << 8
    if rest >= 1:
        h = ((h ^ key[whole]) * m) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def keys_for(prefix: str, partition: int, count: int, partitions: int = PARTITIONS) -> list[str]:
    """The first ``count`` keys ``<prefix>-<n>`` that murmur2 puts on ``partition``."""
    out: list[str] = []
    n = 0
    while len(out) < count:
        key = f"{prefix}-{n}"
        if murmur2_partition(key.encode(), partitions) == partition:
            out.append(key)
        n += 1
    return out


def new_deployment(bootstrap: str, prefix: str, partitions: int) -> Deployment:
    """Topics and an app id whose names all start with one unique base (see delete_all)."""
    base = unique(prefix)
    topics = Topics(f"{base}.ingest", f"{base}.egress", f"{base}.dlq", f"{base}.policy")
    d = Deployment(bootstrap, partitions=partitions, topics=topics, app_id=f"{base}-app")
    for attempt in range(5):
        try:
            return d.create()
        except Exception as exc:  # the broker's metadata may lag right after creation
            if attempt == 4:
                raise
            log(f"creating topics: {exc}; retrying")
            time.sleep(1)
    raise AssertionError("unreachable")


def delete_all(d: Deployment) -> None:
    """Delete the deployment's topics and every internal topic the scheduler made (their
    names start with the app id, which starts with the topics' base)."""
    base = d.topics.ingest.rsplit(".", 1)[0]
    admin = AdminClient({"bootstrap.servers": d.bootstrap})
    doomed = [t for t in admin.list_topics(timeout=15).topics if t.startswith(base)]
    if doomed:
        for future in admin.delete_topics(doomed, operation_timeout=30).values():
            with contextlib.suppress(Exception):
                future.result(timeout=60)


@functools.cache
def scheduler_help() -> str:
    """``fairstream scheduler --help``, to pass options only where this version has them."""
    with contextlib.suppress(Exception):
        return subprocess.run(
            [sys.executable, "-m", "fairstream", "scheduler", "--help"],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        ).stdout  # fmt: skip
    return ""


def backlog_option(records: int) -> list[str]:
    """``--max-backlog`` above ``records`` when the scheduler has a per-tenant cap (the
    current one dead-letters a tenant's records beyond 100,000 by default)."""
    return ["--max-backlog", str(records + 10_000)] if "--max-backlog" in scheduler_help() else []


def metrics(scheduler: SchedulerProcess) -> dict[str, float]:
    """The unlabelled samples of the scheduler's /metrics (empty when unreadable)."""
    status, body = scheduler.get("/metrics")
    out: dict[str, float] = {}
    if status != 200:
        return out
    for line in body.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def kill(scheduler: SchedulerProcess) -> None:
    """kill -9 (a benchmark's scheduler has nothing left to finish) and drop its state."""
    if scheduler.alive():
        scheduler.kill()
    shutil.rmtree(scheduler.data_dir, ignore_errors=True)


def fill(bootstrap: str, topic: str, records: int, tenants: int) -> float:
    """Write ``records`` records of VALUE_SIZE B round-robin over ``tenants`` keys (murmur2,
    as the README tells producers to); seconds until all are acknowledged."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "compression.type": "lz4",
            "partitioner": "murmur2_random",
        }
    )
    keys = [f"tenant-{i:05d}".encode() for i in range(tenants)]
    value = b"f:".ljust(VALUE_SIZE, b"x")
    started = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, key=keys[i % tenants])
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    unsent = producer.flush(300)
    if unsent:
        raise RuntimeError(f"{unsent} records not acknowledged by the broker")
    return time.monotonic() - started


def cell(text: str) -> str:
    """``text`` fit for one Markdown table cell: printable, one line, no pipes."""
    # Terminal escapes (a spinner), raw or as repr() writes them, and repr()'s \n.
    text = re.sub(r"(\x1b|\\x1b)\[[0-9;?]*[A-Za-z]|\\x[0-9a-f]{2}|\\[nt]", " ", text)
    return " ".join("".join(c for c in text if c.isprintable() or c.isspace()).split()).replace(
        "|", "/"
    )


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between ranks, numpy's default (as fairstream.core's)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def stats(dwell: list[float], censored: Iterable[float] = ()) -> dict[str, Any]:
    """p50, p99 and max in seconds; ``censored`` are lower bounds (records never seen),
    and a statistic one of them could raise is listed under ``lower_bound``."""
    censored = list(censored)
    values = dwell + censored
    if not values:
        return {"n": 0}
    out: dict[str, Any] = {"n": len(values)}
    lowest_censored = min(censored, default=math.inf)
    bounds = []
    for name, q in (("p50_s", 50.0), ("p99_s", 99.0), ("max_s", 100.0)):
        out[name] = round(percentile(values, q), 3)
        if lowest_censored <= out[name] or (q == 100.0 and censored):
            bounds.append(name)
    if bounds:
        out["lower_bound"] = bounds
        out["missing"] = len(censored)
    return out


# -- the burst writers (child processes) ----------------------------------------------------


def burst_writer(
    bootstrap: str,
    topic: str,
    partition: int,
    key: bytes,
    records: int,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """A child process: connect, say ready, wait for go, write ``records`` records of
    VALUE_SIZE B into ``partition`` as fast as librdkafka takes them; report the times."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 100,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "compression.type": "lz4",
        }
    )
    producer.list_topics(topic, timeout=30)
    value = b"b:".ljust(VALUE_SIZE, b"x")
    chunk = [{"key": key, "value": value} for _ in range(BATCH)]
    batches: list[tuple[float, float, int]] = []  # (before, after, records) per call
    ready.put(os.getpid())
    go.wait()
    first = time.time()
    left = records
    while left > 0:
        n = min(BATCH, left)
        before = time.time()
        try:
            queued = producer.produce_batch(topic, chunk[:n], partition=partition)
        except BufferError:
            queued = 0
        if queued < n:  # queue full: the records left out carry an '_error'; wait and redo
            producer.poll(0.05)
            chunk = [{"key": key, "value": value} for _ in range(BATCH)]
        batches.append((before, time.time(), queued))
        left -= queued
    last_call = time.time()
    unsent = producer.flush(120)
    results.put(
        {
            "first": first,
            "last_call": last_call,
            "acked": time.time(),
            "unsent": unsent,
            "batches": batches,
        }
    )


def burst_times(writers: list[dict[str, Any]]) -> list[float]:
    """Each burst record's arrival time: spread evenly over its produce_batch call."""
    out: list[float] = []
    for w in writers:
        for before, after, n in w["batches"]:
            out.extend(before + (after - before) * (i + 0.5) / n for i in range(n))
    out.sort()
    return out


# -- quiet tenants and the egress reader (threads) ---------------------------------------------


@dataclass
class Quiet:
    """8 quiet tenants sending 2 records/s each, staggered, until ``until`` (epoch s)."""

    bootstrap: str
    topic: str
    tenants: dict[str, int]  # key -> partition
    until: float | None = None
    sent: dict[str, tuple[str, int, float]] = field(default_factory=dict)  # id -> (t, p, ct)
    failed: int = 0
    produced: int = 0

    def run(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "linger.ms": 0, "enable.idempotence": True}
        )
        names = sorted(self.tenants)
        step = 1 / (QUIET_RATE * len(names))
        start = time.time() + 0.2
        k = 0
        while True:
            at = start + k * step
            if self.until is not None and at >= self.until:
                break
            tenant = names[k % len(names)]
            seq = k // len(names)
            while (delay := at - time.time()) > 0:
                producer.poll(min(delay, 0.05))
            rid = f"{names.index(tenant)}-{seq}"
            value = f"q:{rid}:".encode().ljust(VALUE_SIZE, b".")
            producer.produce(
                self.topic,
                value=value,
                key=tenant.encode(),
                partition=self.tenants[tenant],
                on_delivery=functools.partial(self._delivered, rid, tenant),
            )
            self.produced += 1
            producer.poll(0)
            k += 1
        self.failed += producer.flush(30)

    def _delivered(self, rid: str, tenant: str, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.failed += 1
            return
        self.sent[rid] = (tenant, self.tenants[tenant], msg.timestamp()[1] / 1000)


class EgressReader:
    """A read_committed consumer of every egress partition from the start: when each quiet
    record arrived, and how many egress records arrived when."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique("burst-reader"),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",  # what paid-API workers use
                "fetch.wait.max.ms": 50,
            }
        )
        self.consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        self.received: dict[str, float] = {}  # quiet id -> receive time
        self.arrivals: list[tuple[float, int]] = []  # (receive time, egress records)
        self.stopping = threading.Event()
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                batch = self.consumer.consume(num_messages=5_000, timeout=0.05)
                now = time.time()
                n = 0
                for msg in batch:
                    if msg.error() is not None:
                        if msg.error().code() != KafkaError._PARTITION_EOF:
                            self.error = str(msg.error())
                        continue
                    n += 1
                    value = msg.value() or b""
                    if value.startswith(b"q:"):
                        self.received.setdefault(value.split(b":", 2)[1].decode(), now)
                if n:
                    self.arrivals.append((now, n))
        except Exception as exc:  # reported, not raised: a thread's exception is lost
            self.error = repr(exc)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        with contextlib.suppress(Exception):
            self.consumer.close()


# -- one run ------------------------------------------------------------------------------------


def writers_for(records: int) -> int:
    """One writer process up to 400,000 records; two above (one Python process queues
    about 1,000,000 records/s into librdkafka here, which misses "under 1 s" for 1,000,000)."""
    return 1 if records <= 400_000 else 2


def run_once(
    bootstrap: str,
    workdir: Path,
    records: int,
    rate: float = RATE,
    after: float = 20.0,
    warmup: float = 3.0,
    drain_timeout: float = 120.0,
    writers: int | None = None,
) -> dict[str, Any]:
    """One burst of ``records`` records; the result as a JSON-able dict."""
    writers = writers or writers_for(records)
    burst_key = keys_for("burst", BURST_PARTITION, 1)[0]
    quiet_tenants = {
        key: p for p in range(PARTITIONS) for key in keys_for(f"quiet-p{p}", p, QUIET_PER_PARTITION)
    }
    d = new_deployment(bootstrap, "burst", PARTITIONS)
    undo: list[Callable[[], None]] = [functools.partial(delete_all, d)]
    try:
        scheduler = SchedulerProcess(
            d, workdir, "--rate", f"{rate:g}", *backlog_option(records), "--log-level", "warning",
            name=f"burst-{records}",
        )  # fmt: skip
        scheduler.start()
        undo.append(functools.partial(kill, scheduler))
        launched = time.monotonic()
        scheduler.wait_ready(timeout=120)
        to_ready = time.monotonic() - launched
        log(f"{records:,}: scheduler ready in {to_ready:.1f} s")

        # The writers start (import, connect) before anything is timed.
        ctx = multiprocessing.get_context("spawn")
        ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        share = [records // writers + (1 if i < records % writers else 0) for i in range(writers)]
        procs = [
            ctx.Process(
                target=burst_writer,
                args=(
                    bootstrap,
                    d.topics.ingest,
                    BURST_PARTITION,
                    burst_key.encode(),
                    n,
                    ready,
                    go,
                    results,
                ),
                daemon=True,
            )
            for n in share
        ]
        for proc in procs:
            proc.start()
            undo.append(functools.partial(_end, proc))
        for _ in procs:
            ready.get(timeout=60)

        reader = EgressReader(bootstrap, d.topics.egress, PARTITIONS)
        undo.append(reader.close)
        quiet = Quiet(bootstrap, d.topics.ingest, quiet_tenants)
        sender = threading.Thread(target=quiet.run, daemon=True)
        sender.start()
        time.sleep(warmup)

        go.set()
        written = [results.get(timeout=300) for _ in procs]
        burst_start = min(w["first"] for w in written)
        acked = max(w["acked"] for w in written) - burst_start
        produce_seconds = max(w["last_call"] for w in written) - burst_start
        log(
            f"{records:,}: burst written in {acked:.2f} s (produce calls {produce_seconds:.2f} s, "
            f"{writers} writer{'s' if writers > 1 else ''})"
        )
        quiet.until = burst_start + after

        # While the quiet tenants go on: when did the scheduler count the burst as ingested?
        absorbed: float | None = None
        while sender.is_alive():
            m = metrics(scheduler)
            if absorbed is None and m.get(INGESTED, 0) >= records + quiet.produced:
                absorbed = time.time() - burst_start
            if not scheduler.alive():
                raise RuntimeError(f"scheduler exited:\n{scheduler.tail()}")
            time.sleep(0.2)
        sender.join()
        quiet_done = time.time()

        # Every quiet record on egress, or the drain timeout.
        while time.time() < quiet_done + drain_timeout:
            if len(reader.received) >= len(quiet.sent):
                break
            if absorbed is None and metrics(scheduler).get(INGESTED, 0) >= records + quiet.produced:
                absorbed = time.time() - burst_start
            time.sleep(0.2)
        waited = time.time() - quiet_done
        ended = time.time()
        reader.close()
        egress = metrics(scheduler)
        if reader.error:
            raise RuntimeError(f"egress reader: {reader.error}")

        result = {
            "status": "ok",
            "records": records,
            "rate": rate,
            "partitions": PARTITIONS,
            "burst_partition": BURST_PARTITION,
            "burst_tenant": burst_key,
            "quiet_tenants": quiet_tenants,
            "scheduler_to_ready_seconds": round(to_ready, 2),
            "burst_write": {
                "writers": writers,
                "seconds_to_last_ack": round(acked, 3),
                "seconds_to_last_produce_call": round(produce_seconds, 3),
                "unsent": sum(w["unsent"] for w in written),
                "under_1s": acked < 1.0,
            },
            "after_burst_seconds": after,
            "warmup_seconds": warmup,
            "quiet_sent": len(quiet.sent),
            "quiet_failed": quiet.failed,
            "quiet_received": len(reader.received),
            "drain_wait_seconds": round(waited, 1),
            "drain_timeout_seconds": drain_timeout,
            "burst_absorbed_seconds": None if absorbed is None else round(absorbed, 2),
            "egress_records_per_s_after_burst": egress_rate(reader.arrivals, burst_start, after),
            "scheduler_egress_total": egress.get(EGRESS),
        }
        result["dwell"] = dwell_table(
            quiet, reader.received, burst_times(written), burst_start, rate, ended
        )
        return result
    finally:
        for step in reversed(undo):
            with contextlib.suppress(Exception):
                step()


def _end(proc: multiprocessing.process.BaseProcess) -> None:
    if proc.is_alive():
        proc.kill()
    proc.join(5)


def egress_rate(arrivals: list[tuple[float, int]], start: float, seconds: float) -> float | None:
    """Egress records received per second from 2 s after the burst to the window's end."""
    begin, end = start + 2, start + seconds
    if end <= begin:
        return None
    return round(sum(n for t, n in arrivals if begin <= t < end) / (end - begin), 1)


def dwell_table(
    quiet: Quiet,
    received: dict[str, float],
    burst: list[float],
    burst_start: float,
    rate: float,
    ended: float,
) -> dict[str, dict[str, Any]]:
    """Quiet dwell (s) per group of partitions: measured, FIFO and GPS on the same arrivals."""
    quiet_arrivals = [Arrival(ct, tenant, rid) for rid, (tenant, _p, ct) in quiet.sent.items()]
    burst_arrivals = [Arrival(t, "burst", f"b{i}") for i, t in enumerate(burst)]
    fifo = fifo_starts([*quiet_arrivals, *burst_arrivals], rate)
    # GPS on a prefix of the burst: the burst tenant stays backlogged past the last quiet
    # record either way (it drains at most `rate` records/s), so the quiet records' starts
    # are exact, and the simulation need not serve the rest of a 1,000,000-record burst.
    horizon = max((a.t for a in quiet_arrivals), default=burst_start) - burst_start + 60
    gps = gps_starts([*quiet_arrivals, *burst_arrivals[: int(rate * horizon) + 1]], rate)
    out: dict[str, dict[str, Any]] = {}
    for group, on_burst in (("burst_partition", True), ("other_partitions", False)):
        mine = [
            (rid, ct)
            for rid, (_t, p, ct) in quiet.sent.items()
            if (p == BURST_PARTITION) == on_burst and ct >= burst_start
        ]
        seen = [received[rid] - ct for rid, ct in mine if rid in received]
        missing = [ended - ct for rid, ct in mine if rid not in received]
        out[group] = {
            "fairstream": stats(seen, missing),
            "fifo": stats([fifo[rid] - ct for rid, ct in mine]),
            "gps": stats([gps[rid] - ct for rid, ct in mine]),
        }
    return out


# -- the phase, its targets and its report ---------------------------------------------------------


def phase(
    bootstrap: str,
    workdir: Path,
    quick: bool,
    _cleanup: list[Callable[[], None]] | None = None,
    sizes: Iterable[int] | None = None,
    rate: float = RATE,
    after: float | None = None,
    drain_timeout: float | None = None,
) -> dict[str, Any]:
    """Both sizes (300,000 and 1,000,000; --quick: 30,000 and 100,000), each in its own
    deployment, which it cleans up itself (run_all's cleanup list is not needed)."""
    sizes = list(sizes or (QUICK_SIZES if quick else SIZES))
    after = after if after is not None else (10.0 if quick else 20.0)
    drain_timeout = drain_timeout if drain_timeout is not None else (60.0 if quick else 120.0)
    runs: list[dict[str, Any]] = []
    for n in sizes:
        try:
            run = run_once(bootstrap, workdir, n, rate, after, drain_timeout=drain_timeout)
        except Exception as exc:  # one failed size must not lose the other's numbers
            log(f"{n:,} failed: {exc!r}")
            run = {"status": "error", "records": n, "error": repr(exc)[:500]}
        runs.append(run)
        log(f"{n:,}: {json.dumps(run.get('dwell') or run)}")
    ok = [r for r in runs if r["status"] == "ok"]
    return {"status": "ok" if ok else "error", "rate": rate, "runs": runs}


def _get(node: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _s(s: dict[str, Any] | None, key: str) -> str:
    if not s or s.get(key) is None:
        return "-"
    bound = ">= " if key in s.get("lower_bound", ()) else ""
    return f"{bound}{s[key]:,.{3 if s[key] < 1 else 2}f}"


def _three(s: dict[str, Any] | None) -> str:
    return " / ".join(_s(s, k) for k in ("p50_s", "p99_s", "max_s"))


def targets(results: dict[str, Any]) -> list[tuple[str, str, bool | None, str]]:
    """run_all's target rows: (target, measured, met, by how much), per burst size."""
    out: list[tuple[str, str, bool | None, str]] = []
    for run in _get(results, "burst", "runs") or []:
        if run.get("status") != "ok":
            continue
        n = f"{run['records']:,}"
        for group, label, bound, goal in (
            ("other_partitions", "other partitions", TARGET_OTHER_P99, None),
            ("burst_partition", "burst's partition", TARGET_BURST_P99, GOAL_BURST_P99),
        ):
            cell = _get(run, "dwell", group) or {}
            p99 = _get(cell, "fairstream", "p99_s")
            if p99 is None:
                continue
            ideal, fifo = _get(cell, "gps", "p99_s"), _get(cell, "fifo", "p99_s")
            lower = "p99_s" in (_get(cell, "fairstream", "lower_bound") or ())
            out.append(
                (
                    f"burst {n}: quiet p99 dwell, {label} <= {bound:g} s"
                    + (f" (goal {goal:g} s)" if goal else ""),
                    f"{'>= ' if lower else ''}{p99:,.2f} s (ideal {ideal:,.3f} s, FIFO "
                    f"{fifo:,.1f} s)",
                    p99 <= bound and not lower,
                    f"{abs(bound - p99):,.2f} s",
                )
            )
    return out


def markdown(results: dict[str, Any]) -> list[str]:
    """The "Burst" table of docs/benchmarks.md."""
    burst = _get(results, "burst") or {}
    runs = burst.get("runs") or []
    ok = [r for r in runs if r.get("status") == "ok"]
    first = ok[0] if ok else {}
    lines = [
        f"**Burst** (`--rate {_get(burst, 'rate') or RATE:g}`, {PARTITIONS} ingest partitions; "
        f"{PARTITIONS * QUIET_PER_PARTITION} quiet tenants at {QUIET_RATE:g} records/s each, "
        f"{QUIET_PER_PARTITION} per partition; then one tenant writes N records of "
        f"{VALUE_SIZE} B into partition {BURST_PARTITION} at once; quiet records created from "
        f"the burst's start until {_get(first, 'after_burst_seconds') or '-'} s after it; "
        "dwell = time a read_committed egress consumer received the record - its ingest "
        "CreateTime; FIFO and ideal (GPS) computed by `fairstream.reference` from the same "
        "arrivals at the same rate; `benchmarks/burst.py`):",
        "",
        "| burst | quiet dwell | burst's partition p50 / p99 / max s | other partitions "
        "p50 / p99 / max s |",
        "| --- | --- | ---: | ---: |",
    ]
    for run in runs:
        n = f"{run.get('records', 0):,}"
        if run.get("status") != "ok":
            lines.append(f"| {n} | failed: {cell(str(run.get('error')))[:160]} | - | - |")
            continue
        w = run["burst_write"]
        head = f"{n} written in {w['seconds_to_last_ack']:.2f} s"
        d = run["dwell"]
        for i, (key, label) in enumerate(
            (("fairstream", "fairstream"), ("fifo", "FIFO"), ("gps", "ideal (GPS)"))
        ):
            lines.append(
                f"| {head if i == 0 else ''} | {label} | {_three(d['burst_partition'][key])} | "
                f"{_three(d['other_partitions'][key])} |"
            )
        lines.append(
            f"| | target (p99) | <= {TARGET_BURST_P99:g} (goal {GOAL_BURST_P99:g}) | "
            f"<= {TARGET_OTHER_P99:g} |"
        )
    lines.append("")
    for run in ok:
        d = run["dwell"]
        absorbed = run.get("burst_absorbed_seconds")
        lines.append(
            f"- {run['records']:,}: {run['quiet_received']:,} of {run['quiet_sent']:,} quiet "
            f"records on egress after waiting {run['drain_wait_seconds']:g} s (at most "
            f"{run['drain_timeout_seconds']:g}) once the quiet tenants stopped; measured "
            f"{_get(d, 'burst_partition', 'fairstream', 'n')} + "
            f"{_get(d, 'other_partitions', 'fairstream', 'n')}; burst counted as ingested "
            + (f"{absorbed:,.1f} s after its first record" if absorbed is not None else "never")
            + " (ingest counter on /metrics); egress "
            f"{_get(run, 'egress_records_per_s_after_burst') or '-'} records/s from 2 s after "
            f"the burst; {run['burst_write']['writers']} writer process(es)"
            + (
                "."
                if run["burst_write"]["under_1s"]
                else f", which took {run['burst_write']['seconds_to_last_ack']:.2f} s, over the "
                "1 s asked for: they share the 2 cores with the broker and the scheduler."
            )
        )
    groups = ("burst_partition", "other_partitions")
    if any("lower_bound" in (_get(r, "dwell", g, "fairstream") or {}) for r in ok for g in groups):
        lines.append(
            '- ">=": quiet records still missing when the wait ended count with the dwell '
            "they had reached; the statistic is a lower bound."
        )
    return lines


def print_table(result: dict[str, Any]) -> None:
    for line in markdown({"burst": result}):
        print(line)
    print()
    for name, measured, met, by in targets({"burst": result}):
        print(f"{'met   ' if met else 'missed'}  {name}: {measured} (by {by})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument(
        "--records", help="burst sizes, comma-separated [default: 300000,1000000; --quick: "
        "30000,100000]"
    )  # fmt: skip
    parser.add_argument("--rate", type=float, default=RATE, help="scheduler --rate")
    parser.add_argument("--after", type=float, help="seconds of quiet traffic after the burst")
    parser.add_argument("--drain-timeout", type=float, help="seconds to wait for quiet records")
    parser.add_argument("--quick", action="store_true", help="small sizes, a shorter window")
    parser.add_argument("--workdir", type=Path, help="keep the scheduler's log here")
    parser.add_argument("--json", action="store_true", help="also print the result as JSON")
    args = parser.parse_args()
    bootstrap = args.bootstrap
    if not bootstrap:
        from fairstream_dev.kafka import DevBroker

        state = DevBroker().status()
        if state is None:
            sys.exit("no --bootstrap and no development broker: `fairstream dev-kafka up`")
        bootstrap = state.bootstrap
    sizes = [int(x.replace("_", "")) for x in args.records.split(",")] if args.records else None
    tmp = tempfile.mkdtemp(prefix="fairstream-burst-")
    workdir = args.workdir or Path(tmp)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = phase(
            bootstrap, workdir, args.quick, None, sizes, args.rate, args.after, args.drain_timeout
        )
    finally:
        if args.workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    print_table(result)


if __name__ == "__main__":
    main()
