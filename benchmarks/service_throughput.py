"""Benchmark: records per second one scheduler process absorbs and emits, on a real broker.

Two phases, each on a deployment of its own (unique topics and app id), each with one
``fairstream scheduler`` process started through the harness the integration tests use
(``fairstream_dev.harness``):

- absorption: the scheduler runs with ``--rate 1`` so that emission does not compete for
  the CPU; N records are produced; the rate is read from the scheduler's
  ``fairstream_ingested_records_total`` (polled every 0.1 s) between the first poll that
  sees a record buffered and the first that sees all N;
- emission: the scheduler runs with no rate limit; N records are produced; the emission
  rate is read the same way from ``fairstream_egress_records_total``, and the end-to-end
  rate is N over the time from the first record produced to the N-th record acknowledged
  on egress.

The producer runs in this process meanwhile and shares the machine, so its rate is printed
too: an absorption rate close to it is bounded by the producer, not by the scheduler.
Every phase has a deadline; the schedulers are stopped and the topics deleted at the end.
Prints one JSON object and a markdown table. Not a test: it asserts nothing.

    .venv/bin/python -m benchmarks.service_throughput [--records 200000] [--bootstrap HOST:PORT]

Without ``--bootstrap`` (or ``KAFKA_BOOTSTRAP_SERVERS``), the development broker is started
(or the running one reused) with ``fairstream_dev.kafka.DevBroker().up()``; a broker started
here is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from benchmarks.common import (
    EGRESS,
    INGESTED,
    Broker,
    delete_all,
    metrics,
    new_deployment,
    produce,
    stop,
)
from fairstream_dev.harness.scheduler import SchedulerProcess

POLL_INTERVAL = 0.1


@dataclass
class Sample:
    at: float  # time.monotonic()
    count: float


@dataclass
class Phase:
    name: str
    status: str  # "ok" or "timeout"
    records: int  # the counter's last value
    rate: float | None  # records/s between the first and the last sample that moved
    seconds: float | None
    produce_seconds: float
    end_to_end_seconds: float | None = None
    egress_topic_records: int | None = None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "status": self.status,
            "records_seen": self.records,
            "records_per_s": None if self.rate is None else round(self.rate),
            "seconds": None if self.seconds is None else round(self.seconds, 3),
            "producer_seconds": round(self.produce_seconds, 3),
        }
        if self.end_to_end_seconds is not None:
            out["end_to_end_seconds"] = round(self.end_to_end_seconds, 3)
        if self.egress_topic_records is not None:
            out["egress_topic_records"] = self.egress_topic_records
        return out


def watch(
    scheduler: SchedulerProcess, name: str, target: int, deadline: float
) -> tuple[list[Sample], bool]:
    """Poll counter ``name`` until it reaches ``target`` or the deadline passes."""
    samples: list[Sample] = []
    while time.monotonic() < deadline:
        if not scheduler.alive():
            print(f"scheduler exited:\n{scheduler.tail()}", file=sys.stderr)
            break
        value = metrics(scheduler).get(name)
        if value is not None:
            samples.append(Sample(time.monotonic(), value))
            if value >= target:
                return samples, True
        time.sleep(POLL_INTERVAL)
    return samples, False


def rate_of(samples: list[Sample]) -> tuple[float | None, float | None]:
    """(records/s, seconds) from the last sample still at zero to the last sample.

    The last zero sample is within one poll interval before the first record counted, so
    the interval errs long (the rate errs low) by at most one interval (0.1 s).
    """
    moved = [i for i, s in enumerate(samples) if s.count > 0]
    if not moved:
        return None, None
    start = samples[moved[0] - 1] if moved[0] > 0 else samples[moved[0]]
    end = samples[-1]
    seconds = end.at - start.at
    if seconds <= 0:
        return None, None
    return (end.count - start.count) / seconds, seconds


def topic_records(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fairstream-bench-probe"})
    try:
        total = 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
            total += high - low
        return total
    finally:
        consumer.close()


def run_phase(
    name: str,
    bootstrap: str,
    workdir: Path,
    args: argparse.Namespace,
    scheduler_args: list[str],
    metric: str,
    cleanup: list[Callable[[], None]],
) -> Phase:
    deployment = new_deployment(bootstrap, "throughput", args.partitions)
    cleanup.append(lambda: delete_all(deployment))
    scheduler = SchedulerProcess(deployment, workdir, *scheduler_args, name=name)
    scheduler.start()
    cleanup.append(lambda: stop(scheduler))
    scheduler.wait_ready(timeout=120)
    print(f"[{name}] scheduler ready; producing {args.records} records", file=sys.stderr)
    deadline = time.monotonic() + args.deadline
    # The counter is watched from a thread from before the first record is produced, so
    # the samples cover the whole phase while this thread produces.
    watched: list[tuple[list[Sample], bool]] = []
    watcher = threading.Thread(
        target=lambda: watched.append(watch(scheduler, metric, args.records, deadline)),
        daemon=True,
    )
    watcher.start()
    produce_started = time.monotonic()
    produce_seconds = produce(
        bootstrap, deployment.topics.ingest, args.records, args.tenants, args.value_size
    )
    watcher.join(max(0.0, deadline - time.monotonic()) + 10)
    samples, done = watched[0] if watched else ([], False)
    rate, seconds = rate_of(samples)
    phase = Phase(
        name=name,
        status="ok" if done else "timeout",
        records=int(samples[-1].count) if samples else 0,
        rate=rate,
        seconds=seconds,
        produce_seconds=produce_seconds,
        end_to_end_seconds=samples[-1].at - produce_started if done and samples else None,
    )
    if metric == EGRESS:
        phase.egress_topic_records = topic_records(
            bootstrap, deployment.topics.egress, args.partitions
        )
    print(f"[{name}] {phase.as_dict()}", file=sys.stderr)
    if not done:
        print(f"[{name}] scheduler log tail:\n{scheduler.tail()}", file=sys.stderr)
    return phase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds per phase")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the schedulers' logs and state here [default: a temp dir]",
    )
    args = parser.parse_args()

    broker = Broker.find(args.bootstrap)
    bootstrap = broker.bootstrap

    cleanup: list[Callable[[], None]] = []
    phases: dict[str, Phase] = {}
    with tempfile.TemporaryDirectory(prefix="fairstream-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            phases["absorption"] = run_phase(
                "absorption", bootstrap, workdir, args, ["--rate", "1"], INGESTED, cleanup
            )
            for undo in reversed(cleanup):
                undo()
            cleanup.clear()
            phases["emission"] = run_phase(
                "emission", bootstrap, workdir, args, [], EGRESS, cleanup
            )
        finally:
            for undo in reversed(cleanup):
                undo()
            broker.stop()

    absorption, emission = phases["absorption"], phases["emission"]
    e2e = (
        args.records / emission.end_to_end_seconds
        if emission.status == "ok" and emission.end_to_end_seconds
        else None
    )
    result = {
        "benchmark": "service_throughput",
        "records": args.records,
        "value_bytes": args.value_size,
        "tenants": args.tenants,
        "partitions": args.partitions,
        "scheduler_processes": 1,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "absorption": absorption.as_dict(),
        "emission": emission.as_dict() | {"end_to_end_records_per_s": e2e and round(e2e)},
        "producer_records_per_s": {
            name: round(args.records / p.produce_seconds) for name, p in phases.items()
        },
    }
    print(json.dumps(result, indent=2))
    if args.json:
        return

    def row(what: str, records: int, seconds: float | None) -> str:
        if not seconds:
            return f"| {what} | timeout | - |"
        return f"| {what} | {records / seconds:,.0f} | {seconds:.2f} |"

    print()
    print(
        f"N = {args.records:,} records of {args.value_size} bytes, {args.tenants:,} tenants, "
        f"{args.partitions} partitions, 1 scheduler process (--rate 1 while absorbing, "
        "no rate limit while emitting)\n"
    )
    print("| measure | records/s | seconds |")
    print("| --- | ---: | ---: |")
    print(
        f"| absorption (ingest to buffers) | {_rate(absorption.rate)} | {_s(absorption.seconds)} |"
    )
    print(f"| emission (buffers to egress) | {_rate(emission.rate)} | {_s(emission.seconds)} |")
    print(
        row(
            "end to end (first produced to N-th egress ack)",
            args.records,
            emission.end_to_end_seconds,
        )
    )
    for name, p in phases.items():
        print(row(f"producer during {name}", args.records, p.produce_seconds))


def _rate(value: float | None) -> str:
    return "timeout" if value is None else f"{value:,.0f}"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
