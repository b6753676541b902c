"""The local engine: one KRaft node run by the machine's Java from the cached jars.

The broker runs as ``java -cp 'libs/*' kafka.Kafka server.properties`` in the background,
exactly as the binary distribution's scripts would run it. This module writes its
configuration, formats its storage and waits for it to answer; ``DevBroker`` decides when.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from fairstream_dev.kafka.process import answers_metadata, tail, terminate
from fairstream_dev.kafka.state import (
    BROKER_LOG,
    BROKER_SASL_USER,
    HOST,
    KAFKA_VERSION,
    SCRAM_MECHANISM,
    STDOUT_LOG,
    BrokerError,
)

LOG4J2_PROPERTIES = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
# The controller and the log cleaner are chatty at INFO and drown what matters in a dev log.
logger.controller.name = org.apache.kafka.controller
logger.controller.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
"""


def version_tuple(kafka_version: str) -> tuple[int, ...]:
    """``"3.7.2"`` -> ``(3, 7, 2)``; a suffix (``-rc1``) is ignored."""
    return tuple(int(part) for part in kafka_version.split("-", maxsplit=1)[0].split("."))


def dynamic_quorum(kafka_version: str) -> bool:
    """Whether the version has KIP-853's dynamic quorum (3.9 on): a controller is found with
    ``controller.quorum.bootstrap.servers`` and formatted ``--standalone``. Before it, the
    voters are static (``controller.quorum.voters``) and the format has no such flag."""
    return version_tuple(kafka_version) >= (3, 9)


def server_properties(
    data_dir: Path,
    port: int,
    controller_port: int,
    broker_password: str | None = None,
    kafka_version: str = KAFKA_VERSION,
    *,
    node_id: int = 1,
    voters: str | None = None,
) -> str:
    """The broker configuration: one combined KRaft node, fit for a single machine.

    ``voters``: a node of a cluster (``cluster.DevCluster``) gets the static quorum
    (``1@host:port,2@host:port,...``), and every topic, internal ones included, one replica
    per node with two in sync, so that a node can stop while the others lead its partitions.

    With ``broker_password``, the client listener is SASL_PLAINTEXT with SCRAM-SHA-256
    (the broker authenticates to it as ``BROKER_SASL_USER``); the controller listener
    stays PLAINTEXT on loopback. Versions before 3.9 get static voters (see
    ``dynamic_quorum``); settings a version does not know (the share coordinator's before
    4.0) are only warned about by the broker.
    """
    if voters is not None:
        quorum = f"controller.quorum.voters={voters}"
        replicas = voters.count("@")
    else:
        quorum = (
            f"controller.quorum.bootstrap.servers={HOST}:{controller_port}"
            if dynamic_quorum(kafka_version)
            else f"controller.quorum.voters=1@{HOST}:{controller_port}"
        )
        replicas = 1
    in_sync = min(2, replicas)
    if broker_password is None:
        listener = "PLAINTEXT"
        sasl_lines: list[str] = []
    else:
        listener = "SASL_PLAINTEXT"
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{BROKER_SASL_USER}" password="{broker_password}";'
        )
        sasl_lines = [
            f"sasl.enabled.mechanisms={SCRAM_MECHANISM}",
            f"sasl.mechanism.inter.broker.protocol={SCRAM_MECHANISM}",
            f"listener.name.sasl_plaintext.{SCRAM_MECHANISM.lower()}.sasl.jaas.config={jaas}",
        ]
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={node_id}",
            quorum,
            f"listeners={listener}://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
            f"advertised.listeners={listener}://{HOST}:{port}",
            "controller.listener.names=CONTROLLER",
            f"inter.broker.listener.name={listener}",
            f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,{listener}:{listener}",
            *sasl_lines,
            f"log.dirs={data_dir}",
            "num.partitions=1",
            # One node: every internal topic has one replica and needs one in sync. A
            # cluster's topics have a replica on each node.
            f"default.replication.factor={replicas}",
            f"offsets.topic.replication.factor={replicas}",
            "offsets.topic.num.partitions=10",
            f"transaction.state.log.replication.factor={replicas}",
            f"transaction.state.log.min.isr={in_sync}",
            "transaction.state.log.num.partitions=4",
            f"share.coordinator.state.topic.replication.factor={replicas}",
            f"share.coordinator.state.topic.min.isr={in_sync}",
            f"min.insync.replicas={in_sync}",
            # A killed scheduler's open transaction holds back read_committed readers of
            # its egress partitions (the survivor's records behind it too) until the broker
            # aborts it: --transaction-timeout after it began, found by a sweep every 10 s
            # by default, so 10 to 20 s. Swept every second, the hand-over after a kill -9
            # shows within about --transaction-timeout + 1 s.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
            # Groups form at once instead of waiting 3 s for more members.
            "group.initial.rebalance.delay.ms=0",
            # fairstream creates its own topics, with the partition counts it needs.
            "auto.create.topics.enable=false",
            "log.retention.hours=24",
            "",
        ]
    )


def format_storage(
    jvm: list[str],
    properties: Path,
    scram: list[tuple[str, str]] | None = None,
    kafka_version: str = KAFKA_VERSION,
    *,
    cluster_id: str | None = None,
) -> None:
    """Format the KRaft storage of a new broker, with its SCRAM users (``--add-scram``).

    ``cluster_id``: the nodes of a cluster share one (``random_cluster_id``) and have static
    voters, so they are formatted without ``--standalone``; a lone broker gets its own.
    """
    standalone = cluster_id is None and dynamic_quorum(kafka_version)
    cluster_id = cluster_id or random_cluster_id(jvm)
    fmt = subprocess.run(
        [
            *jvm,
            "kafka.tools.StorageTool",
            "format",
            *(["--standalone"] if standalone else []),
            "-t",
            cluster_id,
            "-c",
            str(properties),
            *(
                arg
                for name, password in scram or []
                for arg in (
                    "--add-scram",
                    f"{SCRAM_MECHANISM}=[name={name},password={password}]",
                )
            ),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if fmt.returncode != 0:
        output = fmt.stdout + fmt.stderr
        for _, password in scram or []:
            output = output.replace(password, "***")
        raise BrokerError("formatting the broker storage failed:\n" + output[-3000:])


def random_cluster_id(jvm: list[str]) -> str:
    """A new KRaft cluster id (``StorageTool random-uuid``)."""
    made = subprocess.run(
        [*jvm, "kafka.tools.StorageTool", "random-uuid"],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        raise BrokerError("kafka.tools.StorageTool random-uuid failed:\n" + made.stderr[-2000:])
    return made.stdout.strip().splitlines()[-1]


def jvm_command(java: str, libs: Path, heap: str, state_dir: Path) -> list[str]:
    """The JVM's command line up to its main class: ``heap``, the cached jars ``libs``, and
    the log configuration, written here into ``state_dir`` (the broker logs to its
    ``broker.log``)."""
    log4j = state_dir / "log4j2.properties"
    log4j.write_text(LOG4J2_PROPERTIES.format(log=state_dir / BROKER_LOG))
    return [
        java,
        f"-Xmx{heap}",
        f"-Xms{heap}",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{libs}/*",
    ]


def spawn(jvm: list[str], properties: Path, state_dir: Path) -> subprocess.Popen[bytes]:
    """Start ``kafka.Kafka`` in the background, its output appended to ``stdout.log``."""
    with (state_dir / STDOUT_LOG).open("ab") as out:
        return subprocess.Popen(
            [*jvm, "kafka.Kafka", str(properties)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=state_dir,
            start_new_session=True,  # survives the shell that ran `up`; SIGINT stays ours
        )


def wait_ready(
    bootstrap: str,
    proc: subprocess.Popen[bytes],
    timeout: float,
    state_dir: Path,
    client_config: dict[str, Any],
    brokers: int = 1,
) -> None:
    """Wait until the new broker answers a metadata request (listing at least ``brokers``
    brokers: a cluster's node waits for every node).

    A broker that exits while starting, or does not answer within ``timeout`` s (it is then
    stopped), is a ``BrokerError`` carrying the last lines of its logs.
    """
    log_file = state_dir / BROKER_LOG
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise BrokerError(
                f"the broker exited with code {code} while starting. "
                f"Last lines of {log_file}:\n{tail(log_file)}\n"
                f"Last lines of {state_dir / STDOUT_LOG}:\n"
                f"{tail(state_dir / STDOUT_LOG, 15)}"
            )
        if answers_metadata(bootstrap, timeout=2.0, client_config=client_config, brokers=brokers):
            return
        time.sleep(0.3)
    terminate(proc.pid, timeout=15)
    raise BrokerError(
        f"the broker did not answer a metadata request at {bootstrap} within "
        f"{timeout:.0f} s. Last lines of {log_file}:\n{tail(log_file)}"
    )
