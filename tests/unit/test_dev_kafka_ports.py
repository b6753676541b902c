"""Ports of the development broker: a restart finds its previous port free although the
old connections sit in TIME_WAIT; something listening there still makes it taken."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from fairstream_dev.kafka import BrokerError, BrokerState, DevBroker, port_is_free
from fairstream_dev.kafka.process import LOWEST_PORT, ephemeral_start, free_port


@pytest.fixture
def time_wait_port() -> int:
    """A port with nothing listening and one connection in TIME_WAIT on it.

    The listener sets SO_REUSEADDR as Kafka's does: its accepted connections inherit it,
    and only such TIME_WAIT connections let another SO_REUSEADDR socket bind the port.
    """
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = int(listener.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            accepted.close()  # the side that closes first keeps the TIME_WAIT
            client.recv(1)
    return port


def test_a_port_in_time_wait_is_free(time_wait_port: int) -> None:
    with socket.socket() as plain, pytest.raises(OSError, match="in use"):
        plain.bind(("127.0.0.1", time_wait_port))  # what the old check did, and refused
    assert port_is_free(time_wait_port)


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0"])
def test_a_port_something_listens_on_is_taken(address: str) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, 0))
        sock.listen()
        assert not port_is_free(sock.getsockname()[1])


def record(broker: DevBroker, port: int) -> None:
    broker.state_dir.mkdir(parents=True, exist_ok=True)
    # Stopped: no pid, as `down` leaves it.
    BrokerState("local", "127.0.0.1", port, 1, "4.1.1", pid=None).save(broker.state_file)


def test_without_port_a_restart_takes_the_previous_one(tmp_path: Path, time_wait_port: int) -> None:
    broker = DevBroker(state_dir=tmp_path, log=lambda _: None)
    record(broker, time_wait_port)
    assert broker._client_port() == time_wait_port


def test_a_previous_port_taken_by_a_listener_moves_with_a_note(tmp_path: Path) -> None:
    notes: list[str] = []
    broker = DevBroker(state_dir=tmp_path, log=notes.append)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = int(sock.getsockname()[1])
        record(broker, taken)
        assert broker._client_port() != taken
        with pytest.raises(BrokerError, match=f"port {taken} on 127.0.0.1 is in use"):
            broker.up(port=taken, engine="local")
    assert len(notes) == 1
    assert f"port {taken} of the previous broker is taken by another process" in notes[0]


def test_new_ports_lie_below_the_ephemeral_range(tmp_path: Path) -> None:
    # A port handed out to outgoing connections can be taken as a client's local end while
    # the broker restarts on it ("Address already in use" in the soak): listening ports come
    # from below the range.
    top = ephemeral_start()
    ports = {free_port(random.Random(seed)) for seed in range(20)}
    assert all(LOWEST_PORT <= port < top for port in ports)
    assert len(ports) > 1
    assert ephemeral_start(tmp_path / "missing") == 32_768
    (tmp_path / "range").write_text("40000\t60999\n")
    assert ephemeral_start(tmp_path / "range") == 40_000
