"""Clock skew across instances: two schedulers of one group, one of them run under
libfaketime (Debian's ``faketime`` package) with its wall clock 3 s behind.

``--rate 200 --burst 20``, 4 ingest partitions split between the two, one backlogged
tenant on each. Printed: the most egress records in any 1 s window, counted on the broker's
``LogAppendTime`` (the egress topic is created so: one clock, neither scheduler's) and on
this consumer's receipt clock; the group's egress rate; the per-tenant split; and how far
each instance's ``fairstream-scheduled-ms`` stamps lie from the broker's (the skew, seen).
Each run also prints the CPU seconds the skewed scheduler used against the other's.

libfaketime 0.9.10 (bookworm) moves ``CLOCK_REALTIME`` for librdkafka too, whose timed
waits take their deadlines from it: with the clock behind they time out at once and spin
(measured: one idle consumer 0.79 CPU s in 3 s against 0.13 without), and Python's
``time.sleep`` fails with EINVAL under ``FAKETIME_DONT_FAKE_MONOTONIC``. So this runs as a
benchmark, not in the test suite; ``--python-only`` moves the Python clock alone instead
(``tests/integration/skewed_clock``, what the integration test uses). Egress is read for
a time budget (``--seconds``), not to a count: under libfaketime a loaded machine may not
drain the backlog. Asserts nothing.

Measured at bceb9ba on 2 cores shared with other engineers' tests (load average 14-35):
libfaketime -3 s: worst 1 s window 210 by broker time, 209 by receipt (bound 220); 1,558
records in 120 s (the skewed scheduler used 172 CPU s against the other's 4: librdkafka's
spin starves it; B got 58 of them); ``--python-only`` in the integration test: 210-211 by
broker time, group 200/s of 200, split 900/900.

    .venv/bin/python -m benchmarks.skew [--bootstrap HOST:PORT] [--offset -3] [--python-only]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from benchmarks.common import REPO, Broker, logger
from fairstream import wire
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader

RATE = 200
BURST = 20
PARTITIONS = 4
PER_TENANT = 1500
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SKEWED_CLOCK = REPO / "tests" / "integration" / "skewed_clock"

log = logger("skew")


def worst_second(stamps_ms: list[int]) -> int:
    ordered = sorted(stamps_ms)
    worst = j = 0
    for i, start in enumerate(ordered):
        while j < len(ordered) and ordered[j] < start + 1000:
            j += 1
        worst = max(worst, j - i)
    return worst


def broker_ms(msg: Message) -> int:
    kind, stamp = msg.timestamp()
    if kind != TIMESTAMP_LOG_APPEND_TIME:
        raise RuntimeError("the egress topic does not stamp LogAppendTime")
    return stamp


def skewed_env(offset: float, python_only: bool) -> dict[str, str]:
    if python_only:
        return {"PYTHONPATH": str(SKEWED_CLOCK), "SKEWED_CLOCK_OFFSET_S": f"{offset:g}"}
    if not FAKETIME_LIB.exists():
        raise SystemExit(f"{FAKETIME_LIB} is missing: make faketime (Debian's faketime)")
    return {
        "LD_PRELOAD": str(FAKETIME_LIB),
        "FAKETIME": f"{offset:+g}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # the wall clock is off; uptime is uptime
    }


def owned(proc: SchedulerProcess) -> list[int]:
    status, body = proc.get("/tenants")
    return list(json.loads(body)["partitions"]) if status == 200 else []


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(
    bootstrap: str, workdir: Path, offset: float, python_only: bool, seconds: float
) -> dict[str, Any]:
    deployment = Deployment(bootstrap, partitions=PARTITIONS)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    egress_topic = NewTopic(
        deployment.topics.egress,
        PARTITIONS,
        1,
        config={"message.timestamp.type": "LogAppendTime"},
    )
    for future in admin.create_topics([egress_topic]).values():
        future.result(30)
    deployment.create()
    args = ("--rate", str(RATE), "--burst", str(BURST), "--session-timeout", "6")
    envs = [{}, skewed_env(offset, python_only)]
    procs = [
        SchedulerProcess(deployment, workdir, *args, name=f"s{i}", env=envs[i]).start()
        for i in range(2)
    ]
    egress = TopicReader(bootstrap, deployment.topics.egress)
    received: list[float] = []
    try:
        for proc in procs:
            proc.wait_ready(180)
        wait_until(
            lambda: (
                all(owned(p) for p in procs) and sum(len(owned(p)) for p in procs) == PARTITIONS
            ),
            180,
            "both instances own partitions",
            interval=0.5,
        )
        placement = {b"A": owned(procs[0])[0], b"B": owned(procs[1])[0]}
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(PER_TENANT):
            for tenant, partition in placement.items():
                producer.produce(
                    deployment.topics.ingest, b"%s-%d" % (tenant, i), tenant, partition=partition
                )
        producer.flush(30)
        log(f"backlog of {2 * PER_TENANT} written; reading egress for at most {seconds} s")
        started = time.monotonic()
        # A time budget, not a count: under libfaketime a loaded machine may not drain it all.
        while time.monotonic() - started < seconds and len(egress.messages) < 2 * PER_TENANT:
            new = egress.poll(0.01)
            received.extend([time.time()] * len(new))
        elapsed = time.monotonic() - started
        if len(egress.messages) < 600:
            raise RuntimeError(f"only {len(egress.messages)} egress records in {elapsed:.0f} s")
        assert all(p.proc is not None for p in procs)
        cpu = [cpu_seconds(p.proc.pid) for p in procs if p.proc is not None]
        ordered = sorted(egress.messages, key=broker_ms)
        settled = ordered[len(ordered) // 6 :]  # after the settling
        span = (broker_ms(settled[-1]) - broker_ms(settled[0])) / 1000
        lag: dict[str, int] = {}
        for m in egress.messages:
            key = (m.key() or b"").decode()
            lag[key] = broker_ms(m) - int(dict(m.headers())[wire.SCHEDULED_MS])
        return {
            "offset_s": offset,
            "clock": "python only" if python_only else "libfaketime",
            "records": len(egress.messages),
            "worst_1s_broker": worst_second([broker_ms(m) for m in egress.messages]),
            "worst_1s_receipt": worst_second([int(t * 1000) for t in received]),
            "bound": RATE + BURST,
            "group_rate": round((len(settled) - 1) / span, 1),
            "split": {k.decode(): v for k, v in Counter(m.key() for m in settled).items()},
            "broker_minus_scheduled_ms": lag,
            "seconds": round(elapsed, 1),
            "cpu_s": {"s0": round(cpu[0], 1), "s1 (skewed)": round(cpu[1], 1)},
        }
    finally:
        egress.close()
        for proc in procs:
            if proc.alive():
                try:
                    proc.terminate(30)
                except AssertionError as exc:  # under libfaketime a stop can hang: say so
                    log(f"{exc}"[:300])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--offset", type=float, default=-3.0, help="seconds (default -3)")
    parser.add_argument("--python-only", action="store_true")
    parser.add_argument("--seconds", type=float, default=120, help="egress read budget")
    args = parser.parse_args()
    broker = Broker.find(args.bootstrap)
    workdir = Path(tempfile.mkdtemp(prefix="fairstream-skew-"))
    try:
        result = run(broker.bootstrap, workdir, args.offset, args.python_only, args.seconds)
    finally:
        broker.stop()
    print(json.dumps(result, indent=2))
    print(
        f"one clock {result['offset_s']:+g} s ({result['clock']}): worst 1 s window "
        f"{result['worst_1s_broker']} by broker time, {result['worst_1s_receipt']} by receipt "
        f"(bound {result['bound']}); group {result['group_rate']}/s of {RATE}; split "
        f"{result['split']}; {result['records']} records; CPU s {result['cpu_s']} over "
        f"{result['seconds']} s"
    )


if __name__ == "__main__":
    main()
