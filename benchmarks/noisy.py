"""run_all's ``noisy`` phase: three noisy tenants burst while five quiet tenants trickle;
the scheduler emits at 200/s. Quiet tenants' dwell (fairstream-scheduled-ms minus
fairstream-enqueued-ms on egress) p50/p99, against FIFO and the ideal GPS schedule of the
same actual arrivals (``fairstream.analysis.reference``), and Jain's index per 1 s window over the
tenants backlogged throughout the window.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks.common import VALUE_SIZE, delete_all, new_deployment, start_scheduler
from benchmarks.throughput import PARTITIONS
from fairstream import wire
from fairstream.analysis.reference import Arrival, fifo_starts, gps_starts
from fairstream.analysis.stats import jain_index, percentile
from fairstream_dev.harness.scheduler import TopicReader

NOISY = (("noisy-1", 1.0, 3000), ("noisy-2", 3.0, 1500), ("noisy-3", 3.0, 1500))
QUIET_TENANTS = 5
QUIET_RATE = 1.0  # records/s per quiet tenant

Egress = tuple[str, str, float, float]  # (request id, tenant, enqueued s, scheduled s)


def noisy_arrivals(duration: float, scale: float, seed: int = 7) -> list[tuple[float, str]]:
    rng = random.Random(seed)
    out = [(at, tenant) for tenant, at, n in NOISY for _ in range(int(n * scale))]
    for q in range(QUIET_TENANTS):
        t = rng.uniform(0, 1 / QUIET_RATE)
        while t < duration:
            out.append((t, f"quiet-{q + 1}"))
            t += rng.expovariate(QUIET_RATE)
    return sorted(out)


def replay(bootstrap: str, topic: str, arrivals: list[tuple[float, str]], t0: float) -> None:
    """Produce the arrivals in real time; the record timestamp is the arrival time."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 1, "partitioner": "murmur2_random"}
    )
    value = bytes(VALUE_SIZE)
    for at, tenant in arrivals:
        delay = t0 + at - time.time()
        if delay > 0:
            producer.poll(0)
            time.sleep(delay)
        producer.produce(topic, key=tenant.encode(), value=value)
    producer.flush(30)


def egress_records(messages: list[Any]) -> list[Egress]:
    """(request id, tenant, enqueued s, scheduled s) of each egress record."""
    out = []
    for msg in messages:
        headers = {k: (v or b"").decode() for k, v in (msg.headers() or [])}
        out.append(
            (
                headers[wire.REQUEST_ID],
                headers[wire.TENANT],
                int(headers[wire.ENQUEUED_MS]) / 1000,
                int(headers[wire.SCHEDULED_MS]) / 1000,
            )
        )
    return out


def jain_windows(records: list[Egress]) -> dict[str, Any]:
    """Jain's index of served counts per 1 s window over tenants backlogged throughout it.

    A tenant is backlogged throughout [t, t+1) when one of its records was enqueued by t and
    scheduled at t+1 or later (per-tenant FIFO: its queue was never empty meanwhile).
    Equal weights. Windows with fewer than two such tenants are not counted.
    """
    start = min(r[3] for r in records)
    end = max(r[3] for r in records)
    indices: list[float] = []
    t = start
    while t + 1 <= end:
        served: dict[str, int] = defaultdict(int)
        backlogged: set[str] = set()
        for _rid, tenant, enq, sched in records:
            if t <= sched < t + 1:
                served[tenant] += 1
            if enq <= t and sched >= t + 1:
                backlogged.add(tenant)
        if len(backlogged) >= 2:
            indices.append(jain_index([served[x] for x in backlogged]))
        t += 1
    return {
        "windows": len(indices),
        "min": round(min(indices), 4) if indices else None,
        "mean": round(sum(indices) / len(indices), 4) if indices else None,
    }


def _stats(dwell: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(dwell, 50) * 1000, 1),
        "p99_ms": round(percentile(dwell, 99) * 1000, 1),
        "max_ms": round(max(dwell) * 1000, 1),
    }


def phase(
    bootstrap: str, workdir: Path, quick: bool, cleanup: list[Callable[[], None]]
) -> dict[str, Any]:
    rate = 200.0
    duration = 12.0 if quick else 25.0
    arrivals = noisy_arrivals(duration, 0.4 if quick else 1.0)
    d = new_deployment(bootstrap, "bench", PARTITIONS)
    cleanup.append(functools.partial(delete_all, d))
    scheduler = start_scheduler(d, workdir, "noisy", ["--rate", str(rate)], cleanup)
    scheduler.wait_ready(timeout=120)
    reader = TopicReader(bootstrap, d.topics.egress)
    cleanup.append(reader.close)
    t0 = time.time() + 1.0
    producer = threading.Thread(
        target=replay, args=(bootstrap, d.topics.ingest, arrivals, t0), daemon=True
    )
    producer.start()
    reader.read_until(len(arrivals), timeout=len(arrivals) / rate + duration + 60)
    producer.join(10)
    records = egress_records(reader.messages)
    actual = [Arrival(enq, tenant, rid) for rid, tenant, enq, _ in records]
    fifo = fifo_starts(actual, rate)
    gps = gps_starts(actual, rate)
    quiet = [r for r in records if r[1].startswith("quiet")]
    return {
        "status": "ok",
        "rate": rate,
        "records": len(records),
        "distinct_request_ids": len({r[0] for r in records}),
        "noisy_bursts": {t: int(n * (0.4 if quick else 1.0)) for t, _, n in NOISY},
        "quiet_records": len(quiet),
        "quiet_dwell": {
            "fairstream": _stats([sched - enq for _, _, enq, sched in quiet]),
            "fifo": _stats([fifo[rid] - enq for rid, _, enq, _ in quiet]),
            "gps": _stats([gps[rid] - enq for rid, _, enq, _ in quiet]),
        },
        "jain_per_1s_window": jain_windows(records),
    }
