"""Signals that tell the truth: ``/metrics`` during a long commit, and the
failure policy of the helper threads.

Faults are injected into the real scheduler process through ``FAIRSTREAM_TEST_FAULTS``
(``fairstream.scheduler.faults``): a commit held for 10 s, or a helper thread that raises
at the start of its first runs. The tests assert answers and counts, never timings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.policies import set_policy
from tests.integration.test_scheduler_fatal import HealthProbe

pytestmark = pytest.mark.integration


def sample(text: str, name: str, labels: str = "") -> float | None:
    """The value of one series in a Prometheus text exposition (None: absent)."""
    pattern = "^" + re.escape(name + (f"{{{labels}}}" if labels else "")) + r" (\S+)$"
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else None


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    for i in range(count):
        producer.produce(topic, key=b"t%d" % (i % 5), value=b"v%d" % i)
    assert producer.flush(30) == 0


def test_metrics_answer_while_a_commit_is_held(kafka_bootstrap: str, tmp_path: Path) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    scheduler = SchedulerProcess(
        deployment, tmp_path, "--rate", "200", env={"FAIRSTREAM_TEST_FAULTS": "hold:commit=10"}
    )
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    statuses: list[int] = []
    stale_seen: list[tuple[float, float]] = []
    tenants_while_stale: list[tuple[int, str]] = []
    try:
        scheduler.start().wait_ready()
        assert scheduler.get("/tenants")[0] == 200  # a snapshot to fall back on
        produce(kafka_bootstrap, deployment.topics.ingest, 100)

        def scraped_stale() -> bool:
            status, text = scheduler.get("/metrics")
            statuses.append(status)
            stale = sample(text, "fairstream_metrics_snapshot_stale")
            if status == 200 and stale == 1:
                age = sample(text, "fairstream_metrics_snapshot_age_seconds")
                stale_seen.append((stale, age if age is not None else -1))
                tenants_while_stale.append(scheduler.get("/tenants"))
                return True
            return False

        wait_until(scraped_stale, 60, "a /metrics answer marked stale during the held commit")

        def fresh_again() -> bool:
            status, text = scheduler.get("/metrics")
            statuses.append(status)
            return status == 200 and sample(text, "fairstream_metrics_snapshot_stale") == 0

        wait_until(fresh_again, 60, "fresh figures once the commit is done")
        egress.read_until(100, timeout=60)
        assert scheduler.get("/healthz")[0] == 200
        assert scheduler.terminate() == 0, scheduler.tail()
    finally:
        egress.close()
        if scheduler.alive():
            scheduler.kill()
    print(
        f"\n/metrics during a commit held 10 s: {len(statuses)} scrapes, statuses "
        f"{sorted(set(statuses))}, stale mark {stale_seen[0]} (stale, age s); /tenants "
        f"{tenants_while_stale[0][0]}"
    )
    assert set(statuses) == {200}
    assert stale_seen[0][1] >= 0
    assert tenants_while_stale[0][0] == 200


@pytest.mark.parametrize("thread", ["policies", "trim", "feedback"])
def test_a_failing_helper_thread_is_restarted(
    kafka_bootstrap: str, tmp_path: Path, thread: str
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    feedback = f"--feedback-topic={deployment.topics.ingest}.feedback"  # the thread reads it
    scheduler = SchedulerProcess(
        deployment,
        tmp_path,
        "--rate",
        "500",
        feedback,
        env={"FAIRSTREAM_TEST_FAULTS": f"fail:{thread}=2"},
    )
    label = f'thread="{thread}"'
    health: list[int] = []
    try:
        scheduler.start().wait_ready()

        def restarted_and_up() -> bool:
            health.append(scheduler.get("/healthz")[0])
            status, text = scheduler.get("/metrics")
            return (
                status == 200
                and sample(text, "fairstream_thread_restarts_total", label) == 2
                and sample(text, "fairstream_thread_up", label) == 1
            )

        wait_until(restarted_and_up, 60, f"the {thread} thread restarted twice and running")
        # The restarted thread does its job.
        if thread == "policies":
            set_policy(kafka_bootstrap, deployment.topics.policy, b"acme", weight=3.0)

            def applied() -> bool:
                text = scheduler.get("/metrics")[1]
                return (sample(text, "fairstream_policy_updates_total") or 0) >= 1

            wait_until(applied, 30, "a policy written after the restarts is applied")
        elif thread == "trim":
            produce(kafka_bootstrap, deployment.topics.ingest, 200)

            watcher = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "watch"})

            def trimmed() -> bool:
                starts = [
                    watcher.get_watermark_offsets(
                        TopicPartition(deployment.topics.ingest, p), timeout=10, cached=False
                    )[0]
                    for p in range(deployment.partitions)
                ]
                return sum(starts) >= 200

            try:
                wait_until(trimmed, 60, "the restarted trimmer deletes what was emitted")
            finally:
                watcher.close()
        health.append(scheduler.get("/healthz")[0])
        log = scheduler.log_path.read_text(errors="replace")
        assert scheduler.terminate() == 0, scheduler.tail()
    finally:
        if scheduler.alive():
            scheduler.kill()
    print(f"\n{thread} thread failed twice: restarted, /healthz {sorted(set(health))}")
    assert set(health) == {200}
    assert log.count(f"the {thread} thread failed") == 2
    assert log.count(f"restarting the {thread} thread") == 2


def test_a_helper_thread_that_keeps_failing_turns_healthz_red_and_exits(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    scheduler = SchedulerProcess(
        deployment, tmp_path, "--rate", "500", env={"FAIRSTREAM_TEST_FAULTS": "fail:trim=100"}
    )
    try:
        scheduler.start().wait_ready()
        health = HealthProbe(scheduler.web_port)  # kept alive: the 503 before the exit is brief
        wait_until(
            lambda: health() == 503 or not scheduler.alive(),
            120,
            "/healthz 503 once the trim thread keeps failing",
            interval=0,
        )

        def exited() -> bool:
            health()
            return not scheduler.alive()

        wait_until(exited, 60, "the scheduler exits", interval=0)
        health.close()
        assert scheduler.proc is not None
        code = scheduler.proc.returncode
        log = scheduler.log_path.read_text(errors="replace")
    finally:
        if scheduler.alive():
            scheduler.kill()
    unhealthy = [text for status, text in health.answers if status == 503]
    print(f"\ntrim thread failing for good: exit {code}, /healthz {unhealthy[:1]}")
    assert code not in (0, None)
    assert "fatal: the trim thread failed 6 times in a row" in log
    assert unhealthy
    assert "the trim thread failed" in unhealthy[0]
