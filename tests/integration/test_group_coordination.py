"""Group shares when coordination fails or clocks disagree.

- A coordination topic that refuses every report (``max.message.bytes`` smaller than one):
  each instance goes on emitting at its safe share (its partitions over the ingest topic's)
  and says why in ``/readyz`` and ``/metrics``.
- Two instances, one with its wall clock 3 s behind: the group keeps to ``--rate`` between
  them, and no 1 s window holds more than ``--rate`` + burst plus what the spread of the
  append delays can compress into it. Windows are counted on the broker's ``LogAppendTime``
  of the egress records (the egress topic is created so): one clock, neither scheduler's,
  stamped as the records are written. Pacing bounds the records' slots (their
  ``fairstream-scheduled-ms``); each lands later than its slot by a delay that varies (a
  caught-up slot, linger, a busy broker), and that spread is measured per instance as a
  difference of its own clock's readings, so the skew cannot hide in it. A read_committed consumer's
  receipt time is printed too; it also moves with when transactions commit (a commit makes
  its records visible at once), which no pacing can smooth. The clock is moved for the
  Python process only (``skewed_clock/sitecustomize.py``): under libfaketime librdkafka's
  timed waits spin; ``benchmarks/skew.py`` runs the same with libfaketime and prints it.

Rates are measured from record stamps; nothing asserts a wall-clock duration.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from statistics import median

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Message
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from fairstream.config.topics import coordination_topic
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.test_group_shares import (
    BURST,
    RATE,
    backlog,
    owned_partitions,
    rate_of,
    settled_window,
    stop_all,
    wait_for_split,
)

# Both tests measure rates over seconds of stamps (0.9x of the group rate, 0.7x of a safe
# share): a scheduler slowed by tests beside it emits less, so they run alone (serial).
pytestmark = [pytest.mark.integration, pytest.mark.serial]

SKEWED_CLOCK = Path(__file__).resolve().parent / "skewed_clock"


def create(bootstrap: str, *topics: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(list(topics)).values():
        future.result(30)


def start(
    deployment: Deployment,
    tmp_path: Path,
    instances: int,
    envs: list[dict[str, str]],
    *extra: str,
) -> list[SchedulerProcess]:
    """``instances`` schedulers at the group rate (``extra``: more options for each), each
    with its ``envs``; returned once every one owns ingest partitions."""
    args = ("--rate", str(RATE), "--burst", str(BURST), "--session-timeout", "6", *extra)
    procs = [
        SchedulerProcess(deployment, tmp_path, *args, name=f"s{i}", env=envs[i]).start()
        for i in range(instances)
    ]
    for proc in procs:
        proc.wait_ready()
    wait_for_split(procs, deployment.partitions)
    return procs


def metric(proc: SchedulerProcess, name: str) -> float:
    status, body = proc.get("/metrics")
    assert status == 200
    total = 0.0
    found = False
    for line in body.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            if head == name or head.startswith(name + "{"):
                total += float(value)
                found = True
    assert found, f"{name} not in /metrics"
    return total


def test_an_unwritable_coordination_topic_leaves_each_instance_its_safe_share(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=4)
    # Every report is larger than 64 bytes: the broker refuses each one.
    create(
        kafka_bootstrap,
        NewTopic(
            coordination_topic(deployment.app_id),
            1,
            1,
            config={"cleanup.policy": "compact", "max.message.bytes": "64"},
        ),
    )
    deployment.create()
    procs = start(deployment, tmp_path, 2, [{}, {}])
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    try:
        for proc in procs:

            def refused(proc: SchedulerProcess = proc) -> bool:
                body = proc.get("/readyz")[1]
                return "cannot publish reports" in body and "safe share (0.500" in body

            wait_until(
                refused,
                60,
                lambda proc=proc: f"/readyz gives the reason: {proc.get('/readyz')}",
            )
            status, body = proc.get("/readyz")
            print(f"\n/readyz {status}: {body.strip()}")
            assert status == 200  # still emitting: ready, with the reason on the next line
            assert "too large" in body.lower()
            assert metric(proc, "fairstream_group_coordinated") == 0
            assert metric(proc, "fairstream_group_coordination_errors_total") > 0
        one = owned_partitions(procs[0])
        share = len(one) / deployment.partitions
        backlog(kafka_bootstrap, deployment.topics.ingest, {b"A": one[0]}, 1200)
        egress.read_until(900, timeout=90)
        window = settled_window(egress.messages, 200, 700)
        rate = rate_of(window)
        print(
            f"coordination topic refuses reports: one backlogged tenant on {len(one)} of "
            f"{deployment.partitions} partitions emits {rate:.1f}/s (safe share "
            f"{RATE * share:.0f}/s of {RATE})"
        )
        # Egress goes on, at the safe share: not nothing, not the whole group rate.
        assert 0.7 * RATE * share <= rate <= 1.1 * RATE * share + 1
        assert "fenced" not in procs[0].tail(200)
    finally:
        egress.close()
        stop_all(procs)


def worst_second(stamps: list[int]) -> int:
    ordered = sorted(stamps)
    worst = j = 0
    for i, start_ms in enumerate(ordered):
        while j < len(ordered) and ordered[j] < start_ms + 1000:
            j += 1
        worst = max(worst, j - i)
    return worst


def broker_ms(msg: Message) -> int:
    kind, stamp = msg.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME, "the egress topic stamps LogAppendTime"
    return stamp


def test_a_clock_3s_behind_never_doubles_the_group_rate(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=4)
    create(
        kafka_bootstrap,
        NewTopic(
            deployment.topics.egress, 4, 1, config={"message.timestamp.type": "LogAppendTime"}
        ),
    )
    deployment.create()
    skewed = {"PYTHONPATH": str(SKEWED_CLOCK), "SKEWED_CLOCK_OFFSET_S": "-3"}
    procs = start(deployment, tmp_path, 2, [{}, skewed])
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    received: list[float] = []
    try:
        first, second = (owned_partitions(p) for p in procs)
        placement = {b"A": first[0], b"B": second[0]}
        backlog(kafka_bootstrap, deployment.topics.ingest, placement, 1500)

        def enough() -> bool:
            new = egress.poll(0.01)
            received.extend([time.time()] * len(new))  # this consumer's own clock
            return len(egress.messages) >= 2400

        wait_until(
            enough, 120, lambda: f"2400 egress records (have {len(egress.messages)})", interval=0
        )
        stamps = [broker_ms(m) for m in egress.messages]
        worst = worst_second(stamps)
        worst_received = worst_second([int(t * 1000) for t in received])
        # Broker time minus each record's slot on its scheduler's own schedule, per instance
        # (tenant A is the first's, B the second's). The skew is real: B's run ~3 s behind.
        lags: dict[bytes, list[int]] = {}
        for m in egress.messages:
            scheduled = int(dict(m.headers())["fairstream-scheduled-ms"])
            lags.setdefault(m.key(), []).append(broker_ms(m) - scheduled)
        # Pacing bounds each window of slots; the broker stamps a batch when it appends it,
        # later than the slot by a delay that varies (linger, a flush before a commit, a busy
        # broker). A 1 s window of broker time holds slots from at most 1 s + that variation,
        # whatever either clock says: the variation is a difference of one clock's readings.
        jitter_s = max(max(v) - min(v) for v in lags.values()) / 1000
        bound = RATE * (1 + jitter_s) + BURST
        # After the settling, by broker time (scheduling stamps are 3 s apart between them).
        ordered = sorted(egress.messages, key=broker_ms)[400:2200]
        counts = Counter(m.key() for m in ordered)
        span = (broker_ms(ordered[-1]) - broker_ms(ordered[0])) / 1000
        group_rate = (len(ordered) - 1) / span
        print(
            f"\none clock 3 s behind: worst 1 s window {worst} by broker time, "
            f"{worst_received} by this consumer's receipt (bound {bound:.1f}: {RATE} + "
            f"{BURST} + {RATE} x {jitter_s:.3f} s of append delay variation); group "
            f"{group_rate:.1f}/s of {RATE}; split {dict(counts)}; broker - scheduled ms "
            f"{ {k.decode(): (min(v), max(v)) for k, v in lags.items()} }"
        )
        assert median(lags[b"B"]) - median(lags[b"A"]) >= 2500, "B's clock is not behind"
        assert worst <= bound
        # Both still use the group's rate between them, and not twice it: the skew's risk.
        assert 0.9 * RATE <= group_rate <= 1.1 * RATE
        assert min(counts.values()) >= 0.35 * len(ordered)  # and share it
    finally:
        egress.close()
        stop_all(procs)
