"""run_all's ``concurrency`` phase: ``--max-concurrency 20``, no ``--rate``, calls of 1 s.

A backlog over 40 tenants (so that the worker SDK's one call per tenant at a time on main
does not bind), called by two workers in turn:

- ``slots``: ``fairstream_dev.harness.slots.SlotWorker``, which starts each record's call
  as soon as it reads it and reports it settled on the feedback topic, as a Worker does;
- ``sdk``: ``fairstream.Worker`` (concurrency 64) with an async handler awaiting 1 s.

Each prints the calls in flight at the API (sampled every 50 ms from 1 s after the first
call to the last call's start: while a backlog waited) on average and at most, the most
slots the scheduler held (/metrics), and calls/s over the run. Ideal: 20 in flight, 20
calls/s; what is missing is the loop's latency (release -> call start, end -> the
scheduler reading the completion) against the 1 s of the call.

    .venv/bin/python -m benchmarks.concurrency [--bootstrap HOST:PORT] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import delete_all, metrics, new_deployment, start_scheduler
from fairstream import Request
from fairstream.adapters.admin import create_topics
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.paid_api import FEEDBACK, feedback_loop
from fairstream_dev.harness.scheduler import SchedulerProcess
from fairstream_dev.harness.slots import CallLog, Sampler, SlotWorker

LIMIT = 20
LATENCY = 1.0
TENANTS = 40
PARTITIONS = 4


def _summary(log: CallLog, held: list[float], seconds_limit: float) -> dict[str, Any]:
    begin, end = log.busy_window(margin=1.0)
    samples = [n for _, n, _ in log.between(begin, end)]
    seconds = log.ended[-1][0] - log.started[0][0]
    return {
        "calls": len(log.ended),
        "seconds": round(seconds, 2),
        "calls_per_s": round(len(log.ended) / seconds, 2),
        "in_flight_mean": round(sum(samples) / len(samples), 2) if samples else None,
        "in_flight_max": log.max_in_flight,
        "scheduler_slots_max": max(held) if held else None,
        "samples": len(samples),
        "deadline_s": seconds_limit,
    }


def _wait(
    log: CallLog, scheduler: SchedulerProcess, total: int, held: list[float], deadline: float
) -> None:
    def done() -> bool:
        value = metrics(scheduler).get("fairstream_concurrency_in_flight")
        if value is not None:
            held.append(value)
        return len(log.ended) >= total

    wait_until(done, deadline, lambda: f"{total} calls (have {len(log.ended)})", interval=0.2)


def _produce(bootstrap: str, topic: str, per_tenant: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"}
    )
    for i in range(per_tenant):
        for t in range(TENANTS):
            producer.produce(topic, key=f"t{t:02d}".encode(), value=b"c-%d" % i)
    assert producer.flush(30) == 0


def run_slots(
    bootstrap: str, workdir: Path, per_tenant: int, cleanup: list[Callable[[], None]]
) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    d = new_deployment(bootstrap, "bench-conc", PARTITIONS)
    cleanup.append(functools.partial(delete_all, d))
    feedback = unique("bench-conc-feedback")
    create_topics(bootstrap, d.topics, PARTITIONS, d.app_id, feedback_topic=feedback)
    log = CallLog()
    worker = SlotWorker(bootstrap, d.topics.egress, feedback, unique("bench-conc-w"), LATENCY, log)
    thread = threading.Thread(target=worker.run, daemon=True, name="slot-worker")
    thread.start()
    cleanup.append(lambda: (worker.stop(), thread.join(30)))
    wait_until(worker.assigned.is_set, 60, "the slot worker joined")
    args = ["--max-concurrency", str(LIMIT), "--feedback-topic", feedback]
    scheduler = start_scheduler(d, workdir, "concurrency", args, cleanup)
    scheduler.wait_ready()
    total = TENANTS * per_tenant
    held: list[float] = []
    deadline = total / LIMIT * LATENCY * 3 + 60
    with Sampler(log):
        _produce(bootstrap, d.topics.ingest, per_tenant)
        _wait(log, scheduler, total, held, deadline)
    return _summary(log, held, deadline)


def run_sdk(bootstrap: str, workdir: Path, per_tenant: int) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    log = CallLog()

    async def call(request: Request) -> None:
        log.start(request.tenant, request.request_id)
        try:
            await asyncio.sleep(LATENCY)
        finally:
            log.end(request.tenant, request.request_id)

    total = TENANTS * per_tenant
    held: list[float] = []
    deadline = total / LIMIT * LATENCY * 3 + 60
    with (
        feedback_loop(
            bootstrap,
            workdir,
            call,
            "--max-concurrency",
            str(LIMIT),
            "--feedback-topic",
            FEEDBACK,
            "--log-level",
            "warning",
            partitions=PARTITIONS,
            concurrency=64,
        ) as loop,
        Sampler(log),
    ):
        loop.produce({f"t{t:02d}": per_tenant for t in range(TENANTS)})
        _wait(log, loop.scheduler, total, held, deadline)
    return _summary(log, held, deadline)


def phase(
    bootstrap: str, workdir: Path, quick: bool, cleanup: list[Callable[[], None]]
) -> dict[str, Any]:
    per_tenant = 5 if quick else 15  # 200 or 600 calls: 10 or 30 s at 20 calls/s
    return {
        "status": "ok",
        "max_concurrency": LIMIT,
        "latency_s": LATENCY,
        "tenants": TENANTS,
        "slots": run_slots(bootstrap, workdir / "conc-slots", per_tenant, cleanup),
        "sdk": run_sdk(bootstrap, workdir / "conc-sdk", per_tenant),
    }


def line(r: dict[str, Any]) -> list[str]:
    """The phase's caption and table in docs/benchmarks.md."""
    c = r.get("concurrency") or {}
    if c.get("status") != "ok":
        return [f"**Concurrency limit**: {c.get('error', 'not run')}", ""]
    rows = [
        "| worker | calls/s | in flight, mean | in flight, max | scheduler's slots, max |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, label in (("slots", "calls at once (SlotWorker)"), ("sdk", "fairstream.Worker")):
        run = c[key]
        rows.append(
            f"| {label} | {run['calls_per_s']} | {run['in_flight_mean']} | "
            f"{run['in_flight_max']} | {run['scheduler_slots_max']:g} |"
        )
    return [
        f"**Concurrency limit** (`--max-concurrency {c['max_concurrency']}`, no `--rate`, "
        f"calls of {c['latency_s']:g} s, a backlog over {c['tenants']} tenants; in flight "
        "sampled at the API every 50 ms while the backlog lasted; ideal 20 and 20 calls/s):",
        "",
        *rows,
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if not args.bootstrap:
        parser.error("give --bootstrap or KAFKA_BOOTSTRAP_SERVERS")
    cleanup: list[Callable[[], None]] = []
    with tempfile.TemporaryDirectory(prefix="fairstream-conc-") as tmp:
        started = time.monotonic()
        try:
            result = phase(args.bootstrap, Path(tmp), args.quick, cleanup)
        finally:
            for undo in reversed(cleanup):
                try:
                    undo()
                except Exception as exc:
                    print(f"cleanup: {exc!r}")
        result["phase_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(result, indent=1))
    print("\n".join(line({"concurrency": result})))


if __name__ == "__main__":
    main()
