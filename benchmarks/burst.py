"""Burst scenario: quiet tenants beside a huge burst.

One run, on topics and an app id of its own:

1. An ingest topic of 4 partitions; ``fairstream scheduler --rate 500`` (the harness of
   ``fairstream_dev.harness.scheduler``), waited for until /readyz says ready.
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
``fairstream.analysis.reference`` from the same arrivals (quiet CreateTimes, burst records
spread over the times their batches were handed to librdkafka) at the same rate. Targets:
quiet p99 at most 0.5 s on the other partitions, at most 5 s (goal 3 s) on the burst's
partition.

A quiet record still missing when the drain wait ends counts with the dwell it had reached
then; a statistic such a record can change is marked as a lower bound (">=").

    .venv/bin/python -m benchmarks.burst [--bootstrap HOST:PORT] [--records 300000,1000000]
        [--rate 500] [--after 20] [--quick] [--json]

Without ``--bootstrap`` (or ``KAFKA_BOOTSTRAP_SERVERS``) the development broker is used
(started if it is not running). ``benchmarks/run_all.py`` runs it as its ``burst`` phase
(``phase()``); its table and targets are ``burst_table`` and ``burst_targets``, which
``benchmarks.tables`` and ``benchmarks.targets`` gather with the other phases'. Prints numbers,
asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from benchmarks.common import (
    DEAD_LETTERS,
    EGRESS,
    IN_LOG,
    INGESTED,
    VALUE_SIZE,
    Broker,
    Row,
    backlog_option,
    cell,
    delete_all,
    get,
    keys_for,
    kill,
    logger,
    metrics,
    new_deployment,
    print_targets,
    undoing,
)
from fairstream import wire
from fairstream.analysis.reference import Arrival, fifo_starts, gps_starts
from fairstream.analysis.stats import percentile
from fairstream_dev.harness.kafka import unique
from fairstream_dev.harness.scheduler import SchedulerProcess

PARTITIONS = 4
BURST_PARTITION = 0
QUIET_PER_PARTITION = 2
QUIET_RATE = 2.0  # records/s per quiet tenant
RATE = 500.0
SIZES = (300_000, 1_000_000)
QUICK_SIZES = (30_000, 100_000)
BATCH = 10_000  # records per produce_batch call of a burst writer
# targets: the quiet tenants' p99 dwell, seconds
BURST_OTHER_P99 = 0.5
BURST_OWN_P99 = 5.0
BURST_OWN_P99_GOAL = 3.0

log = logger("burst")


# -- statistics --------------------------------------------------------------------------------


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


def _dwell(s: dict[str, Any] | None, key: str) -> str:
    if not s or s.get(key) is None:
        return "-"
    bound = ">= " if key in s.get("lower_bound", ()) else ""
    return f"{bound}{s[key]:,.{3 if s[key] < 1 else 2}f}"


def dwell_cells(s: dict[str, Any] | None) -> str:
    """A dwell statistic's p50 / p99 / max cells (``stats``), ">= " before a lower bound."""
    return " / ".join(_dwell(s, k) for k in ("p50_s", "p99_s", "max_s"))


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
        # quiet id -> its release: the scheduled stamp the scheduler put on it as it picked
        # it (``fairstream-scheduled-ms``), on the same clock.
        self.released: dict[str, float] = {}
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
                        rid = value.split(b":", 2)[1].decode()
                        self.received.setdefault(rid, now)
                        stamp = dict(msg.headers() or ()).get(wire.SCHEDULED_MS)
                        if stamp is not None:
                            self.released.setdefault(rid, int(stamp) / 1000)
                if n:
                    self.arrivals.append((now, n))
        except Exception as exc:  # reported, not raised: a thread's exception is lost
            self.error = repr(exc)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        with contextlib.suppress(Exception):
            self.consumer.close()


class Letters:
    """The scheduler's dead letters written so far (``fairstream_dead_letters_total``, all
    reasons), sampled: how many, and when the count first and last moved."""

    def __init__(self) -> None:
        self.count = 0
        self.first: float | None = None  # when the count first moved
        self.last: float | None = None  # when it last moved
        self.still = 0  # samples since it last moved

    def sample(self, scheduler: SchedulerProcess) -> None:
        status, body = scheduler.get("/metrics")
        if status != 200:
            return
        count = 0
        for line in body.splitlines():
            if line.startswith(DEAD_LETTERS + "{"):
                with contextlib.suppress(ValueError):
                    count += int(float(line.rpartition(" ")[2]))
        now = time.time()
        if count > self.count:
            self.first = self.first or now
            self.last, self.count, self.still = now, count, 0
        else:
            self.still += 1

    def settled(self) -> bool:
        """Whether the count moved and then stood still for 2 s (10 samples)."""
        return self.count > 0 and self.still >= 10

    def per_second(self, since: float) -> float | None:
        """Dead letters per second from ``since`` (the burst's start) to the last move."""
        if self.last is None or self.last <= since:
            return None
        return round(self.count / (self.last - since), 1)


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
    *,
    raise_cap: bool = True,
    partitions: int = PARTITIONS,
    floods: tuple[int, ...] = (BURST_PARTITION,),
) -> dict[str, Any]:
    """One burst of ``records`` records per flooding partition in ``floods`` (one tenant
    each); the result as a JSON-able dict. ``raise_cap``: the scheduler's --max-backlog above
    the burst, so nothing is dead-lettered; else the default cap holds and the burst's
    overflow is dead-lettered ``backlog-full``."""
    writers = writers or writers_for(records)
    burst_keys = {p: keys_for(f"burst-p{p}", p, 1, partitions)[0] for p in floods}
    quiet_tenants = {
        key: p
        for p in range(partitions)
        for key in keys_for(f"quiet-p{p}", p, QUIET_PER_PARTITION, partitions)
    }
    d = new_deployment(bootstrap, "burst", partitions)
    cap = backlog_option(records) if raise_cap else []
    with undoing() as undo:
        undo.append(functools.partial(delete_all, d))
        scheduler = SchedulerProcess(
            d,
            workdir,
            "--rate",
            f"{rate:g}",
            *cap,
            "--log-level",
            "warning",
            name=f"burst-{records}",
        )
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
                    partition,
                    burst_keys[partition].encode(),
                    n,
                    ready,
                    go,
                    results,
                ),
                daemon=True,
            )
            for partition in floods
            for n in share
        ]
        for proc in procs:
            proc.start()
            undo.append(functools.partial(_end, proc))
        for _ in procs:
            ready.get(timeout=60)

        reader = EgressReader(bootstrap, d.topics.egress, partitions)
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

        # While the quiet tenants go on: when did the scheduler count the burst as taken in
        # (indexed, passed over to wait in the log, or dead-lettered over the cap), and how
        # fast did it write dead letters?
        total = records * len(floods)
        absorbed: float | None = None
        letters = Letters()
        while sender.is_alive():
            m = metrics(scheduler)
            letters.sample(scheduler)
            taken = m.get(INGESTED, 0) + m.get(IN_LOG, 0)
            if absorbed is None and taken + letters.count >= total + quiet.produced:
                absorbed = time.time() - burst_start
            if not scheduler.alive():
                raise RuntimeError(f"scheduler exited:\n{scheduler.tail()}")
            time.sleep(0.2)
        sender.join()
        quiet_done = time.time()

        # Every quiet record on egress, or the drain timeout.
        while time.time() < quiet_done + drain_timeout:
            letters.sample(scheduler)
            if len(reader.received) >= len(quiet.sent) and (raise_cap or letters.settled()):
                break
            m = metrics(scheduler)
            taken = m.get(INGESTED, 0) + m.get(IN_LOG, 0)
            if absorbed is None and taken + letters.count >= total + quiet.produced:
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
            "partitions": partitions,
            "burst_partition": floods[0],
            "burst_partitions": list(floods),
            "burst_tenant": burst_keys[floods[0]],
            "cap": "raised" if raise_cap else "default",
            "dead_letters": letters.count,
            "dead_letters_per_s": letters.per_second(burst_start),
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
            quiet,
            reader.received,
            burst_times(written),
            burst_start,
            rate,
            ended,
            set(floods),
            reader.released,
        )
        return result


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
    floods: set[int] | None = None,
    released: dict[str, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """Quiet dwell (s) per group of partitions: measured, FIFO and GPS on the same arrivals;
    with ``released`` (quiet id -> the scheduled stamp on its egress record), the measured
    dwell split at that release: ``release`` up to it (read, indexed, picked) and
    ``after_release`` from it (the commit that made the record visible, the egress read).
    The stamp is the rate's slot, which trails the pick by up to ``CATCH_UP`` (0.5 s) while
    emission catches up on slots it missed: then some of the wait shows after the release."""
    floods = floods if floods is not None else {BURST_PARTITION}
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
            if (p in floods) == on_burst and ct >= burst_start
        ]
        seen = [received[rid] - ct for rid, ct in mine if rid in received]
        missing = [ended - ct for rid, ct in mine if rid not in received]
        out[group] = {
            "fairstream": stats(seen, missing),
            "fifo": stats([fifo[rid] - ct for rid, ct in mine]),
            "gps": stats([gps[rid] - ct for rid, ct in mine]),
        }
        if released:
            out[group]["release"] = stats(
                [released[rid] - ct for rid, ct in mine if rid in released]
            )
            out[group]["after_release"] = stats(
                [
                    received[rid] - released[rid]
                    for rid, _ in mine
                    if rid in released and rid in received
                ]
            )
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


def burst_table(results: dict[str, Any]) -> list[str]:
    """The "Burst" table."""
    b = get(results, "burst") or {}
    runs = b.get("runs") or []
    ok = [r for r in runs if r.get("status") == "ok"]
    first = ok[0] if ok else {}
    lines = [
        f"**Burst** (`--rate {get(b, 'rate') or RATE:g}`, {PARTITIONS} ingest "
        f"partitions; {PARTITIONS * QUIET_PER_PARTITION} quiet tenants at "
        f"{QUIET_RATE:g} records/s each, {QUIET_PER_PARTITION} per partition; then "
        f"one tenant writes N records of {VALUE_SIZE} B into partition {BURST_PARTITION} "
        "at once; quiet records created from the burst's start until "
        f"{get(first, 'after_burst_seconds') or '-'} s after it; dwell = time a read_committed "
        "egress consumer received the record - its ingest CreateTime; FIFO and ideal (GPS) "
        "computed by `fairstream.analysis.reference` from the same arrivals at the same rate; "
        "`benchmarks/burst.py`):",
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
                f"| {head if i == 0 else ''} | {label} | "
                f"{dwell_cells(d['burst_partition'][key])} | "
                f"{dwell_cells(d['other_partitions'][key])} |"
            )
        lines.append(
            f"| | target (p99) | <= {BURST_OWN_P99:g} (goal {BURST_OWN_P99_GOAL:g}) | "
            f"<= {BURST_OTHER_P99:g} |"
        )
    lines.append("")
    for run in ok:
        lines.append(_burst_note(run))
    groups = ("burst_partition", "other_partitions")
    if any("lower_bound" in (get(r, "dwell", g, "fairstream") or {}) for r in ok for g in groups):
        lines.append(
            '- ">=": quiet records still missing when the wait ended count with the dwell '
            "they had reached; the statistic is a lower bound."
        )
    return lines


def _release_note(d: dict[str, Any]) -> str:
    """The quiet records' p99 before and after their release (the scheduled stamp)."""
    parts = []
    for group, label in (
        ("burst_partition", "the burst's partition"),
        ("other_partitions", "the others"),
    ):
        before, after = get(d, group, "release"), get(d, group, "after_release")
        if not before or not after:
            return ""
        parts.append(f"{_dwell(before, 'p99_s')} / {_dwell(after, 'p99_s')} s on {label}")
    return (
        "quiet p99 from creation to release / from release to the egress read: "
        f"{', '.join(parts)} (release: the scheduled stamp, the rate's slot, which trails the "
        "pick by up to 0.5 s while emission catches up); "
    )


def _burst_note(run: dict[str, Any]) -> str:
    d = run["dwell"]
    absorbed = run.get("burst_absorbed_seconds")
    return (
        f"- {run['records']:,}: {run['quiet_received']:,} of {run['quiet_sent']:,} quiet "
        f"records on egress after waiting {run['drain_wait_seconds']:g} s (at most "
        f"{run['drain_timeout_seconds']:g}) once the quiet tenants stopped; measured "
        f"{get(d, 'burst_partition', 'fairstream', 'n')} + "
        f"{get(d, 'other_partitions', 'fairstream', 'n')}; burst taken in "
        + (f"{absorbed:,.1f} s after its first record" if absorbed is not None else "never")
        + " (indexed or waiting in the log, by /metrics); "
        + _release_note(d)
        + "egress "
        f"{get(run, 'egress_records_per_s_after_burst') or '-'} records/s from 2 s after "
        f"the burst; {run['burst_write']['writers']} writer process(es)"
        + (
            "."
            if run["burst_write"]["under_1s"]
            else f", which took {run['burst_write']['seconds_to_last_ack']:.2f} s, over the "
            "1 s asked for: they share the 2 cores with the broker and the scheduler."
        )
    )


def burst_targets(r: dict[str, Any]) -> list[Row]:
    """Per burst size: quiet p99 on the burst's partition and on the others."""
    out: list[Row] = []
    for run in get(r, "burst", "runs") or []:
        if run.get("status") != "ok":
            continue
        n = f"{run['records']:,}"
        for part, label, bound, goal in (
            ("other_partitions", "other partitions", BURST_OTHER_P99, None),
            ("burst_partition", "burst's partition", BURST_OWN_P99, BURST_OWN_P99_GOAL),
        ):
            dwell = get(run, "dwell", part) or {}
            p99 = get(dwell, "fairstream", "p99_s")
            if p99 is None:
                continue
            ideal, fifo = get(dwell, "gps", "p99_s"), get(dwell, "fifo", "p99_s")
            lower = "p99_s" in (get(dwell, "fairstream", "lower_bound") or ())
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


def print_table(result: dict[str, Any]) -> None:
    print("\n".join(burst_table({"burst": result})))
    print()
    print_targets(burst_targets({"burst": result}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument(
        "--records",
        help="burst sizes, comma-separated [default: 300000,1000000; --quick: 30000,100000]",
    )
    parser.add_argument("--rate", type=float, default=RATE, help="scheduler --rate")
    parser.add_argument("--after", type=float, help="seconds of quiet traffic after the burst")
    parser.add_argument("--drain-timeout", type=float, help="seconds to wait for quiet records")
    parser.add_argument("--quick", action="store_true", help="small sizes, a shorter window")
    parser.add_argument("--workdir", type=Path, help="keep the scheduler's log here")
    parser.add_argument("--json", action="store_true", help="also print the result as JSON")
    args = parser.parse_args()
    broker = Broker.find(args.bootstrap)
    sizes = [int(x.replace("_", "")) for x in args.records.split(",")] if args.records else None
    tmp = tempfile.mkdtemp(prefix="fairstream-burst-")
    workdir = args.workdir or Path(tmp)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = phase(
            broker.bootstrap,
            workdir,
            args.quick,
            None,
            sizes,
            args.rate,
            args.after,
            args.drain_timeout,
        )
    finally:
        broker.stop()
        if args.workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    print_table(result)


if __name__ == "__main__":
    main()
