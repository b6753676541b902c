"""The broker as an operating-system process and a network endpoint: ports, liveness, stop.

Caller: the broker lifecycle (``broker.py``) and the engines; the tests use ``free_port``.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import time
from pathlib import Path
from typing import Any

from fairstream_dev.kafka.state import HOST, BrokerError


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a file, or a note that it does not exist."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} does not exist)"
    return "\n".join(text.splitlines()[-lines:])


LOWEST_PORT = 10_000  # listening ports are chosen from here up to the ephemeral range


def ephemeral_start(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The first port the system hands out to outgoing connections (32768 on Linux)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port(rng: random.Random | None = None) -> int:
    """A port nothing listens on, below the ephemeral range.

    Why below it: a broker restarted on the same ports (the soak, ``fairstream-dev kafka
    up`` after ``down``) must bind them again, and a port in the ephemeral range can be
    taken meanwhile as the local end of an outgoing connection (a client reconnecting):
    the soak's broker once failed to start with "Address already in use"."""
    rng = rng or random.Random()
    top = ephemeral_start()
    if top - LOWEST_PORT > 100:
        for _ in range(100):
            port = rng.randrange(LOWEST_PORT, top)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((HOST, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    """True when the broker could listen on ``port``: nothing listens there.

    The check binds with SO_REUSEADDR, as Kafka's listener does (Java's server sockets set
    it): right after a broker stops, its port has connections in TIME_WAIT for a minute, and
    a plain bind would call the port taken though the broker can bind it again at once.
    Something listening on it (on 127.0.0.1 or on every address) still makes it taken.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def answers_metadata(
    bootstrap: str,
    timeout: float = 3.0,
    client_config: dict[str, Any] | None = None,
    brokers: int = 1,
) -> bool:
    """True when a broker at ``bootstrap`` answers a metadata request that lists at least
    ``brokers`` brokers (itself; a cluster's node: every node).

    ``client_config``: more librdkafka settings, e.g. the SASL ones of a SASL broker.
    """
    from confluent_kafka.admin import AdminClient

    # log_level 0 keeps librdkafka from printing connection-refused lines while we poll.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **(client_config or {})})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except Exception:
        return False
    return len(metadata.brokers) >= brokers


def pid_alive(pid: int) -> bool:
    """True for a live process; a zombie (exited, not yet reaped) counts as gone."""
    with contextlib.suppress(ChildProcessError, OSError):
        # Reap it if it is our own child that exited (the test fixture starts brokers in-process).
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # The state letter follows the parenthesised command name.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def is_our_broker(pid: int) -> bool:
    """Guard against pid reuse: the process must be a kafka.Kafka JVM."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return pid_alive(pid)
    return b"kafka.Kafka" in cmdline


def terminate(pid: int, timeout: float, *, kill: bool = False) -> None:
    """SIGTERM the broker's process group, SIGKILL it after ``timeout`` s; wait until gone.
    With ``kill``, SIGKILL at once: a crash rather than a controlled shutdown."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL if kill else signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.1)
    if pid_alive(pid):
        raise BrokerError(f"broker process {pid} did not exit after SIGKILL")
