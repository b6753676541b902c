"""Gaps benchmark: a paused tenant interleaved with a busy one in one ingest partition.

One partition; ``slow`` paused (``max_backlog`` none) before anything is written; then the
pattern (slow, fast, fast) x ``--repeats`` (1,000,000: 3,000,000 records) produced; then a
scheduler with no rate limit and static membership. Measured:

- ``busy_drain_s``: from /readyz 200 until all 2 x repeats records of ``fast`` are emitted
  (its ``fairstream_tenant_emitted_records_total``);
- ``largest_progress_bytes``: the largest progress record (chunk) it wrote
  (``fairstream_progress_record_max_bytes``), against the progress topic's
  ``max.message.bytes`` (``progress_limit_bytes``);
- ``restart_to_ready_s``: kill -9, a new process on the same data directory and group
  instance id: seconds from its start until /readyz is 200 (target <= 5 s);
- ``held_drain_s``: then ``slow`` is resumed: seconds until its repeats records are out.

    .venv/bin/python -m benchmarks.gaps [--bootstrap HOST:PORT] [--repeats 1000000] [--quick]

``benchmarks/run_all.py`` runs it as its ``gaps`` phase (``phase()``). Prints numbers,
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks.common import Broker, delete_all, logger, new_deployment, stop, undoing
from fairstream.adapters.admin import admin_client, topic_configs
from fairstream.config.topics import progress_topic
from fairstream.core import TenantPolicy
from fairstream.wire.policy import PolicyRecord, encode_policy
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess

log = logger("gaps")

SLOW, FAST = b"slow", b"fast"


def _policy(bootstrap: str, topic: str, paused: bool) -> None:
    record = PolicyRecord(
        TenantPolicy(max_backlog=None, paused=paused), updated_at_ms=int(time.time() * 1000)
    )
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, key=SLOW, value=encode_policy(record))
    producer.flush(30)


def _produce(bootstrap: str, topic: str, repeats: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000})
    started = time.monotonic()
    for i in range(repeats):
        for key, seq in ((SLOW, i), (FAST, 2 * i), (FAST, 2 * i + 1)):
            value = b"%s:%08d" % (key, seq)
            while True:
                try:
                    producer.produce(topic, value, key)
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.flush(300)
    return time.monotonic() - started


def _emitted(scheduler: SchedulerProcess, tenant: bytes) -> tuple[float, float]:
    """(records of ``tenant`` emitted, largest progress record) from /metrics."""
    status, body = scheduler.get("/metrics")
    if status != 200:
        return -1.0, -1.0
    emitted = largest = 0.0
    label = f'fairstream_tenant_emitted_records_total{{tenant="{tenant.decode()}"}}'
    for line in body.splitlines():
        if line.startswith(label + " "):
            emitted = float(line.rsplit(" ", 1)[1])
        elif line.startswith("fairstream_progress_record_max_bytes "):
            largest = float(line.rsplit(" ", 1)[1])
    return emitted, largest


def _drain(scheduler: SchedulerProcess, tenant: bytes, target: int, timeout: float) -> float:
    started = time.monotonic()
    wait_until(
        lambda: _emitted(scheduler, tenant)[0] >= target,
        timeout,
        lambda: f"{tenant!r}: {_emitted(scheduler, tenant)[0]:.0f} of {target} emitted",
        interval=0.25,
    )
    return time.monotonic() - started


def measure(
    bootstrap: str, workdir: Path, repeats: int, cleanup: list[Callable[[], None]]
) -> dict[str, Any]:
    d: Deployment = new_deployment(bootstrap, "gaps", 1)
    cleanup.append(lambda: delete_all(d))
    _policy(bootstrap, d.topics.policy, paused=True)
    produced_s = _produce(bootstrap, d.topics.ingest, repeats)
    log(f"produced {3 * repeats:,} records in {produced_s:.1f} s")
    args = ("--max-backlog", "100000000", "--log-level", "info")
    instance = ("--group-instance-id", unique("gaps"))
    first = SchedulerProcess(d, workdir, *args, *instance, name="gaps")
    first.start()
    cleanup.append(lambda: stop(first))
    first.wait_ready(timeout=120)
    busy_drain_s = _drain(first, FAST, 2 * repeats, 3600)
    _, largest = _emitted(first, FAST)
    log(f"busy tenant drained in {busy_drain_s:.1f} s; largest progress record {largest:.0f} B")
    assert first.proc is not None
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    second = SchedulerProcess(d, workdir, *args, *instance, name="gaps")
    second.data_dir = first.data_dir
    started = time.monotonic()
    second.start()
    cleanup.append(lambda: stop(second))
    second.wait_ready(timeout=600)
    restart_s = time.monotonic() - started
    log(f"restart to ready after kill -9: {restart_s:.2f} s")
    _policy(bootstrap, d.topics.policy, paused=False)
    held_drain_s = _drain(second, SLOW, repeats, 3600)
    largest = max(largest, _emitted(second, SLOW)[1])
    limit = topic_configs(admin_client(bootstrap), progress_topic(d.app_id), ("max.message.bytes",))
    return {
        "status": "ok",
        "repeats": repeats,
        "records": 3 * repeats,
        "busy_drain_s": round(busy_drain_s, 1),
        "busy_records_per_s": round(2 * repeats / busy_drain_s),
        "largest_progress_bytes": int(largest),
        "progress_limit_bytes": int(limit["max.message.bytes"] or 0),
        "restart_to_ready_s": round(restart_s, 2),
        "restart_target_s": 5.0,
        "held_drain_s": round(held_drain_s, 1),
    }


def phase(
    bootstrap: str,
    workdir: Path,
    quick: bool,
    cleanup: list[Callable[[], None]] | None = None,
    repeats: int | None = None,
) -> dict[str, Any]:
    """The measurement; --quick: 100,000 repeats instead of 1,000,000."""
    with undoing() as undo:
        return measure(
            bootstrap, workdir, repeats or (100_000 if quick else 1_000_000), cleanup or undo
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--keep-logs", type=Path, help="a directory for the schedulers' logs")
    args = parser.parse_args()
    broker = Broker.find(args.bootstrap)
    try:
        with tempfile.TemporaryDirectory(prefix="fairstream-gaps-") as workdir:
            where = args.keep_logs or Path(workdir)
            where.mkdir(parents=True, exist_ok=True)
            result = phase(broker.bootstrap, where, args.quick, repeats=args.repeats)
        print(json.dumps(result, indent=2))
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
