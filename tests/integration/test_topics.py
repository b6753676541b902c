"""``fairstream topics create`` and the scheduler's topic check, as users run them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from fairstream.config import Topics
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from fairstream_dev.kafka import free_port
from tests.integration.exactly_once import read_to_end

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def fairstream(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the ``fairstream`` command in a fresh interpreter, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "fairstream", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


def topic_args(topics: Topics) -> list[str]:
    return [
        "--ingest-topic",
        topics.ingest,
        "--egress-topic",
        topics.egress,
        "--dlq-topic",
        topics.dlq,
        "--policy-topic",
        topics.policy,
    ]


def unique_topics() -> Topics:
    base = unique("fs-topics")
    return Topics(f"{base}.ingest", f"{base}.egress", f"{base}.dlq", f"{base}.policy")


def partitions_of(admin: AdminClient, name: str) -> int | None:
    info = admin.list_topics(topic=name, timeout=15).topics.get(name)
    if info is None or info.error is not None:
        return None
    return len(info.partitions)


def cleanup_policy(admin: AdminClient, name: str) -> str:
    return topic_config(admin, name, "cleanup.policy")


def topic_config(admin: AdminClient, name: str, key: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(timeout=15)
    return str(configs[key].value)


def test_create_then_rerun_then_refuse_a_different_partition_count(kafka_bootstrap: str) -> None:
    topics, app_id = unique_topics(), unique("app")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    create = ["topics", "create", "--bootstrap", kafka_bootstrap, "--app-id", app_id]

    first = fairstream(*create, *topic_args(topics), "--partitions", "3")

    assert first.returncode == 0, first.stderr
    for name in (topics.ingest, topics.egress, topics.dlq):
        assert partitions_of(admin, name) == 3, name
        assert f"created {name} (3 partitions)" in first.stdout
        assert cleanup_policy(admin, name) == "delete", name
    assert partitions_of(admin, topics.policy) == 1
    assert cleanup_policy(admin, topics.policy) == "compact"
    assert f"created {topics.policy} (1 partition)" in first.stdout

    again = fairstream(*create, *topic_args(topics), "--partitions", "3")

    assert again.returncode == 0, again.stderr
    assert "created" not in again.stdout
    for name in (topics.ingest, topics.egress, topics.dlq, topics.policy):
        assert any(line.startswith("exists") and name in line for line in again.stdout.splitlines())

    # Same ingest topic, new names for the rest: a refusal must not create any of them.
    others = Topics(topics.ingest, f"{topics.egress}-2", f"{topics.dlq}-2", f"{topics.policy}-2")
    refused = fairstream(*create, *topic_args(others), "--partitions", "5")

    assert refused.returncode != 0
    assert "co-partitioned" in refused.stderr
    assert f"{topics.ingest} exists with 3 partitions" in refused.stderr
    assert "--partitions 3" in refused.stderr  # tells the user what would work
    assert partitions_of(admin, topics.ingest) == 3
    for name in (others.egress, others.dlq, others.policy):
        assert partitions_of(admin, name) is None, f"{name} was created by a refused run"


def test_scheduler_without_its_ingest_topic_says_to_create_the_topics(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = unique_topics()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})

    result = fairstream(
        "scheduler",
        "--bootstrap",
        kafka_bootstrap,
        *topic_args(topics),
        "--app-id",
        unique("app"),
        "--data-dir",
        str(tmp_path / "data"),
        "--web-port",
        str(free_port()),
        "--web-host",
        "127.0.0.1",
        timeout=90,
    )

    assert result.returncode != 0
    assert topics.ingest in result.stderr
    assert "does not exist" in result.stderr
    assert "fairstream topics create" in result.stderr
    assert partitions_of(admin, topics.ingest) is None  # not auto-created by the check


def configs_of(admin: AdminClient, name: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(timeout=15)
    return {key: str(entry.value) for key, entry in configs.items()}


def test_create_takes_the_brokers_replication_min_isr_retention_and_configs(
    kafka_bootstrap: str,
) -> None:
    topics, app_id = unique_topics(), unique("app")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})

    result = fairstream(
        "topics",
        "create",
        "--bootstrap",
        kafka_bootstrap,
        "--app-id",
        app_id,
        *topic_args(topics),
        "--partitions",
        "2",
        "--min-insync-replicas",
        "1",
        "--egress-retention-ms",
        "86400000",
        "--dlq-retention-ms",
        "1209600000",
        "--config",
        "egress:compression.type=zstd",
        "--config",
        "ingest:segment.ms=3600000",
    )

    assert result.returncode == 0, result.stderr
    ingest, egress, dlq = (configs_of(admin, n) for n in (topics.ingest, topics.egress, topics.dlq))
    # -1 (the default) is the broker's default.replication.factor: 1 on the development broker.
    info = admin.list_topics(topic=topics.ingest, timeout=15).topics[topics.ingest]
    assert {len(p.replicas) for p in info.partitions.values()} == {1}
    assert ingest["min.insync.replicas"] == "1"
    assert (ingest["retention.ms"], ingest["segment.ms"]) == ("-1", "3600000")
    assert (egress["retention.ms"], egress["compression.type"]) == ("86400000", "zstd")
    assert dlq["retention.ms"] == "1209600000"
    assert dlq["compression.type"] == "producer"  # a config goes to its kind only
    # Room for fairstream's headers above what the ingest topic takes.
    room = int(ingest["max.message.bytes"]) + 4096
    assert int(egress["max.message.bytes"]) == int(dlq["max.message.bytes"]) == room


def test_create_refuses_bad_configs_with_a_reason_and_creates_nothing(
    kafka_bootstrap: str,
) -> None:
    topics, app_id = unique_topics(), unique("app")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    create = [
        "topics",
        "create",
        "--bootstrap",
        kafka_bootstrap,
        "--app-id",
        app_id,
        *topic_args(topics),
        "--partitions",
        "2",
    ]

    for args, reason in [
        (["--config", "egres:compression.type=zstd"], "unknown topic kind 'egres'"),
        (["--config", "compression.type=zstd"], "expected KIND:KEY=VALUE"),
        (["--config", "policy:cleanup.policy=delete"], "cleanup.policy cannot be set"),
        (["--config", "egress:retention.ms=1"], "use --egress-retention-ms instead"),
        (["--replication-factor", "0"], "must be -1"),
        (["--replication-factor", "1", "--min-insync-replicas", "2"], "every write with acks=all"),
    ]:
        refused = fairstream(*create, *args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert reason in refused.stderr, (args, refused.stderr)

    # A config only the broker can judge: it refuses it before any topic is created.
    refused = fairstream(*create, "--config", "dlq:no.such.config=1")
    assert refused.returncode == 1, refused.stderr
    assert topics.dlq in refused.stderr
    assert "none was created" in refused.stderr
    for name in (topics.ingest, topics.egress, topics.dlq, topics.policy):
        assert partitions_of(admin, name) is None, name


def check_args(kafka_bootstrap: str, topics: Topics, app_id: str) -> list[str]:
    return [
        "topics",
        "check",
        "--bootstrap",
        kafka_bootstrap,
        "--app-id",
        app_id,
        *topic_args(topics),
        "--feedback-topic",
        "",
    ]


def test_check_passes_topics_that_create_made(kafka_bootstrap: str) -> None:
    topics, app_id = unique_topics(), unique("app")
    created = fairstream(
        "topics",
        "create",
        "--bootstrap",
        kafka_bootstrap,
        "--app-id",
        app_id,
        *topic_args(topics),
        "--partitions",
        "2",
        "--feedback-topic",
        "",
    )
    assert created.returncode == 0, created.stderr

    checked = fairstream(*check_args(kafka_bootstrap, topics, app_id), "--partitions", "2")

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "6 topics checked: 0 problems" in checked.stdout
    assert "PROBLEM" not in checked.stdout
    # One replica on a one-node broker: a warning, said once for every topic.
    (warning,) = [line for line in checked.stdout.splitlines() if line.startswith("WARNING")]
    assert "has one replica" in warning
    assert f"{topics.ingest}, {topics.egress}" in warning


def test_check_reports_each_wrong_topic_with_its_fix(kafka_bootstrap: str) -> None:
    """Wrong partitions, no compaction, a finite ingest retention and too small a
    max.message.bytes, made on the real broker; each reported with the fix, exit 1."""
    topics, app_id = unique_topics(), unique("app")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created = fairstream(
        "topics",
        "create",
        "--bootstrap",
        kafka_bootstrap,
        "--app-id",
        app_id,
        *topic_args(topics),
        "--partitions",
        "3",
        "--feedback-topic",
        "",
        "--ingest-retention-ms",
        "3600000",
    )
    assert created.returncode == 0, created.stderr
    # The faults: a progress topic of another partition count (deleted and made again), a
    # policy topic made without compaction, an egress topic that cannot take a full record.
    progress, policy = f"{app_id}-progress", f"{topics.policy}-plain"
    for future in admin.delete_topics([progress], operation_timeout=30).values():
        future.result(timeout=60)
    remade = [
        NewTopic(progress, 2, 1, config={"cleanup.policy": "compact"}),
        NewTopic(policy, 1, 1),
    ]
    deadline = time.monotonic() + 60
    while True:  # the deleted topic's name is free once the broker finished deleting it
        futures = admin.create_topics(remade, operation_timeout=30)
        try:
            for future in futures.values():
                future.result(timeout=60)
            break
        except KafkaException:
            assert time.monotonic() < deadline, "the deleted progress topic never went away"
            remade = [t for t in remade if partitions_of(admin, t.topic) is None]
            time.sleep(0.5)
    alter = ConfigResource(
        ConfigResource.Type.TOPIC,
        topics.egress,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "1048588", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([alter]).values():
        future.result(timeout=60)
    # The broker acknowledges the change before every read sees it: the check must find it.
    wait_until(
        lambda: topic_config(admin, topics.egress, "max.message.bytes") == "1048588",
        30,
        "the egress topic's new max.message.bytes visible",
    )
    faulty = Topics(topics.ingest, topics.egress, topics.dlq, policy)

    checked = fairstream(*check_args(kafka_bootstrap, faulty, app_id))

    assert checked.returncode == 1, checked.stdout + checked.stderr
    out = checked.stdout
    problems = [line for line in out.splitlines() if line.startswith("PROBLEM")]
    assert len(problems) == 4, out
    assert "4 problems" in out
    expected = {
        f"PROBLEM {progress}: has 2 partitions but the ingest topic {topics.ingest} has 3": (
            "another --app-id"
        ),
        f"PROBLEM {policy}: has cleanup.policy=delete": (
            f"--entity-name {policy} --add-config cleanup.policy=compact"
        ),
        f"PROBLEM {topics.ingest}: has retention.ms=3600000": (
            f"--entity-name {topics.ingest} --add-config retention.ms=-1"
        ),
        f"PROBLEM {topics.egress}: has max.message.bytes=1048588": (
            f"--entity-name {topics.egress} --add-config max.message.bytes=1052684"
        ),
    }
    lines = out.splitlines()
    for start, fix in expected.items():
        (index,) = [i for i, line in enumerate(lines) if line.startswith(start)]
        assert lines[index + 1].startswith("  fix: "), lines[index + 1]
        assert fix in lines[index + 1], (start, lines[index + 1])

    # Said to be intended and watched, the ingest retention becomes a warning.
    allowed = fairstream(*check_args(kafka_bootstrap, faulty, app_id), "--allow-ingest-retention")
    assert allowed.returncode == 1
    assert "3 problems" in allowed.stdout
    assert f"WARNING {topics.ingest}: has retention.ms=3600000" in allowed.stdout


def test_a_record_at_the_ingest_limit_reaches_egress_on_topics_create_made(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The room `topics create` leaves above ingest's max.message.bytes is enough for the
    headers fairstream adds: the largest record ingest takes is emitted, not dead-lettered."""
    deployment = Deployment(kafka_bootstrap, partitions=1).create()
    topics = deployment.topics
    limit = int(
        configs_of(AdminClient({"bootstrap.servers": kafka_bootstrap}), topics.ingest)[
            "max.message.bytes"
        ]
    )
    scheduler = SchedulerProcess(deployment, tmp_path).start().wait_ready()
    egress = TopicReader(kafka_bootstrap, topics.egress)
    try:
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 2 * limit})
        # The largest value a 255-byte tenant id leaves room for on ingest (batch framing
        # about 100 bytes): fairstream's headers take more room than that framing.
        value = b"x" * (limit - 255 - 120)
        failures: list[object] = []
        producer.produce(
            topics.ingest,
            value,
            b"a" * 255,
            on_delivery=lambda err, _msg: failures.append(err) if err is not None else None,
        )
        assert producer.flush(60) == 0
        assert failures == []  # ingest took it
        (emitted,) = egress.read_until(1, timeout=60)
        assert emitted.value() == value
        assert dict(emitted.headers() or [])["fairstream-tenant"] == b"a" * 255
        dlq = TopicReader(kafka_bootstrap, topics.dlq)
        letters = read_to_end(kafka_bootstrap, dlq, topics.dlq, 1)
        dlq.close()
        assert letters == []
        assert scheduler.terminate() == 0, scheduler.tail()
    finally:
        egress.close()
        if scheduler.alive():
            scheduler.kill()
