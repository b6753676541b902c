"""A development cluster: several combined KRaft nodes on this machine, for node faults.

A single broker that restarts takes every partition's leader with it. Kafka 4.4's
transaction coordinator then completes a transaction without writing its markers when it
meets a partition with no leader (in the broker's controlled shutdown, or in its start after
a crash), and read_committed readers of that partition stay held until the same producer
writes there again (docs/soak.md). A cluster of three, with a replica of every topic on each
node and two in sync, restarts one node as production restarts a broker: the other nodes
lead its partitions and its transactions meanwhile.

``DevCluster`` lives in the process that made it (the soak): it formats the nodes in its
state directory, starts them, stops and starts one node on its own ports, and stops them
all. ``DevBroker`` stays the single broker of the tests and ``fairstream-dev kafka``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fairstream_dev.kafka import jars, local_engine
from fairstream_dev.kafka.process import free_port, pid_alive, terminate
from fairstream_dev.kafka.state import (
    HOST,
    KAFKA_VERSION,
    BrokerError,
    default_cache_dir,
)


@dataclass
class ClusterNode:
    """One node: its id, its two ports (kept across restarts) and its running process."""

    node_id: int
    port: int
    controller_port: int
    state_dir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and pid_alive(self.proc.pid)


class DevCluster:
    """``nodes`` combined KRaft nodes (broker and controller each), static quorum.

    Caller: the soak (``benchmarks.soak --brokers 3``).
    Affects: files under ``state_dir``; one background JVM per running node.
    """

    def __init__(
        self,
        state_dir: Path,
        nodes: int = 3,
        cache_dir: Path | None = None,
        kafka_version: str = KAFKA_VERSION,
        heap: str = "384m",
        log: Callable[[str], None] | None = None,
    ) -> None:
        if nodes < 3:
            # Two voters lose their quorum with either one: a node could not restart alone.
            raise BrokerError(f"a development cluster needs at least 3 nodes, got {nodes}")
        self.state_dir = state_dir.resolve()
        self.cache_dir = (cache_dir or default_cache_dir()).resolve()
        self.kafka_version = kafka_version
        self.heap = heap
        self._log = log or (lambda msg: print(msg, file=sys.stderr))
        self.nodes: list[ClusterNode] = []
        self._count = nodes

    @property
    def jars_dir(self) -> Path:
        return jars.jars_dir(self.cache_dir, self.kafka_version)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def jars_ready(self) -> bool:
        return jars.jars_ready(self.jars_dir)

    def fetch_jars(self) -> Path:
        return jars.fetch_jars(self.jars_dir, self.kafka_version, self._log)

    def node(self, node_id: int) -> ClusterNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise BrokerError(f"no node {node_id} in the cluster in {self.state_dir}")

    # -- lifecycle

    def up(self, timeout: float = 180.0) -> str:
        """Format and start every node; returns the bootstrap once all of them answer."""
        if self.nodes:
            raise BrokerError(f"the cluster in {self.state_dir} was started already")
        libs = self.fetch_jars()
        ports: set[int] = set()
        for node_id in range(1, self._count + 1):
            port, controller_port = self._free_pair(ports)
            self.nodes.append(
                ClusterNode(node_id, port, controller_port, self.state_dir / f"node-{node_id}")
            )
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in self.nodes)
        cluster_id: str | None = None
        for node in self.nodes:
            node.state_dir.mkdir(parents=True, exist_ok=True)
            jvm = self._jvm(libs, node)
            cluster_id = cluster_id or local_engine.random_cluster_id(jvm)
            properties = node.state_dir / "server.properties"
            properties.write_text(
                local_engine.server_properties(
                    node.state_dir / "data",
                    node.port,
                    node.controller_port,
                    kafka_version=self.kafka_version,
                    node_id=node.node_id,
                    voters=voters,
                )
            )
            local_engine.format_storage(
                jvm,
                properties,
                kafka_version=self.kafka_version,
                cluster_id=cluster_id,
            )
        # Every node first: none answers before a quorum of voters has elected a leader.
        for node in self.nodes:
            self._spawn(node, libs)
        for node in self.nodes:
            self._wait_ready(node, timeout)
        return self.bootstrap

    def stop(self, node_id: int, *, kill: bool = False, timeout: float = 60.0) -> None:
        """Stop one node (SIGTERM, a controlled shutdown; ``kill``: SIGKILL, a crash)."""
        node = self.node(node_id)
        if node.proc is not None and pid_alive(node.proc.pid):
            terminate(node.proc.pid, timeout, kill=kill)
        node.proc = None

    def start(self, node_id: int, timeout: float = 120.0) -> ClusterNode:
        """Start one stopped node again, on its own ports and data."""
        node = self.node(node_id)
        if node.running:
            raise BrokerError(f"node {node_id} runs already")
        self._spawn(node, self.fetch_jars())
        self._wait_ready(node, timeout)
        return node

    def down(self, timeout: float = 20.0) -> None:
        """Stop every node; their data stays in ``state_dir``.

        All of them are signalled at once: stopped one by one, the last nodes' controlled
        shutdowns would wait for a quorum that has gone.
        """
        running = [n.proc.pid for n in self.nodes if n.proc is not None and pid_alive(n.proc.pid)]
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        for pid in running:
            terminate(pid, timeout)
        for node in self.nodes:
            node.proc = None

    # -- parts

    @staticmethod
    def _free_pair(taken: set[int]) -> tuple[int, int]:
        pair: list[int] = []
        while len(pair) < 2:
            port = free_port()
            if port not in taken:
                taken.add(port)
                pair.append(port)
        return pair[0], pair[1]

    def _jvm(self, libs: Path, node: ClusterNode) -> list[str]:
        return local_engine.jvm_command(jars.java_command(), libs, self.heap, node.state_dir)

    def _spawn(self, node: ClusterNode, libs: Path) -> None:
        properties = node.state_dir / "server.properties"
        node.proc = local_engine.spawn(self._jvm(libs, node), properties, node.state_dir)

    def _wait_ready(self, node: ClusterNode, timeout: float) -> None:
        """Until the node answers a metadata request that lists every node of the cluster."""
        assert node.proc is not None
        local_engine.wait_ready(
            node.bootstrap, node.proc, timeout, node.state_dir, {}, brokers=len(self.nodes)
        )
