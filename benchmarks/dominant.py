"""Dominant-resource fairness end to end: both limits binding, with and without
``--fairness dominant``, side by side.

Two tenants on one scheduler with ``--rate 400`` and ``--cost-rate 4000``: ``cheap`` sends
many requests of cost 1 (it uses the record limit most), ``costly`` few of cost 100 (the
cost limit). A tenant's dominant share over a window is the larger of its records over the
window's record allowance and its cost over the cost allowance. By cost alone (the
default) the DRR gives both the same cost per round, so cheap takes about 99% of the record
limit and costly about 10% of the cost limit; with ``--fairness dominant`` both get the
same dominant share (about 0.91 each, both limits used up).

Judged on the egress in scheduling order (``fairstream-scheduled-ms``) over a window of
``WINDOW`` records after ``SETTLE``: the two shares are over the same seconds, so their
ratio needs no duration. ``tests/integration/test_dominant_fairness.py`` asserts the same
runs; this prints them for docs/benchmarks.md ("Fairness scenarios").

    .venv/bin/python -m benchmarks.dominant [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Message, Producer

from benchmarks.common import delete_all, log, new_deployment, start_scheduler
from fairstream import wire
from fairstream_dev.harness.scheduler import TopicReader

RATE, COST_RATE = 400, 4000
CHEAP, COSTLY = 1, 100
SETTLE, WINDOW, MARGIN = 300, 2000, 200
MODES = {"cost": (), "dominant": ("--fairness", "dominant")}
FLAGS = {"cost": "`--fairness cost` (default)", "dominant": "`--fairness dominant`"}


def backlog(bootstrap: str, topic: str) -> None:
    """cheap's 4,000 requests on partition 0, costly's 600 on 1 (neither holds the other's
    low-water mark)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(4000):
        producer.produce(topic, b"c-%d" % i, b"cheap", partition=0, headers={wire.COST: b"1"})
        if i < 600:
            producer.produce(
                topic, b"x-%d" % i, b"costly", partition=1, headers={wire.COST: b"%d" % COSTLY}
            )
        if i % 500 == 0:
            producer.poll(0)
    if producer.flush(30):
        raise RuntimeError("the backlog was not all written within 30 s")


def scheduled_ms(msg: Message) -> int:
    return int(dict(msg.headers() or [])[wire.SCHEDULED_MS])


def dominant_shares(records: list[Message]) -> dict[str, float]:
    """Each tenant's dominant share of the window's allowance: max(records / rate, cost /
    cost rate), over the window's seconds of scheduling stamps."""
    counts: Counter[str] = Counter()
    costs: Counter[str] = Counter()
    for m in records:
        tenant = (m.key() or b"").decode()
        counts[tenant] += 1
        costs[tenant] += int(dict(m.headers() or [])[wire.COST])
    seconds = max((scheduled_ms(records[-1]) - scheduled_ms(records[0])) / 1000, 1e-3)
    return {
        t: max(counts[t] / (RATE * seconds), costs[t] / (COST_RATE * seconds))
        for t in sorted(counts)
    }


def run_mode(bootstrap: str, workdir: Path, mode: str, cleanup: list[Callable[[], None]]) -> Any:
    d = new_deployment(bootstrap, "dominant", 2)
    cleanup.append(lambda: delete_all(d))
    args = ["--rate", str(RATE), "--cost-rate", str(COST_RATE), *MODES[mode]]
    scheduler = start_scheduler(d, workdir, f"dominant-{mode}", args, cleanup)
    scheduler.wait_ready(timeout=120)
    reader = TopicReader(bootstrap, d.topics.egress)
    cleanup.append(reader.close)
    backlog(bootstrap, d.topics.ingest)
    reader.read_until(SETTLE + WINDOW + MARGIN, timeout=90)
    window = sorted(reader.messages, key=scheduled_ms)[SETTLE : SETTLE + WINDOW]
    shares = dominant_shares(window)
    kinds = Counter((m.key() or b"").decode() for m in window)
    return {
        "cheap": shares.get("cheap", 0.0),
        "costly": shares.get("costly", 0.0),
        "ratio": shares.get("cheap", 0.0) / shares["costly"] if shares.get("costly") else None,
        "records": dict(kinds),
    }


def run_drf(bootstrap: str, workdir: Path) -> dict[str, Any]:
    """Per mode (``cost``, ``dominant``): the two tenants' dominant shares (or the error)."""
    out: dict[str, Any] = {}
    for mode in MODES:
        cleanup: list[Callable[[], None]] = []
        try:
            out[mode] = run_mode(bootstrap, workdir, mode, cleanup)
        except Exception as exc:  # one failed run must not lose the other's numbers
            out[mode] = {"error": repr(exc)[:300]}
        finally:
            for undo in reversed(cleanup):
                with contextlib.suppress(Exception):
                    undo()
        log(f"dominant {mode}: {out[mode]}")
    return out


def table(drf: dict[str, Any]) -> list[str]:
    """The side-by-side table of ``run_drf``'s result."""
    lines = [
        f"Dominant-resource fairness, both limits binding (`--rate {RATE} --cost-rate "
        f"{COST_RATE}`; cheap: cost {CHEAP}, costly: cost {COSTLY}; {WINDOW} egress records "
        f"after {SETTLE}; `benchmarks/dominant.py`):",
        "",
        "| fairness | cheap's dominant share | costly's dominant share | ratio | records (cheap, "
        "costly) |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for mode, flag in FLAGS.items():
        run = drf.get(mode, {})
        if "error" in run or not run:
            lines.append(f"| {flag} | failed: {run.get('error', 'not run')} | | | |")
            continue
        ratio = "-" if run["ratio"] is None else f"{run['ratio']:.3f}"
        counts = run["records"]
        lines.append(
            f"| {flag} | {run['cheap']:.3f} | {run['costly']:.3f} | {ratio} | "
            f"{counts.get('cheap', 0)}, {counts.get('costly', 0)} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    args = parser.parse_args()
    from benchmarks.common import Broker

    broker = Broker.find(args.bootstrap)
    try:
        result = run_drf(broker.bootstrap, Path(tempfile.mkdtemp(prefix="fairstream-drf-")))
    finally:
        broker.stop()
    print(json.dumps(result, indent=2))
    print("\n".join(table(result)))


if __name__ == "__main__":
    main()
