"""What a scheduler costs when little arrives: its CPU idle, and under a trickle of records.

Most hours of a deployment are not bursts. For each of two schedulers, one at ``--rate 500``
and one without a rate limit, on an ingest topic of 4 partitions:

1. started, waited for until /readyz says ready, then left 2 s to settle;
2. ``--seconds`` of nothing: the cores it uses idle;
3. ``--seconds`` of ``--per-second`` records (8 tenants, one after another, 100 B each,
   written by this process): the cores it uses then, and its CPU per record. The records
   counted on egress (/metrics) say it served them.

Cores are the scheduler process's CPU seconds (all its threads, from /proc) over wall
seconds. A scheduler that spun while waiting for its next commit used 0.7 of a core at 16
records/s; one that waits uses a few hundredths.

    .venv/bin/python -m benchmarks.light_load [--bootstrap HOST:PORT] [--seconds 10]
        [--per-second 16] [--json]

Without ``--bootstrap`` (or ``KAFKA_BOOTSTRAP_SERVERS``) the development broker is used
(started if it is not running). Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks import sampling
from benchmarks.common import (
    EGRESS,
    VALUE_SIZE,
    delete_all,
    kill,
    logger,
    metrics,
    new_deployment,
    standalone,
    undoing,
)
from fairstream_dev.harness.scheduler import SchedulerProcess

PARTITIONS = 4
TENANTS = 8
SETTLE = 2.0  # seconds after ready before anything is measured (first commits, the audit)

log = logger("light-load")


def cores(process: SchedulerProcess, seconds: float, during: Any = None) -> float:
    """Cores ``process`` used over ``seconds`` (``during(deadline)`` runs meanwhile)."""
    pid = process.proc.pid if process.proc is not None else None
    before, started = sampling.cpu_seconds(pid), time.monotonic()
    if during is None:
        time.sleep(seconds)
    else:
        during(started + seconds)
    took = time.monotonic() - started
    share = sampling.cpu_share(pid, before, sampling.cpu_seconds(pid), took)
    if share is None:
        raise RuntimeError(f"the scheduler's CPU could not be read:\n{process.tail()}")
    return share


def trickle(bootstrap: str, topic: str, per_second: float, deadline: float) -> int:
    """``per_second`` records until ``deadline``, on a steady clock; how many were written."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    value = b"x" * VALUE_SIZE
    sent, start = 0, time.monotonic()
    while True:
        due = start + sent / per_second
        if due >= deadline:
            break
        time.sleep(max(0.0, due - time.monotonic()))
        producer.produce(topic, value, f"light-{sent % TENANTS}".encode())
        producer.poll(0)
        sent += 1
    producer.flush(30)
    return sent


def measure(
    bootstrap: str, workdir: Path, name: str, args: list[str], seconds: float, per_second: float
) -> dict[str, Any]:
    d = new_deployment(bootstrap, f"light-{name}", PARTITIONS)
    with undoing() as undo:
        undo.append(functools.partial(delete_all, d))
        process = SchedulerProcess(d, workdir, *args, "--log-level", "warning", name=name)
        process.start()
        undo.append(functools.partial(kill, process))
        process.wait_ready(timeout=120)
        time.sleep(SETTLE)
        idle = cores(process, seconds)
        written: list[int] = []
        busy = cores(
            process,
            seconds,
            lambda deadline: written.append(
                trickle(bootstrap, d.topics.ingest, per_second, deadline)
            ),
        )
        deadline = time.monotonic() + 10
        served = metrics(process).get(EGRESS, 0.0)
        while served < written[0] and time.monotonic() < deadline:
            time.sleep(0.1)
            served = metrics(process).get(EGRESS, 0.0)
    per_record_ms = busy * seconds / written[0] * 1000 if written[0] else None
    out = {
        "scheduler": " ".join(args) or "no rate limit",
        "idle_cores": idle,
        "busy_cores": busy,
        "per_second": per_second,
        "written": written[0],
        "on_egress": int(served),
        "cpu_ms_per_record": round(per_record_ms, 2) if per_record_ms else None,
    }
    log(str(out))
    return out


def run(bootstrap: str, workdir: Path, seconds: float, per_second: float) -> dict[str, Any]:
    runs = [
        measure(bootstrap, workdir, "rate500", ["--rate", "500"], seconds, per_second),
        measure(bootstrap, workdir, "unlimited", [], seconds, per_second),
    ]
    return {"seconds": seconds, "per_second": per_second, "runs": runs}


def table(result: dict[str, Any]) -> str:
    rate = f"{result['per_second']:g}"
    lines = [
        f"**Light load** ({PARTITIONS} ingest partitions; {result['seconds']:g} s idle, then "
        f"{result['seconds']:g} s of {rate} records/s over {TENANTS} tenants; cores = the "
        "scheduler process's CPU seconds over wall seconds; `benchmarks/light_load.py`):",
        "",
        f"| scheduler | cores idle | cores at {rate} records/s | CPU ms a record | on egress |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['scheduler']} | {r['idle_cores']:.2f} | {r['busy_cores']:.2f} | "
            f"{r['cpu_ms_per_record']} | {r['on_egress']:,} of {r['written']:,} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--seconds", type=float, default=10.0, help="of each phase")
    parser.add_argument("--per-second", type=float, default=16.0, help="records a second")
    parser.add_argument("--json", action="store_true", help="also print the result as JSON")
    args = parser.parse_args()
    result = standalone(
        args.bootstrap, lambda b, w: run(b, w, args.seconds, args.per_second), json_path=None
    )
    if args.json:
        print(json.dumps(result, indent=2))
    print(table(result))


if __name__ == "__main__":
    main()
