"""``fairstream dev-kafka`` end to end: a second broker of its own, driven through the CLI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fairstream.devkafka import BrokerError, DevBroker
from fairstream.devkafka.broker import answers_metadata
from tests.integration.kafka import consume, create_topics, unique

CLI = [sys.executable, "-m", "fairstream", "dev-kafka"]


def run(*args: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args, "--dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_up_status_down(tmp_path: Path) -> None:
    state_dir = tmp_path / "broker"
    up = run("up", state_dir=state_dir)
    assert up.returncode == 0, up.stderr
    address = up.stdout.strip().splitlines()[-1]
    host, port = address.rsplit(":", 1)
    assert host == "127.0.0.1"
    assert port.isdigit()
    try:
        assert answers_metadata(address)
        again = run("up", state_dir=state_dir)
        assert again.returncode == 0
        assert again.stdout.strip().splitlines()[-1] == address
        status = run("status", state_dir=state_dir)
        assert status.returncode == 0
        assert address in status.stdout

        # Broker settings for one node: internal topics with one replica, no auto-creation.
        properties = (state_dir / "server.properties").read_text()
        for line in (
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
        ):
            assert line in properties.splitlines()
        assert "Kafka Server started" in (state_dir / "broker.log").read_text()

        topic = unique("devkafka")
        create_topics(address, [topic])
        producer = Producer({"bootstrap.servers": address})
        producer.produce(topic, key=b"k", value=b"round trip")
        assert producer.flush(30) == 0
        assert consume(address, topic, 1)[0].value() == b"round trip"

        kcat = shutil.which("kcat") or shutil.which("kafkacat")
        if kcat:  # a client nobody here wrote
            listing = subprocess.run(
                [kcat, "-L", "-b", address], check=False, capture_output=True, text=True, timeout=60
            )
            assert "1 brokers" in listing.stdout
    finally:
        down = run("down", state_dir=state_dir)
    assert down.returncode == 0
    assert f"stopped {address}" in down.stdout
    status = run("status", state_dir=state_dir)
    assert status.returncode == 1
    assert "not running" in status.stdout
    assert not answers_metadata(address, timeout=2)


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = run("up", "--port", str(port), state_dir=tmp_path / "b")
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use" in result.stderr


def test_broker_that_does_not_come_up_shows_its_log(tmp_path: Path) -> None:
    class Unformatted(DevBroker):
        def _format(self, jvm: list[str], properties: Path, *args: object) -> None:
            """Skip formatting: kafka.Kafka refuses to start on unformatted storage."""

    broker = Unformatted(state_dir=tmp_path / "b")
    with pytest.raises(BrokerError, match="exited with code") as info:
        broker.up(engine="local", timeout=60)
    assert "meta.properties" in str(info.value)


def test_maven_failure_shows_mavens_output(tmp_path: Path) -> None:
    broker = DevBroker(
        state_dir=tmp_path / "b",
        cache_dir=tmp_path / "cache",
        kafka_version="0.0.0-no-such-release",
    )
    with pytest.raises(BrokerError, match="Maven could not resolve") as info:
        broker.fetch_jars()
    assert "0.0.0-no-such-release" in str(info.value)
