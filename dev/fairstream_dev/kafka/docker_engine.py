"""The docker engine of the development broker: the official ``apache/kafka`` image.

Used where a Docker engine answers and testcontainers is installed (a dependency of
``fairstream-dev``). The container outlives the command that started it, so the
testcontainers reaper (Ryuk) is turned off for it and ``down`` removes it explicitly.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from fairstream_dev.kafka.process import answers_metadata
from fairstream_dev.kafka.state import HOST, STATE_FILE, BrokerError, BrokerState

IMAGE = "apache/kafka"
CONTAINER_PORT = 9092


def docker_available() -> bool:
    """True when testcontainers is installed and a Docker engine answers a ping."""
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=3)
        client.ping()
    except Exception:
        return False
    return True


def _client() -> Any:
    import docker

    return docker.from_env()


def broker_env(port: int) -> dict[str, str]:
    """The image's KAFKA_* settings: one combined KRaft node advertising the host port."""
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{HOST}:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
    }


def start(kafka_version: str, port: int, state_dir: Path, timeout: float) -> BrokerState:
    """Start ``apache/kafka:<version>`` with the broker port published on 127.0.0.1:port."""
    try:
        from testcontainers.core.config import testcontainers_config
        from testcontainers.core.container import DockerContainer
    except ImportError as exc:
        raise BrokerError(
            "the docker engine needs testcontainers: pip install testcontainers"
        ) from exc
    # The container must outlive this process; `down` removes it.
    testcontainers_config.ryuk_disabled = True
    container = DockerContainer(f"{IMAGE}:{kafka_version}")
    # Published on loopback only: a development broker has no business on other interfaces.
    container.with_kwargs(ports={f"{CONTAINER_PORT}/tcp": (HOST, port)})
    for key, value in broker_env(port).items():
        container.with_env(key, value)
    container.start()
    wrapped = container.get_wrapped_container()
    state = BrokerState(
        engine="docker",
        host=HOST,
        port=port,
        controller_port=9093,
        kafka_version=kafka_version,
        container_id=wrapped.id,
    )
    state.save(state_dir / STATE_FILE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answers_metadata(state.bootstrap, timeout=2.0):
            return state
        wrapped.reload()
        if wrapped.status not in ("created", "running"):
            break
        time.sleep(0.5)
    logs = wrapped.logs(tail=40).decode(errors="replace")
    stop(state)
    raise BrokerError(
        f"the {IMAGE}:{kafka_version} container did not answer at {state.bootstrap} "
        f"within {timeout:.0f} s. Last lines of its log:\n{logs}"
    )


def _container(state: BrokerState) -> Any | None:
    """The recorded container, or None when there is none (or no engine to ask)."""
    if not state.container_id:
        return None
    try:
        return _client().containers.get(state.container_id)
    except Exception:
        return None


def container_running(state: BrokerState) -> bool:
    container = _container(state)
    return container is not None and container.status == "running"


def stop(state: BrokerState) -> bool:
    """Remove the container; True when one was there to remove."""
    container = _container(state)
    if container is None:
        return False
    with contextlib.suppress(Exception):
        container.stop(timeout=20)
    with contextlib.suppress(Exception):
        container.remove(force=True)
    return True
