"""Across instances: two schedulers in one group, static split against demand.

One run per mode (``--share-by partitions`` and ``--share-by demand``), each on topics and
an app id of its own, with ``--rate 200`` and 4 ingest partitions split between two
instances:

1. Skewed placement: tenant A's backlog lives on instance 1 alone. Its egress rate.
2. Four tenants: A on instance 1; B, C and D on instance 2 (their backlogs arrive a few
   seconds after A's: the demand change). Per-tenant rates, Jain's index, the group's
   egress against the rate, the most records in any 1 s window, and the convergence time:
   from the first record of B, C or D on egress to the first 1 s window (by scheduling
   stamp) from which on A's rate stays within 10% of its fair share (a quarter).

Rates are counted on a read_committed egress consumer over windows defined by the
scheduler's ``fairstream-scheduled-ms`` stamps. Prints numbers, asserts nothing.

    .venv/bin/python -m benchmarks.group [--bootstrap HOST:PORT] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Message, Producer

from benchmarks.common import Broker, Row, failed_row, get, logger, print_targets
from fairstream import wire
from fairstream.analysis.stats import jain_index
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader

RATE = 200
BURST = 20
PARTITIONS = 4
MODES = ("partitions", "demand")


log = logger("group")


def _stamp(msg: Message) -> int:
    return int(dict(msg.headers())[wire.SCHEDULED_MS])


def _owned(proc: SchedulerProcess) -> list[int]:
    status, body = proc.get("/tenants")
    return list(json.loads(body)["partitions"]) if status == 200 else []


def _produce(bootstrap: str, topic: str, placement: dict[bytes, int], per_tenant: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(per_tenant):
        for tenant, partition in placement.items():
            producer.produce(topic, b"%s-%d" % (tenant, i), tenant, partition=partition)
    producer.flush(30)


def _rates(messages: list[Message], start_ms: int, end_ms: int) -> dict[str, float]:
    seconds = (end_ms - start_ms) / 1000
    counts = Counter(m.key().decode() for m in messages if start_ms <= _stamp(m) < end_ms)
    return {t: round(c / seconds, 1) for t, c in sorted(counts.items())}


def _worst_second(messages: list[Message]) -> int:
    stamps = sorted(_stamp(m) for m in messages)
    worst = j = 0
    for i, start in enumerate(stamps):
        while j < len(stamps) and stamps[j] < start + 1000:
            j += 1
        worst = max(worst, j - i)
    return worst


def run_mode(bootstrap: str, workdir: Path, mode: str, seconds: float) -> dict[str, Any]:
    deployment = Deployment(bootstrap, partitions=PARTITIONS).create()
    args = ("--rate", str(RATE), "--burst", str(BURST), "--share-by", mode)
    procs = [
        SchedulerProcess(deployment, workdir, *args, name=f"{mode}-{i}").start() for i in (1, 2)
    ]
    egress = TopicReader(bootstrap, deployment.topics.egress)
    try:
        for proc in procs:
            proc.wait_ready()
        wait_until(
            lambda: all(_owned(p) for p in procs) and sum(len(_owned(p)) for p in procs) == 4,
            60,
            "both instances own partitions",
            interval=0.2,
        )
        one, two = (_owned(p) for p in procs)
        per_tenant = int(RATE * seconds * 2)
        # Phase 1: A alone, on instance 1.
        _produce(bootstrap, deployment.topics.ingest, {b"A": one[0]}, per_tenant)
        egress.read_until(int(RATE * 2), timeout=60)
        t_phase2 = time.monotonic()
        while time.monotonic() - t_phase2 < seconds:
            egress.poll(0.2)
        # Phase 2: B, C, D arrive on instance 2: the demand change.
        _produce(
            bootstrap,
            deployment.topics.ingest,
            dict.fromkeys([b"B", b"C", b"D"], two[0]),
            per_tenant,
        )
        t_end = time.monotonic() + seconds * 2
        while time.monotonic() < t_end:
            egress.poll(0.2)
        messages = sorted(egress.messages, key=_stamp)
        first_a = _stamp(messages[0])
        change = min(_stamp(m) for m in messages if m.key() != b"A")
        last = _stamp(messages[-1])
        alone = _rates(messages, first_a + 1000, change)
        # Convergence: the first 1 s window after the change from which on A stays within
        # 10% of a quarter of the rate (in demand mode; the static split never gets there).
        fair = RATE / 4
        converged = None
        for start in range(change, last - 2000, 100):
            ok = all(
                abs(_rates(messages, s, s + 1000).get("A", 0.0) - fair) <= 0.1 * fair
                for s in range(start, last - 1000, 500)
            )
            if ok:
                converged = (start - change) / 1000
                break
        settle = change + 3000
        four = _rates(messages, settle, last)
        return {
            "status": "ok",
            "mode": mode,
            "alone_rate": alone.get("A"),
            "four_rates": four,
            "four_jain": round(jain_index(four.get(t, 0.0) for t in "ABCD"), 4),
            "group_rate": round(sum(four.values()), 1),
            "worst_1s": _worst_second(messages),
            "convergence_seconds": converged,
            "partitions": {"instance_1": one, "instance_2": two},
        }
    finally:
        egress.close()
        for proc in procs:
            if proc.alive():
                proc.terminate()


def phase(
    bootstrap: str, workdir: Path, quick: bool, _cleanup: list[Callable[[], None]] | None = None
) -> dict[str, Any]:
    seconds = 5.0 if quick else 10.0
    runs = {}
    for mode in MODES:
        try:
            runs[mode] = run_mode(bootstrap, workdir, mode, seconds)
        except Exception as exc:
            runs[mode] = {"status": "error", "mode": mode, "error": repr(exc)[:300]}
        log(f"{mode}: {json.dumps(runs[mode])}")
    return {"status": "ok", "rate": RATE, "burst": BURST, "runs": runs}


def group_table(results: dict[str, Any]) -> list[str]:
    """The "Across instances" table."""
    runs = get(results, "group", "runs") or {}
    rate, burst_ = RATE, BURST
    lines = [
        f"**Across instances** (two schedulers in one group, 4 ingest partitions, `--rate "
        f"{rate} --burst {burst_}`; A's backlog on instance 1 alone, then B, C, D arrive on "
        "instance 2; rates counted on a read_committed egress consumer by scheduling stamp; "
        "`benchmarks/group.py`):",
        "",
        "| `--share-by` | A alone | A / B / C / D after | Jain | group egress | most in 1 s | "
        "convergence after the change |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for mode in MODES:
        run = runs.get(mode) or {}
        if run.get("status") != "ok":
            lines.append(failed_row(mode, run.get("error"), 7))
            continue
        four = run["four_rates"]
        conv = run["convergence_seconds"]
        lines.append(
            f"| {mode} | {run['alone_rate']}/s | "
            + " / ".join(f"{four.get(t, 0):g}" for t in "ABCD")
            + f" | {run['four_jain']:.3f} | {run['group_rate']:g}/s of {rate} | "
            f"{run['worst_1s']} (bound {rate + burst_}) | "
            + (f"{conv:.1f} s" if conv is not None else "never within 10%")
            + " |"
        )
    return lines


def group_targets(r: dict[str, Any]) -> list[Row]:
    rate, burst = RATE, BURST
    run = get(r, "group", "runs", "demand") or {}
    if run.get("status") != "ok":
        return []
    alone, jain, worst = run["alone_rate"] or 0, run["four_jain"], run["worst_1s"]
    conv = run["convergence_seconds"]
    return [
        (
            "across instances: one backlogged tenant >= 0.9x the group rate",
            f"{alone}/s of {rate}",
            alone >= 0.9 * rate,
            f"{alone / rate:.2f}x",
        ),
        (
            "across instances: Jain >= 0.95 (4 tenants, 2 instances)",
            f"{jain:.3f}",
            jain >= 0.95,
            "",
        ),
        (
            "across instances: never above rate + burst in any 1 s",
            f"{worst} (bound {rate + burst})",
            worst <= rate + burst,
            "",
        ),
        (
            "across instances: a demand change takes effect within 2 s",
            "never" if conv is None else f"{conv:.1f} s",
            conv is not None and conv <= 2.0,
            "",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    broker = Broker.find(args.bootstrap)
    workdir = Path(tempfile.mkdtemp(prefix="fairstream-group-"))
    try:
        results = {"group": phase(broker.bootstrap, workdir, args.quick)}
    finally:
        broker.stop()
    print(json.dumps(results, indent=2))
    print("\n".join(group_table(results)))
    print_targets(group_targets(results))


if __name__ == "__main__":
    main()
