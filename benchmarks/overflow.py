"""Overflow scenario: a flood over the default backlog cap beside quiet tenants.

The burst scenario of ``benchmarks/burst.py`` (quiet tenants at 2 records/s on every
partition, sending before, during and after the flood; dwell measured by a read_committed
consumer outside the scheduler, beside FIFO and the ideal GPS schedule), but with the
scheduler's default ``--max-backlog`` (100,000): everything a flooding tenant writes beyond
it is dead-lettered ``backlog-full`` while the quiet tenants go on. Runs:

- one tenant floods partition 0 of 4 with 300,000 and with 1,000,000 records;
- two tenants flood partitions 0 and 4 of 8, each with 300,000 records (``--quick``: fewer).

Besides dwell it prints the time to take the flood in (ingested or dead-lettered) and the dead
letters written per second (``fairstream_dead_letters_total`` from the flood's start to its
last increase). Targets: quiet p99 at most 0.5 s on the other partitions and 3 s on the
flood's own (goal for both: 2x the ideal + 0.1 s).

    .venv/bin/python -m benchmarks.overflow [--bootstrap HOST:PORT] [--quick] [--json]

``benchmarks/run_all.py`` runs it as its ``overflow`` phase; its table is
``tables.overflow_table``, its targets ``targets.overflow_targets``. Prints numbers, asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import burst
from benchmarks.common import Broker, logger

RATE = 500.0
# (records per flooding tenant, partitions, flooded partitions)
RUNS = ((300_000, 4, (0,)), (1_000_000, 4, (0,)), (300_000, 8, (0, 4)))
QUICK_RUNS = ((150_000, 4, (0,)), (150_000, 8, (0, 4)))

log = logger("overflow")


def phase(
    bootstrap: str,
    workdir: Path,
    quick: bool,
    _cleanup: list[Callable[[], None]] | None = None,
    rate: float = RATE,
) -> dict[str, Any]:
    """Every run of ``RUNS`` (``QUICK_RUNS``), each in its own deployment."""
    runs: list[dict[str, Any]] = []
    after = 10.0 if quick else 20.0
    for records, partitions, floods in QUICK_RUNS if quick else RUNS:
        try:
            run = burst.run_once(
                bootstrap,
                workdir,
                records,
                rate,
                after,
                drain_timeout=120.0,
                raise_cap=False,
                partitions=partitions,
                floods=floods,
            )
        except Exception as exc:  # one failed run must not lose the others' numbers
            log(f"{records:,} x {len(floods)} failed: {exc!r}")
            run = {
                "status": "error",
                "records": records,
                "partitions": partitions,
                "burst_partitions": list(floods),
                "error": repr(exc)[:500],
            }
        runs.append(run)
        log(f"{records:,} x {len(floods)}: {json.dumps(run.get('dwell') or run)}")
    ok = [r for r in runs if r["status"] == "ok"]
    return {"status": "ok" if ok else "error", "rate": rate, "runs": runs}


def print_table(result: dict[str, Any]) -> None:
    from benchmarks.common import print_targets
    from benchmarks.tables import overflow_table
    from benchmarks.targets import overflow_targets

    print("\n".join(overflow_table({"overflow": result})))
    print()
    print_targets(overflow_targets({"overflow": result}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--rate", type=float, default=RATE, help="scheduler --rate")
    parser.add_argument("--quick", action="store_true", help="smaller floods")
    parser.add_argument("--workdir", type=Path, help="keep the scheduler's log here")
    parser.add_argument("--json", action="store_true", help="also print the result as JSON")
    args = parser.parse_args()
    broker = Broker.find(args.bootstrap)
    tmp = tempfile.mkdtemp(prefix="fairstream-overflow-")
    workdir = args.workdir or Path(tmp)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = phase(broker.bootstrap, workdir, args.quick, None, args.rate)
    finally:
        broker.stop()
        if args.workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    print_table(result)


if __name__ == "__main__":
    main()
