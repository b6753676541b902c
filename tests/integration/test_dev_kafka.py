"""``fairstream-dev kafka`` end to end: a second broker of its own, driven through the CLI."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer

from fairstream_dev.harness.kafka import consume, create_topics, unique, wait_until
from fairstream_dev.kafka import BrokerError, DevBroker, answers_metadata, local_engine

CLI = [sys.executable, "-m", "fairstream_dev", "kafka"]


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
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = run("up", "--port", str(port), state_dir=tmp_path / "b")
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use" in result.stderr


class ProducerLoad:
    """A plain confluent-kafka producer writing 0, 1, 2... to a topic until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "log_level": 0}
        )
        self.produced = 0
        self.delivered = 0
        self.errors: list[KafkaError] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(err)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(self.topic, str(self.produced).encode(), on_delivery=self._report)
            self.produced += 1
            self.producer.poll(0)
            self._stop.wait(0.005)  # pacing: about 200 records/s

    def start(self) -> ProducerLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(60)


def time_wait_on(port: int) -> int:
    """Connections in TIME_WAIT whose local port is ``port`` (from /proc/net/tcp)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "06":
            count += 1
    return count


def leave_time_wait_on(port: int) -> None:
    """Put a connection in TIME_WAIT on ``port``, as a stopped broker's clients leave them."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            accepted.close()  # the side that closes first keeps the TIME_WAIT
            client.recv(1)


def test_restart_comes_back_on_the_same_port_under_client_load(tmp_path: Path) -> None:
    """`down` then `up` while a producer keeps producing: the broker comes back at the same
    address though its port has connections in TIME_WAIT and the producer keeps retrying,
    and every record the producer was given is delivered."""
    state_dir = tmp_path / "broker"
    up = run("up", state_dir=state_dir)
    assert up.returncode == 0, up.stderr
    address = up.stdout.strip().splitlines()[-1]
    port = int(address.rsplit(":", 1)[1])
    topic = unique("restart")
    load: ProducerLoad | None = None
    try:
        create_topics(address, [topic])
        load = ProducerLoad(address, topic).start()
        wait_until(lambda: load.delivered >= 200, 60, "the producer delivering")
        down = run("down", state_dir=state_dir)
        assert down.returncode == 0, down.stderr
        left_by_broker = time_wait_on(port)
        print(f"\nconnections in TIME_WAIT on port {port} after down: {left_by_broker}")
        if not left_by_broker:
            leave_time_wait_on(port)
        assert time_wait_on(port) > 0
        # What made `up` move to another port: a bind without SO_REUSEADDR is refused now.
        with socket.socket() as plain, pytest.raises(OSError, match="in use"):
            plain.bind(("127.0.0.1", port))
        produced_while_down = load.produced
        assert load.delivered < produced_while_down  # it is retrying, not idle

        again = run("up", state_dir=state_dir)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip().splitlines()[-1] == address
        assert "taken by another process" not in again.stderr
        wait_until(
            lambda: load.delivered >= produced_while_down + 200,
            120,
            lambda: (
                f"the producer delivering after the restart ({load.delivered} delivered of "
                f"{load.produced}; {len(load.errors)} delivery errors, the first: "
                f"{load.errors[:3]})"
            ),
        )
        load.stop()
        assert not load.errors, load.errors[:3]
        assert load.delivered == load.produced
        values = {int(m.value()) for m in consume(address, topic, load.produced, timeout=120)}
        assert values == set(range(load.produced))  # topics, offsets and records survived
    finally:
        if load is not None:
            load.stop()
        run("down", state_dir=state_dir)


def test_broker_that_does_not_come_up_shows_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Skip formatting: kafka.Kafka refuses to start on unformatted storage.
    monkeypatch.setattr(local_engine, "format_storage", lambda *args: None)
    broker = DevBroker(state_dir=tmp_path / "b")
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
