"""Share-group workers beside classic ones: the same records, the same counts.

One egress topic of ONE partition holds N records of 20 tenants, written in waves of 50 (as
a scheduler emits); an async handler takes ``--latency`` seconds per call. Two runs, each
with a group of its own, on a broker with share groups (Apache Kafka 4.4 by default):

- classic: three ``fairstream.Worker``s (concurrency 16 each) in one consumer group: one
  partition, so one of them does all the work and the others wait;
- share: three ``fairstream.ShareWorker``s (concurrency 16 each) in one share group.

Printed per run: seconds to handle every record, calls per second, records handled by each
worker, duplicates (a record handled twice), records missing, dead letters.

    .venv/bin/python -m benchmarks.share_workers [--bootstrap HOST:PORT] [--records 3000]
        [--latency 0.05]

Without ``--bootstrap`` a development broker of 4.4.0 of its own is started and stopped.
Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import threading
import time
from typing import Any

from confluent_kafka import Producer

from fairstream import Request, ShareWorker, Worker, wire
from fairstream_dev.harness.kafka import create_topics, unique
from fairstream_dev.kafka import DevBroker

WORKERS = 3
CONCURRENCY = 16
WAVE = 50


def feed(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for start in range(0, records, WAVE):
        for i in range(start, min(records, start + WAVE)):
            producer.produce(
                topic,
                value=b"x" * 100,
                key=f"t{i % 20}".encode(),
                partition=0,
                headers=[(wire.REQUEST_ID, f"r-{i}".encode())],
            )
        producer.flush(30)


def run(bootstrap: str, kind: str, records: int, latency: float) -> dict[str, Any]:
    egress, dlq, group = unique(f"sw-{kind}"), unique("sw-dlq"), unique(f"sw-{kind}-group")
    create_topics(bootstrap, [egress, dlq], partitions=1)
    calls: collections.Counter[str] = collections.Counter()
    per_worker = [0] * WORKERS

    def handler_for(n: int) -> Any:
        async def handler(request: Request) -> None:
            await asyncio.sleep(latency)
            calls[request.request_id] += 1
            per_worker[n] += 1

        return handler

    common: dict[str, Any] = {
        "bootstrap": bootstrap,
        "egress_topic": egress,
        "dlq_topic": dlq,
        "group_id": group,
        "feedback_topic": None,
        "concurrency": CONCURRENCY,
    }
    workers: list[Worker | ShareWorker] = [
        (ShareWorker if kind == "share" else Worker)(handler_for(n), **common)
        for n in range(WORKERS)
    ]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
        w.running.is_set() if isinstance(w, ShareWorker) else w.running for w in workers
    ):
        time.sleep(0.1)
    start = time.monotonic()
    feed(bootstrap, egress, records)
    limit = start + max(120.0, 3 * records * latency)
    while len(calls) < records and time.monotonic() < limit:
        time.sleep(0.05)
    seconds = time.monotonic() - start
    for w in workers:
        w.stop()
    for thread in threads:
        thread.join(60)
    dead = sum(
        w.dead_lettered if isinstance(w, ShareWorker) else w.stats.dead_lettered for w in workers
    )
    return {
        "kind": kind,
        "seconds": round(seconds, 2),
        "calls_per_s": round(sum(calls.values()) / seconds, 1),
        "per_worker": per_worker,
        "duplicates": sum(n - 1 for n in calls.values() if n > 1),
        "missing": records - len(calls),
        "dead_letters": dead,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="a broker with share groups (Kafka 4.2+)")
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per call")
    args = parser.parse_args()
    broker = None
    bootstrap = args.bootstrap
    if not bootstrap:
        broker = DevBroker(
            state_dir=DevBroker().state_dir.parent / "dev-kafka-4.4.0-bench", kafka_version="4.4.0"
        )
        bootstrap = (broker.status() or broker.up()).bootstrap
    try:
        rows = [run(bootstrap, kind, args.records, args.latency) for kind in ("classic", "share")]
    finally:
        if broker is not None:
            broker.down()
    print(
        f"\n**Share-group workers** ({args.records:,} records on 1 egress partition, "
        f"{WORKERS} workers of concurrency {CONCURRENCY}, calls of {args.latency:g} s):\n"
    )
    print(
        "| workers | seconds | calls/s | handled per worker | duplicates | missing | dead letters |"
    )
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['kind']} | {r['seconds']} | {r['calls_per_s']} | {r['per_worker']} | "
            f"{r['duplicates']} | {r['missing']} | {r['dead_letters']} |"
        )


if __name__ == "__main__":
    main()
