"""What a record's headers cost the scheduler, set by set, on this checkout, alternating.

    .venv/bin/python -m benchmarks.headers [--rounds 3] [--records 200000]
        [--sets none,trace,cost1-trace,cost,cost-trace] [--bootstrap HOST:PORT]

Each set (``benchmarks.common.HEADER_SETS``; ``none``: records without headers) gets a
pre-filled 1,000-tenant topic of its own. Each round runs every set in turn: the plain
consume->produce loop over that topic, then a scheduler with no rate limit draining it
(``throughput.max_throughput``, one round). Alternating, the shared machine's drift hits every
set alike. Prints one line per drain and, per set, the medians: records/s, the ratio to the
loop run just before, µs of scheduler CPU a record, and the largest progress record the
scheduler wrote (``fairstream_progress_record_max_bytes``: the settled ranges above the
partitions' marks, which multiply when tenants drain at different speeds).

The sets take cost-weighted records apart: ``trace`` is a header of the producer's own,
``cost1-trace`` two headers with tenants that drain alike, ``cost`` tenants that drain at
four speeds (costs 1 to 4) with one header, ``cost-trace`` both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import sampling, throughput
from benchmarks.common import HEADER_SETS, Broker, delete_topics, log

NONE = "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--deadline", type=float, default=300.0)
    parser.add_argument(
        "--sets",
        default=",".join([NONE, *HEADER_SETS]),
        help=f"comma-separated: {NONE} and any of {', '.join(HEADER_SETS)}",
    )
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    args = parser.parse_args()
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = [s for s in sets if s != NONE and s not in HEADER_SETS]
    if unknown:
        parser.error(f"unknown header sets {unknown}; known: {NONE}, {', '.join(HEADER_SETS)}")
    broker = Broker.find(args.bootstrap)
    sampling.broker_pid = broker.pid
    workdir = Path(tempfile.mkdtemp(prefix="fairstream-headers-"))
    topics: dict[str, list[str]] = {}
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in sets}
    try:
        for name in sets:
            topics[name] = throughput.shared_topic(
                broker.bootstrap, args.records, None if name == NONE else name
            )
        for round_ in range(args.rounds):
            for name in sets:
                data = workdir / f"round{round_}-{name}"  # a fresh scheduler identity
                data.mkdir()
                row = throughput.compared_round(
                    broker.bootstrap, data, topics[name], args.records, args.deadline
                )
                results[name].append(row)
                log(
                    f"round {round_ + 1} {name}: {row['records_per_s']:,} records/s, "
                    f"{row['ratio']:.3f}x the loop, {row['cpu_us']:.1f} µs CPU/record, "
                    f"progress record up to {row['progress_bytes']:,.0f} bytes"
                )
    finally:
        delete_topics(broker.bootstrap, [t for pair in topics.values() for t in pair])
        broker.stop()
    for name in sets:
        rows = results[name]
        if not rows:
            continue
        print(
            f"{name}: median {statistics.median(r['records_per_s'] for r in rows):,.0f} "
            f"records/s, {statistics.median(r['ratio'] for r in rows):.3f}x the loop, "
            f"{statistics.median(r['cpu_us'] for r in rows):.1f} µs CPU/record, progress "
            f"record up to {max(r['progress_bytes'] for r in rows):,.0f} bytes "
            f"({len(rows)} rounds)"
        )


if __name__ == "__main__":
    main()
