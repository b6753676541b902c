"""Errors of the development broker that need no broker, no Java and no network."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairstream_dev.kafka import BrokerError, BrokerState, DevBroker, java_command, local_engine
from fairstream_dev.kafka.cluster import DevCluster


def test_missing_java_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(BrokerError, match="Java 17 or newer") as info:
        java_command()
    assert "apt-get install openjdk-17-jre-headless" in str(info.value)


def test_missing_maven_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    broker = DevBroker(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    with pytest.raises(BrokerError, match="apt-get install maven"):
        broker.fetch_jars()


def test_server_properties_fit_a_single_node(tmp_path: Path) -> None:
    props = DevBroker(state_dir=tmp_path).server_properties(9092, 9093).splitlines()
    assert "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093" in props
    assert "advertised.listeners=PLAINTEXT://127.0.0.1:9092" in props
    assert "transaction.state.log.min.isr=1" in props
    assert "share.coordinator.state.topic.replication.factor=1" in props
    assert "auto.create.topics.enable=false" in props


def test_a_cluster_node_has_static_voters_and_a_replica_of_every_topic_on_each_node(
    tmp_path: Path,
) -> None:
    voters = "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    props = local_engine.server_properties(
        tmp_path, 9092, 9102, kafka_version="4.4.0", node_id=2, voters=voters
    ).splitlines()
    assert "node.id=2" in props
    assert f"controller.quorum.voters={voters}" in props
    assert not any(line.startswith("controller.quorum.bootstrap.servers") for line in props)
    for setting in ("default", "offsets.topic", "transaction.state.log"):
        assert f"{setting}.replication.factor=3" in props
    # One node may stop while every write still finds two replicas in sync.
    assert "min.insync.replicas=2" in props
    assert "transaction.state.log.min.isr=2" in props


def test_a_cluster_of_two_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="at least 3 nodes"):
        DevCluster(tmp_path, nodes=2)


def test_brokers_before_3_9_get_static_voters(tmp_path: Path) -> None:
    """KIP-853's dynamic quorum (controller.quorum.bootstrap.servers, format --standalone)
    came with 3.9: older brokers need their voters listed."""
    old = DevBroker(state_dir=tmp_path, kafka_version="3.7.2").server_properties(9092, 9093)
    new = DevBroker(state_dir=tmp_path, kafka_version="4.4.0").server_properties(9092, 9093)
    assert "controller.quorum.voters=1@127.0.0.1:9093" in old.splitlines()
    assert "controller.quorum.bootstrap.servers" not in old
    assert "controller.quorum.bootstrap.servers=127.0.0.1:9093" in new.splitlines()
    assert "controller.quorum.voters" not in new
    assert [local_engine.dynamic_quorum(v) for v in ("3.7.2", "3.8.1", "3.9.0", "4.0.0")] == [
        False,
        False,
        True,
        True,
    ]


def test_status_of_a_dead_pid_is_not_running(tmp_path: Path) -> None:
    broker = DevBroker(state_dir=tmp_path)
    tmp_path.mkdir(exist_ok=True)
    # pid 2**22 + 1 is above Linux's pid_max ceiling, so it can never be alive.
    BrokerState("local", "127.0.0.1", 1, 2, "4.1.1", pid=2**22 + 1).save(broker.state_file)
    assert broker.status() is None
