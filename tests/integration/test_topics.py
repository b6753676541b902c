"""``fairstream topics create`` and the scheduler's topic check, as users run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
)

from fairstream.config import Topics
from fairstream_dev.harness.kafka import unique
from fairstream_dev.kafka import free_port

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
        "--ingest-topic", topics.ingest,
        "--egress-topic", topics.egress,
        "--dlq-topic", topics.dlq,
        "--policy-topic", topics.policy,
    ]  # fmt: skip


def unique_topics() -> Topics:
    base = unique("fs-topics")
    return Topics(f"{base}.ingest", f"{base}.egress", f"{base}.dlq", f"{base}.policy")


def partitions_of(admin: AdminClient, name: str) -> int | None:
    info = admin.list_topics(topic=name, timeout=15).topics.get(name)
    if info is None or info.error is not None:
        return None
    return len(info.partitions)


def cleanup_policy(admin: AdminClient, name: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(timeout=15)
    return str(configs["cleanup.policy"].value)


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
        "--bootstrap", kafka_bootstrap,
        *topic_args(topics),
        "--app-id", unique("app"),
        "--data-dir", str(tmp_path / "data"),
        "--web-port", str(free_port()),
        "--web-host", "127.0.0.1",
        timeout=90,
    )  # fmt: skip

    assert result.returncode != 0
    assert topics.ingest in result.stderr
    assert "does not exist" in result.stderr
    assert "fairstream topics create" in result.stderr
    assert partitions_of(admin, topics.ingest) is None  # not auto-created by the check
