"""No commit outside the generation that owns the partitions.

Instance one's emitter is held 8 s when it gets a revocation (``hold:revoke=8`` in
``FAIRSTREAM_TEST_FAULTS``), far past its ``--revoke-wait`` of 0.5 s: its ingest thread
lets the partitions go, the group gives them to a new instance, which recovers them from
the committed offsets and emits. When one's emitter wakes up it must not commit what it held
for them: it commits with the generation that owned them, the broker refuses that, and it
aborts. A read_committed reader sees every record once; the group's committed offsets never
move backwards (polled all along by a consumer that reads the group's offsets without
joining it).
"""

from __future__ import annotations

import threading
from itertools import pairwise
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.exactly_once import (
    LoadProducer,
    all_seen,
    exactly_once_report,
    read_to_end,
)
from tests.integration.test_exactly_once import assigned, log_lines

pytestmark = pytest.mark.integration


class CommittedOffsets:
    """Polls the group's committed offsets on a thread; keeps every change per partition."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        self.partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self.history: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offsets", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):  # the polling cadence, not a wait for the system
            try:
                committed = self.consumer.committed(self.partitions, timeout=5)
            except Exception as exc:  # a slow answer: try again
                self.errors.append(repr(exc))
                continue
            for tp in committed:
                seen = self.history[tp.partition]
                if tp.offset >= 0 and (not seen or seen[-1] != tp.offset):
                    seen.append(tp.offset)

    def start(self) -> CommittedOffsets:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()

    def backwards(self) -> dict[int, list[int]]:
        return {
            p: seen for p, seen in self.history.items() if any(b < a for a, b in pairwise(seen))
        }


def test_an_emitter_held_past_the_revoke_wait_commits_nothing_for_lost_partitions(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    partitions = 4
    deployment = Deployment(kafka_bootstrap, partitions=partitions).create()
    common = ("--rate", "300", "--session-timeout", "6")
    one = SchedulerProcess(
        deployment,
        tmp_path,
        *common,
        # Transactions of about a second (a fifth of the interval, paced): the revocation
        # finds records open for the partitions leaving.
        "--commit-interval",
        "5",
        "--revoke-wait",
        "0.5",
        name="one",
        env={"FAIRSTREAM_TEST_FAULTS": "hold:revoke=8"},
    )
    one.start().wait_ready()
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    load = LoadProducer(kafka_bootstrap, deployment.topics.ingest, tenants=20, per_second=200)
    offsets = CommittedOffsets(
        kafka_bootstrap, deployment.app_id, deployment.topics.ingest, partitions
    ).start()
    others: list[SchedulerProcess] = []
    try:
        wait_until(lambda: assigned(one) == partitions, 60, "instance one owns every partition")
        load.start()

        def egress_grows_by(count: int) -> None:
            target = len(egress.messages) + count

            def grown() -> bool:
                egress.poll()
                return len(egress.messages) >= target

            wait_until(grown, 90, f"egress grows by {count}", interval=0)

        egress_grows_by(300)
        # A rebalance: one must give partitions up to a new instance. One's own commit can
        # land between the group's new generation and the revocation reaching one: the
        # broker refuses it (ILLEGAL_GENERATION), one aborts and rewinds, and the revocation
        # then finds nothing open, so the hold is not reached (and stays armed). That race
        # is Kafka's, and handled; here the new instance then stops, one takes its partitions
        # back, and another new instance takes partitions from one, up to three tries in
        # all: each try is the same rebalance of two members.
        for attempt in range(3):
            if others:
                # Its partitions come back to one: a rebalance of their own, before the next
                # newcomer joins (one's log says so; its metric lags while its emitter holds).
                assignments = len(log_lines(one, "assigned ingest partitions"))
                others[-1].terminate()
                wait_until(
                    lambda seen=assignments: (
                        len(log_lines(one, "assigned ingest partitions")) > seen
                    ),
                    60,
                    lambda: f"instance one takes the partitions back:\n{one.tail()}",
                    interval=0.2,
                )
            revocations = len(log_lines(one, "revoked ingest partitions"))
            newcomer = SchedulerProcess(deployment, tmp_path, *common, name=f"other-{attempt}")
            others.append(newcomer)
            newcomer.start().wait_ready()
            wait_until(
                lambda seen=revocations: len(log_lines(one, "revoked ingest partitions")) > seen,
                60,
                lambda: f"instance one gives partitions up:\n{one.tail()}",
                interval=0.2,
            )
            if log_lines(one, "within --revoke-wait"):
                break  # one let partitions go past its revoke wait, its emitter held
        else:
            pytest.fail(f"no revocation found one's emitter with records open:\n{one.tail()}")
        wait_until(
            lambda: assigned(newcomer) > 0,
            60,
            lambda: f"the new instance takes partitions over:\n{newcomer.tail()}",
            interval=0.2,
        )
        egress_grows_by(300)
        # One's held emitter wakes up and commits nothing under the new generation.
        wait_until(
            lambda: log_lines(one, "were let go before this emitter committed them"),
            60,
            lambda: f"instance one's emitter wakes up after its hold:\n{one.tail()}",
            interval=0.2,
        )
        egress_grows_by(300)  # and the group keeps going
        expected = load.stop()
        wait_until(lambda: all_seen(egress, expected), 120, "every record reaches egress")
        for instance in (*others, one):
            instance.terminate()
        messages = read_to_end(kafka_bootstrap, egress, deployment.topics.egress, partitions)
    finally:
        load.halt()
        offsets.stop()
        egress.close()
        for instance in (one, *others):
            if instance.alive():
                instance.kill()

    duplicates, missing, unexpected, disorder = exactly_once_report(messages, expected, load.sent)
    said = log_lines(one, "revoke-wait", "abort", "generation", "rewound", "CRITICAL")
    backwards = offsets.backwards()
    print(
        f"\nemitter held 8 s past a 0.5 s revoke wait: produced {len(expected)}; egress "
        f"read_committed {len(messages)} records, {duplicates} duplicates, {missing} missing, "
        f"{unexpected} unexpected, {len(disorder)} tenants out of order; committed offsets "
        f"seen per partition {[len(h) for h in offsets.history.values()]}, moved backwards "
        f"on {sorted(backwards)}\ninstance one said:\n  "
        + "\n  ".join(line[:240] for line in said[-12:])
    )
    assert duplicates == 0
    assert missing == 0
    assert unexpected == 0
    assert not disorder, disorder[:3]
    assert not backwards, backwards
    assert all(len(h) >= 2 for h in offsets.history.values())  # offsets were watched moving
