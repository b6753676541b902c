"""Latency at the paid API when nothing waits: from a producer's send to the handler's first
line, against Kafka's own exactly-once floor, measured in the same run on the real broker.

- ``floor``: a transactional consume->produce loop, the least any exactly-once stage adds: a
  read_committed consumer of an input topic, and for each poll that returns records, one
  transaction that produces them to an output topic and commits the consumed offsets with
  them (``send_offsets_to_transaction``), at once. A read_committed reader of the output
  (polling all the time, on a thread) notes when each record becomes visible.
- ``fairstream``: one ``fairstream scheduler`` with ``--rate 100`` (so records carry their
  start stamps and the workers pace them) and one ``fairstream.Worker`` with its default
  playout delay, whose async handler notes the time on its first line.

Both get the same idle load: one record every ``GAP`` s (50 ms), round robin over 8 tenants,
for S seconds (20; ``--quick`` 10) after a first second that is the start, not idle (``WARMUP``;
its worst is printed apart), its send time in its payload; each is fed after the other has
drained. Prints p50/p99/max of send -> visible (floor) and send -> handler start
(fairstream), the latter split at the record's release (``fairstream-scheduled-ms``): send ->
release is the scheduler's part, release -> start egress's and the worker's; and the
target: fairstream's p99 at most twice the floor's p99 plus the playout delay. Asserts
nothing.

    .venv/bin/python -m benchmarks.api_latency [--bootstrap HOST:PORT] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.api_view import PARTITIONS, deployment_with_feedback, stats, worker_pool
from benchmarks.common import (
    Row,
    delete_topics,
    get,
    logger,
    standalone,
    start_scheduler,
    undoing,
)
from fairstream import Request
from fairstream.sdk.worker.pacing import PLAYOUT_DELAY
from fairstream_dev.harness.kafka import create_topics as create_plain
from fairstream_dev.harness.kafka import unique, wait_until

GAP = 0.05  # seconds between two records: idle, nothing queues
TENANTS = [f"idle-{i}" for i in range(8)]
RATE = 100  # the scheduler's --rate: well above the load, so records only carry stamps
TARGET_FACTOR = 2.0
# The records sent in the first second are the start, not idle: a fresh scheduler emits at
# its share only once its group thread has read its partitions and waited the raise delay
# (``coordination.view.RAISE_DELAY``: a raise never lands before a peer's cut), so the
# first records after /readyz wait up to half a second. Their worst is printed apart.
WARMUP = 1.0

log = logger("api_latency")


def _seconds(quick: bool) -> float:
    return 10.0 if quick else 20.0


def _sent(payload: bytes | None) -> float | None:
    """The send time a payload carries (8 bytes, big-endian double, first)."""
    if payload is None or len(payload) < 8:
        return None
    return float(struct.unpack(">d", payload[:8])[0])


def _feed(bootstrap: str, topic: str, seconds: float) -> int:
    """One record every ``GAP`` s for ``seconds`` s, round robin over the tenants."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    count = int(seconds / GAP)
    start = time.monotonic()
    for i in range(count):
        delay = start + i * GAP - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        tenant = TENANTS[i % len(TENANTS)]
        producer.produce(topic, struct.pack(">d", time.time()) + b"-%d" % i, tenant.encode())
        producer.poll(0)
    assert producer.flush(30) == 0
    return count


class _Loop(threading.Thread):
    """The transactional consume->produce loop (``floor``)."""

    def __init__(self, bootstrap: str, source: str, target: str) -> None:
        super().__init__(daemon=True, name="eos-loop")
        self.bootstrap, self.source, self.target = bootstrap, source, target
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.error = exc

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": unique("eos-floor"),
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": unique("eos-floor-tx"),
                "linger.ms": 0,
            }
        )
        producer.init_transactions(30)
        consumer.subscribe([self.source], on_assign=lambda *_: self.ready.set())
        try:
            while not self.stopping.is_set():
                records = consumer.consume(num_messages=500, timeout=0.05)
                records = [m for m in records if m.error() is None]
                if not records:
                    continue
                producer.begin_transaction()
                for msg in records:
                    producer.produce(self.target, msg.value(), msg.key())
                offsets: dict[int, int] = {}
                for msg in records:
                    offsets[msg.partition() or 0] = (msg.offset() or 0) + 1
                producer.send_offsets_to_transaction(
                    [TopicPartition(self.source, p, o) for p, o in offsets.items()],
                    consumer.consumer_group_metadata(),
                    30,
                )
                producer.commit_transaction(30)
        finally:
            consumer.close()


class _Visible(threading.Thread):
    """A read_committed reader of a topic noting (send, visible) per record."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True, name="eos-visible")
        self.seen: list[tuple[float, float]] = []
        self.stopping = threading.Event()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique("eos-visible"),
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
        self.consumer.subscribe([topic])

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                for msg in self.consumer.consume(num_messages=500, timeout=0.05):
                    sent = _sent(msg.value()) if msg.error() is None else None
                    if sent is not None:
                        self.seen.append((sent, time.time()))
        finally:
            self.consumer.close()


def run_floor(bootstrap: str, seconds: float, cleanup: list[Callable[[], None]]) -> dict[str, Any]:
    source, target = unique("eos-floor-in"), unique("eos-floor-out")
    create_plain(bootstrap, [source, target], partitions=PARTITIONS)
    cleanup.append(functools.partial(delete_topics, bootstrap, [source, target]))
    loop, visible = _Loop(bootstrap, source, target), _Visible(bootstrap, target)
    loop.start()
    visible.start()
    try:
        wait_until(lambda: loop.ready.is_set() or loop.error, 60, "the loop's assignment")
        began = time.time()
        sent = _feed(bootstrap, source, seconds + WARMUP)
        wait_until(lambda: len(visible.seen) >= sent or loop.error, 60, f"{sent} records through")
    finally:
        loop.stopping.set()
        visible.stopping.set()
        loop.join(30)
        visible.join(30)
    if loop.error is not None:
        raise loop.error
    return {"records": sent, **_idle_and_start(began, visible.seen)}


def _idle(began: float, sent: float) -> bool:
    """Whether a record sent at ``sent`` was sent idle: ``WARMUP`` s or more after the
    feed ``began``, not at the start."""
    return sent >= began + WARMUP


def _idle_and_start(began: float, waits: list[tuple[float, float]]) -> dict[str, Any]:
    """(sent, reached) pairs split by ``_idle``: the idle latency's figures over the idle
    ones, and the worst of the start's."""
    start = [end - at for at, end in waits if not _idle(began, at)]
    return {
        "latency": stats([end - at for at, end in waits if _idle(began, at)]),
        "start_max_s": round(max(start), 3) if start else None,
    }


def run_fairstream(
    bootstrap: str, workdir: Path, seconds: float, cleanup: list[Callable[[], None]]
) -> dict[str, Any]:
    d, feedback = deployment_with_feedback(bootstrap, "apilatency", cleanup)
    started: list[tuple[float, float]] = []
    # (sent, released, started): released is the record's fairstream-scheduled-ms, the
    # moment the scheduler let it go (its start stamp when paced), so the wait splits into
    # the scheduler's part (ingest, index, release) and egress's (commit, fetch, playout).
    stages: list[tuple[float, float, float]] = []

    async def handler(request: Request) -> None:
        now = time.time()
        sent = _sent(request.payload)
        if sent is not None:
            started.append((sent, now))
            if request.scheduled_ms is not None:
                stages.append((sent, request.scheduled_ms / 1000, now))

    with worker_pool(d, feedback, handler, 1, 8, {}):
        start_scheduler(
            d, workdir, "api-latency", ["--rate", str(RATE), "--feedback-topic", feedback], cleanup
        ).wait_ready()
        began = time.time()
        sent = _feed(bootstrap, d.topics.ingest, seconds + WARMUP)
        wait_until(lambda: len(started) >= sent, 60, f"{sent} calls started")
    idle = [stage for stage in stages if _idle(began, stage[0])]
    return {
        "records": sent,
        "rate": RATE,
        "playout_delay_s": PLAYOUT_DELAY,
        **_idle_and_start(began, started),
        "send_to_release": stats([released - sent_at for sent_at, released, _ in idle]),
        "release_to_start": stats([at - released for _, released, at in idle]),
    }


def phase(
    bootstrap: str, workdir: Path, quick: bool, cleanup: list[Callable[[], None]] | None = None
) -> dict[str, Any]:
    seconds = _seconds(quick)
    with undoing() as undo:
        todo = cleanup if cleanup is not None else undo
        floor = run_floor(bootstrap, seconds, todo)
        log(f"floor: {json.dumps(floor)}")
        fs = run_fairstream(bootstrap, workdir, seconds, todo)
        log(f"fairstream: {json.dumps(fs)}")
    return {"status": "ok", "seconds": seconds, "floor": floor, "fairstream": fs}


def targets(results: dict[str, Any]) -> list[Row]:
    """Idle, send -> handler start p99 <= 2 x the exactly-once floor's p99 + the delay."""
    floor = get(results, "api_latency", "floor", "latency", "p99_s")
    fs = get(results, "api_latency", "fairstream", "latency", "p99_s")
    delay = get(results, "api_latency", "fairstream", "playout_delay_s")
    if floor is None or fs is None or delay is None:
        return []
    bound = TARGET_FACTOR * floor + delay
    return [
        (
            f"idle: send -> handler start p99 <= {TARGET_FACTOR:g}x the exactly-once floor "
            "+ the playout delay",
            f"{fs:.3f} s (floor {floor:.3f} s, delay {delay:g} s: bound {bound:.3f} s)",
            fs <= bound,
            f"{abs(bound - fs):.3f} s",
        )
    ]


def report(result: dict[str, Any]) -> list[str]:
    lines = ["idle latency (one record every 50 ms over 8 tenants)"]
    for name in ("floor", "fairstream"):
        lat = result[name]["latency"] or {}
        lines.append(
            f"  {name:10} | p50 {lat.get('p50_s', float('nan')):.3f} s | p99 "
            f"{lat.get('p99_s', float('nan')):.3f} s | max {lat.get('max_s', float('nan')):.3f} s"
        )
    for stage in ("send_to_release", "release_to_start"):
        lat = result["fairstream"].get(stage) or {}
        p50, p99, top = (lat.get(k, float("nan")) for k in ("p50_s", "p99_s", "max_s"))
        name = stage.replace("_", " ")
        lines.append(f"    {name:18} | p50 {p50:.3f} s | p99 {p99:.3f} s | max {top:.3f} s")
    starts = ", ".join(
        f"{name} {result[name].get('start_max_s')} s" for name in ("floor", "fairstream")
    )
    lines.append(f"  the first {WARMUP:g} s after ready (not idle), worst: {starts}")
    for row in targets({"api_latency": result}):
        lines.append(f"  {row[0]}: {row[1]} ({'met' if row[2] else 'MISSED'})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, help="write the JSON here too")
    args = parser.parse_args()
    result = standalone(
        args.bootstrap, lambda bootstrap, workdir: phase(bootstrap, workdir, args.quick), args.json
    )
    print("\n".join(report(result)))


if __name__ == "__main__":
    main()
