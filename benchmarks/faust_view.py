"""The Faust agent's throughput at the paid API: a backlogged tenant behind a real Faust
worker, against the API's capacity, on the real broker.

``faust -A examples.faust_app worker`` (the example app: its ``PaidApiAgent`` with its
defaults, ``max_in_flight`` 16 and the default playout delay; a prompt starting with
``slow:`` takes 0.2 s) reads the egress of one ``fairstream scheduler --rate R`` (R = 40: the
API's capacity, 8 calls of 0.2 s at once). One tenant's backlog of ``slow:`` prompts waits
on the ingest topic from the start (2,000; ``--quick`` 1,200). Calls the agent completed
per second are counted from the scheduler's ``ok`` feedback (each call reports once), over
a steady window (from 10 s to 30 s after the first call; ``--quick`` 5-20 s). Target: at
least 0.95x of R. Asserts nothing.

    .venv/bin/python -m benchmarks.faust_view [--bootstrap HOST:PORT] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks.api_view import deployment_with_feedback
from benchmarks.common import (
    Row,
    exited,
    faust_worker,
    get,
    logger,
    standalone,
    start_scheduler,
    stop_process,
    undoing,
)
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.scheduler import SchedulerProcess

RATE = 40.0
TENANT = "backlogged"
TARGET = 0.95
OK = 'fairstream_feedback_records_total{outcome="ok"}'

log = logger("faust_view")


def _sizes(quick: bool) -> tuple[int, tuple[float, float]]:
    return (1200, (5.0, 20.0)) if quick else (2000, (10.0, 30.0))


def _ok(scheduler: SchedulerProcess) -> float:
    return scheduler.metric(OK) or 0.0


def run(
    bootstrap: str, workdir: Path, quick: bool, cleanup: list[Callable[[], None]]
) -> dict[str, Any]:
    records, (begin, end) = _sizes(quick)
    d, feedback = deployment_with_feedback(bootstrap, "faustview", cleanup)
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for i in range(records):
        producer.produce(d.topics.ingest, b"slow: prompt %d" % i, TENANT.encode())
        if i % 1000 == 999:
            producer.poll(0)
    assert producer.flush(30) == 0
    topics = d.topics
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "FAIRSTREAM_INGEST_TOPIC": topics.ingest,
        "FAIRSTREAM_EGRESS_TOPIC": topics.egress,
        "FAIRSTREAM_DLQ_TOPIC": topics.dlq,
        "FAIRSTREAM_POLICY_TOPIC": topics.policy,
        "FAIRSTREAM_FEEDBACK_TOPIC": feedback,
        "EXAMPLE_REQUESTS_TOPIC": unique("faustview-requests"),
        "EXAMPLE_APP_ID": unique("faustview-app"),
        "EXAMPLE_DATADIR": str(workdir / "faust-data"),
    }
    faust_log = workdir / "faust.log"
    proc = faust_worker("examples.faust_app", env, faust_log)
    cleanup.append(functools.partial(stop_process, proc))
    scheduler = start_scheduler(
        d, workdir, "faust-view", ["--rate", f"{RATE:g}", "--feedback-topic", feedback], cleanup
    )
    scheduler.wait_ready()

    def alive() -> None:
        exited(proc, faust_log, "the Faust worker")

    def first_call() -> bool:
        alive()
        return _ok(scheduler) > 0

    wait_until(first_call, 120, "the Faust agent's first call", interval=0.1)
    first = time.time()
    samples: list[tuple[float, float]] = []

    def through() -> bool:
        alive()
        samples.append((time.time() - first, _ok(scheduler)))
        return samples[-1][0] >= end

    wait_until(through, end + 60, f"{end:g} s of calls", interval=0.25)
    inside = [(t, ok) for t, ok in samples if begin <= t <= end]
    (t0, ok0), (t1, ok1) = inside[0], inside[-1]
    per_second = (ok1 - ok0) / (t1 - t0)
    return {
        "status": "ok",
        "rate": RATE,
        "records": records,
        "window_s": [round(t0, 2), round(t1, 2)],
        "calls_per_s": round(per_second, 2),
        "of_capacity": round(per_second / RATE, 3),
    }


def phase(
    bootstrap: str, workdir: Path, quick: bool, cleanup: list[Callable[[], None]] | None = None
) -> dict[str, Any]:
    with undoing() as undo:
        result = run(bootstrap, workdir, quick, cleanup if cleanup is not None else undo)
    log(json.dumps(result))
    return result


def targets(results: dict[str, Any]) -> list[Row]:
    """The Faust agent with a backlogged tenant: calls/s >= 0.95x the API's capacity."""
    ratio = get(results, "faust_view", "of_capacity")
    if ratio is None:
        return []
    calls = get(results, "faust_view", "calls_per_s")
    return [
        (
            f"Faust agent, a backlogged tenant: calls >= {TARGET}x the API's capacity",
            f"{ratio:.3f}x ({calls:g}/s of {RATE:g})",
            ratio >= TARGET,
            f"{abs(ratio - TARGET):.3f}x",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, help="write the JSON here too")
    args = parser.parse_args()
    result = standalone(
        args.bootstrap, lambda bootstrap, workdir: phase(bootstrap, workdir, args.quick), args.json
    )
    for row in targets({"faust_view": result}):
        print(f"{row[0]}: {row[1]} ({'met' if row[2] else 'MISSED'})")


if __name__ == "__main__":
    main()
