"""Lifecycle of the development broker: resolve jars, format storage, start, find, stop.

The local engine needs only Java 17+ and Maven: ``org.apache.kafka:kafka_2.13`` and its
runtime dependencies are copied from Maven Central into the user cache once, then the broker
runs as ``java -cp 'libs/*' kafka.Kafka server.properties`` in the background, exactly as the
binary distribution's scripts would run it. Everything it writes (properties, data, logs,
``state.json``) lives in one state directory, so ``up``, ``status`` and ``down`` run from
different processes agree on one broker.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
# Kafka 4.x logs through slf4j 1.7 to log4j2; the 1.x binding keeps the broker log from going
# silent (a 2.x binding beside slf4j-api 1.7 drops every line).
LOG4J_VERSION = "2.24.3"
MIN_JAVA = 17
HOST = "127.0.0.1"
STATE_FILE = "state.json"
BROKER_LOG = "broker.log"
STDOUT_LOG = "stdout.log"
SASL_PASSWORD_FILE = "sasl-password"
SCRAM_MECHANISM = "SCRAM-SHA-256"
DEFAULT_SASL_USER = "fairstream"
# The broker's own identity on its SASL listener (inter-broker), created at format time.
BROKER_SASL_USER = "fairstream-broker"
# Characters that survive StorageTool's --add-scram syntax and a quoted JAAS value unescaped.
SASL_SAFE = re.compile(r"[A-Za-z0-9._~@%+\-]{1,128}")

POM_TEMPLATE = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.fairstream</groupId>
  <artifactId>dev-kafka-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

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


class BrokerError(Exception):
    """A development-broker operation failed; the message says why and what to do."""


@dataclass
class BrokerState:
    """What ``up`` recorded about a broker it started (``state.json``)."""

    engine: str
    host: str
    port: int
    controller_port: int
    kafka_version: str
    pid: int | None = None
    container_id: str | None = None
    started_at: float = field(default_factory=time.time)
    # SASL_PLAINTEXT with SCRAM-SHA-256 for clients when set; the password is never here
    # (it lives in the state directory's ``sasl-password``, mode 0600).
    sasl_username: str | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def security_protocol(self) -> str:
        return "SASL_PLAINTEXT" if self.sasl_username else "PLAINTEXT"

    @property
    def sasl_mechanism(self) -> str | None:
        return SCRAM_MECHANISM if self.sasl_username else None

    @classmethod
    def load(cls, path: Path) -> BrokerState | None:
        try:
            raw = json.loads(path.read_text())
            return cls(**raw)
        except (OSError, ValueError, TypeError):
            return None

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)


def default_cache_dir() -> Path:
    """Where downloaded jars go: ``$FAIRSTREAM_CACHE_DIR``, else the user cache directory."""
    env = os.environ.get("FAIRSTREAM_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "fairstream"


def default_state_dir() -> Path:
    """Where the broker's data and log go: ``$FAIRSTREAM_DEV_KAFKA_DIR``, else the cache."""
    env = os.environ.get("FAIRSTREAM_DEV_KAFKA_DIR")
    if env:
        return Path(env).expanduser()
    return default_cache_dir() / "dev-kafka"


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a file, or a note that it does not exist."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} does not exist)"
    return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
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
    bootstrap: str, timeout: float = 3.0, client_config: dict[str, Any] | None = None
) -> bool:
    """True when a broker at ``bootstrap`` answers a metadata request with itself in it.

    ``client_config``: more librdkafka settings, e.g. the SASL ones of a SASL broker.
    """
    from confluent_kafka.admin import AdminClient

    # log_level 0 keeps librdkafka from printing connection-refused lines while we poll.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **(client_config or {})})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except Exception:
        return False
    return bool(metadata.brokers)


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


def java_command() -> str:
    """The java executable (``$JAVA_HOME/bin/java`` first), checked to be 17 or newer."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not candidate or not Path(candidate).exists():
        raise BrokerError(
            "no `java` found: the development broker needs a Java 17 or newer runtime. "
            "Install one (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`) or set "
            "JAVA_HOME; or point fairstream at an existing broker with KAFKA_BOOTSTRAP_SERVERS."
        )
    try:
        out = subprocess.run(
            [candidate, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as exc:
        raise BrokerError(f"cannot run {candidate}: {exc}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match:
        major = int(match.group(1))
        if major == 1 and match.group(2):  # "1.8.0" style
            major = int(match.group(2))
        if major < MIN_JAVA:
            raise BrokerError(
                f"{candidate} is Java {major}; Apache Kafka {KAFKA_VERSION} needs Java "
                f"{MIN_JAVA} or newer (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`)."
            )
    return candidate


class DevBroker:
    """One development broker, identified by its state directory.

    Caller: the ``fairstream-dev kafka`` command and the test fixtures.
    Affects: files under ``state_dir`` and ``cache_dir``; one background JVM (or container).
    """

    def __init__(
        self,
        state_dir: Path | None = None,
        cache_dir: Path | None = None,
        kafka_version: str = KAFKA_VERSION,
        heap: str = "512m",
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self.cache_dir = (cache_dir or default_cache_dir()).resolve()
        self.kafka_version = kafka_version
        self.heap = heap
        self._log = log or (lambda msg: print(msg, file=sys.stderr))

    # -- paths ---------------------------------------------------------------------------

    @property
    def jars_dir(self) -> Path:
        return self.cache_dir / f"kafka_{SCALA_VERSION}-{self.kafka_version}" / "libs"

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def log_file(self) -> Path:
        return self.state_dir / BROKER_LOG

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def sasl_password_file(self) -> Path:
        return self.state_dir / SASL_PASSWORD_FILE

    # -- SASL credentials ----------------------------------------------------------------

    def sasl_password(self) -> str | None:
        """The SASL user's password recorded in the state directory, if any."""
        try:
            return self.sasl_password_file.read_text().strip() or None
        except OSError:
            return None

    def _store_sasl_password(self, password: str) -> None:
        # Created 0600 from the start: the password is never readable by others, not even
        # between creation and a chmod.
        tmp = self.sasl_password_file.with_suffix(".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(password + "\n")
        tmp.replace(self.sasl_password_file)

    def client_config(self, state: BrokerState) -> dict[str, Any]:
        """librdkafka settings (beyond bootstrap.servers) a client needs for this broker."""
        if not state.sasl_username:
            return {}
        return {
            "security.protocol": state.security_protocol,
            "sasl.mechanisms": state.sasl_mechanism,
            "sasl.username": state.sasl_username,
            "sasl.password": self.sasl_password() or "",
        }

    # -- jars ----------------------------------------------------------------------------

    def jars_ready(self) -> bool:
        return (self.jars_dir / ".complete").exists()

    def fetch_jars(self) -> Path:
        """Resolve the broker's classpath from Maven Central into the cache (once).

        Caller: ``up`` and ``fairstream-dev kafka fetch``.
        Affects: ``jars_dir``; Maven's own local repository (~/.m2).
        """
        if self.jars_ready():
            return self.jars_dir
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerError(
                "no `mvn` on PATH: the development broker resolves Apache Kafka from Maven "
                "Central with Maven. Install it (Debian/Ubuntu: `apt-get install maven`) or "
                "point fairstream at an existing broker with KAFKA_BOOTSTRAP_SERVERS."
            )
        self.jars_dir.parent.mkdir(parents=True, exist_ok=True)
        self._log(
            f"resolving org.apache.kafka:kafka_{SCALA_VERSION}:{self.kafka_version} "
            f"and its runtime dependencies with Maven into {self.jars_dir} ..."
        )
        with tempfile.TemporaryDirectory(dir=self.jars_dir.parent) as tmp:
            pom = Path(tmp) / "pom.xml"
            pom.write_text(
                POM_TEMPLATE.format(
                    scala=SCALA_VERSION, kafka=self.kafka_version, log4j=LOG4J_VERSION
                )
            )
            staging = Path(tmp) / "libs"
            cmd = [
                mvn,
                "-B",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={staging}",
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0 or not any(staging.glob("kafka_*.jar")):
                lines = (proc.stdout + proc.stderr).splitlines()[-30:]
                raise BrokerError(
                    f"Maven could not resolve Apache Kafka {self.kafka_version} "
                    f"(exit {proc.returncode}). Last lines of its output:\n" + "\n".join(lines)
                )
            (staging / ".complete").write_text(self.kafka_version + "\n")
            if self.jars_dir.exists():
                shutil.rmtree(self.jars_dir)
            staging.replace(self.jars_dir)
        return self.jars_dir

    # -- status --------------------------------------------------------------------------

    def recorded(self) -> BrokerState | None:
        return BrokerState.load(self.state_file)

    def status(self) -> BrokerState | None:
        """The running broker of this state directory, or None.

        Caller: anyone. Affects: nothing.
        """
        state = self.recorded()
        if state is None:
            return None
        if state.engine == "docker":
            from fairstream_dev.kafka import docker_engine

            if not docker_engine.container_running(state):
                return None
        elif state.pid is None or not pid_alive(state.pid) or not is_our_broker(state.pid):
            return None
        config = self.client_config(state)
        return state if answers_metadata(state.bootstrap, client_config=config) else None

    # -- up ------------------------------------------------------------------------------

    def up(
        self,
        port: int | None = None,
        engine: str = "local",
        timeout: float = 120.0,
        *,
        sasl: bool = False,
        sasl_user: str = DEFAULT_SASL_USER,
        sasl_password: str | None = None,
    ) -> BrokerState:
        """Start the broker, or find the one already running; returns its state.

        ``sasl``: clients connect with SASL_PLAINTEXT and SCRAM-SHA-256 as ``sasl_user``;
        ``sasl_password`` defaults to the one stored in the state directory, or a random
        one generated and stored there (``sasl-password``, mode 0600) on first use.
        Without ``port``, a broker that ran in this state directory before comes back on its
        previous port (unless something else listens there now), so that its clients find
        it again; ``port`` that something listens on is a ``BrokerError``.

        Caller: ``fairstream-dev kafka up`` and the test fixtures.
        Affects: ``state_dir``; starts a background JVM or container.
        """
        if sasl:
            check_sasl_value("SASL user", sasl_user)
            if sasl_password is not None:
                check_sasl_value("SASL password", sasl_password)
        running = self.status()
        if running is not None:
            if port is not None and port != running.port:
                raise BrokerError(
                    f"a development broker already runs at {running.bootstrap} "
                    f"(state in {self.state_dir}); stop it first or use another --dir"
                )
            if sasl != bool(running.sasl_username) or (
                sasl
                and (
                    sasl_user != running.sasl_username
                    or (sasl_password is not None and sasl_password != self.sasl_password())
                )
            ):
                now = f"SASL user {running.sasl_username}" if running.sasl_username else "no SASL"
                raise BrokerError(
                    f"a development broker already runs at {running.bootstrap} with {now} "
                    f"(state in {self.state_dir}); stop it first (fairstream-dev kafka down) "
                    "or use another --dir"
                )
            return running
        self._reap_leftover()
        if port is not None and not port_is_free(port):
            raise BrokerError(
                f"port {port} on {HOST} is in use (something listens on it); "
                "pick another or omit --port"
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if sasl and engine == "docker":
            raise BrokerError("--sasl needs the local engine (--engine local)")
        if sasl:
            state = self._start_local(
                port, timeout, sasl_user=sasl_user, sasl_password=sasl_password
            )
        elif engine == "docker":
            from fairstream_dev.kafka import docker_engine

            state = docker_engine.start(
                self.kafka_version, port or self._client_port(), self.state_dir, timeout
            )
        else:
            state = self._start_local(port, timeout)
        state.save(self.state_file)
        return state

    def _client_port(self) -> int:
        """The port for a broker started without ``--port``: the previous run's, while free.

        Clients of the previous broker (a scheduler, producers) keep retrying its address:
        starting again on the same port is what lets them carry on without a restart.
        """
        previous = self.recorded()
        if previous is not None:
            if port_is_free(previous.port):
                return previous.port
            self._log(
                f"port {previous.port} of the previous broker is taken by another process; "
                "starting on another one (clients of the old address must be pointed to it)"
            )
        return free_port()

    def _reap_leftover(self) -> None:
        # A recorded broker that no longer answers (crashed, or hung) is stopped for good so
        # that its ports and data directory are free for the new one.
        state = self.recorded()
        if state is None:
            return
        if state.engine == "docker":
            from fairstream_dev.kafka import docker_engine

            docker_engine.stop(state)
        elif state.pid is not None and pid_alive(state.pid) and is_our_broker(state.pid):
            self._terminate(state.pid, timeout=30)

    def _start_local(
        self,
        port: int | None,
        timeout: float,
        sasl_user: str | None = None,
        sasl_password: str | None = None,
    ) -> BrokerState:
        java = java_command()
        jars = self.fetch_jars()
        previous = self.recorded()
        stored_password = self.sasl_password()
        if sasl_user is not None:
            sasl_password = sasl_password or stored_password or secrets.token_urlsafe(18)
        reuse = (
            previous is not None
            and previous.engine == "local"
            and (self.data_dir / "meta.properties").exists()
            and (port is None or port == previous.port)
            and port_is_free(previous.port)
            and port_is_free(previous.controller_port)
            # SCRAM users are created at format time: other credentials need a new format.
            and previous.sasl_username == sasl_user
            and (sasl_user is None or sasl_password == stored_password)
        )
        if reuse and previous is not None:
            # Same ports as before: the formatted data (topics, offsets) stays valid.
            port, controller_port = previous.port, previous.controller_port
        else:
            port = port or self._client_port()
            controller_port = free_port()
            while controller_port == port:
                controller_port = free_port()
            shutil.rmtree(self.data_dir, ignore_errors=True)
        broker_password = None
        if sasl_user is not None and sasl_password is not None:
            self._store_sasl_password(sasl_password)
            broker_password = self._broker_password(reuse)
        properties = self.state_dir / "server.properties"
        # It may hold the broker's own SASL password: readable by its owner only.
        properties.touch(mode=0o600)
        properties.chmod(0o600)
        properties.write_text(self.server_properties(port, controller_port, broker_password))
        log4j = self.state_dir / "log4j2.properties"
        log4j.write_text(LOG4J2_PROPERTIES.format(log=self.log_file))
        classpath = f"{jars}/*"
        jvm = [java, f"-Xmx{self.heap}", f"-Xms{self.heap}", "-Djava.awt.headless=true"]
        jvm += [f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
        if not reuse:
            scram = []
            if sasl_user is not None and broker_password is not None:
                scram = [(BROKER_SASL_USER, broker_password), (sasl_user, sasl_password or "")]
            self._format(jvm, properties, scram)
        stdout_path = self.state_dir / STDOUT_LOG
        with stdout_path.open("ab") as out:
            proc = subprocess.Popen(
                [*jvm, "kafka.Kafka", str(properties)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                start_new_session=True,  # survives the shell that ran `up`; SIGINT stays ours
            )
        state = BrokerState(
            engine="local",
            host=HOST,
            port=port,
            controller_port=controller_port,
            kafka_version=self.kafka_version,
            pid=proc.pid,
            sasl_username=sasl_user,
        )
        # Written before waiting so that `down` can stop a broker that is still starting.
        state.save(self.state_file)
        self._wait_ready(state, proc, timeout)
        return state

    def _broker_password(self, reuse: bool) -> str:
        # The broker's own SCRAM password is in server.properties; keep it when the formatted
        # data (where its SCRAM credential lives) is kept.
        properties = self.state_dir / "server.properties"
        if reuse:
            with contextlib.suppress(OSError):
                match = re.search(
                    rf'username="{BROKER_SASL_USER}" password="([^"]+)"', properties.read_text()
                )
                if match:
                    return match.group(1)
        return secrets.token_urlsafe(18)

    def server_properties(
        self, port: int, controller_port: int, broker_password: str | None = None
    ) -> str:
        """The broker configuration: one combined KRaft node, fit for a single machine.

        With ``broker_password``, the client listener is SASL_PLAINTEXT with SCRAM-SHA-256
        (the broker authenticates to it as ``BROKER_SASL_USER``); the controller listener
        stays PLAINTEXT on loopback.
        """
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
                "node.id=1",
                f"controller.quorum.bootstrap.servers={HOST}:{controller_port}",
                f"listeners={listener}://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
                f"advertised.listeners={listener}://{HOST}:{port}",
                "controller.listener.names=CONTROLLER",
                f"inter.broker.listener.name={listener}",
                f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,{listener}:{listener}",
                *sasl_lines,
                f"log.dirs={self.data_dir}",
                "num.partitions=1",
                # One node: every internal topic has one replica and needs one in sync.
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=10",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=4",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "min.insync.replicas=1",
                # Groups form at once instead of waiting 3 s for more members.
                "group.initial.rebalance.delay.ms=0",
                # fairstream creates its own topics, with the partition counts it needs.
                "auto.create.topics.enable=false",
                "log.retention.hours=24",
                "",
            ]
        )

    def _format(
        self, jvm: list[str], properties: Path, scram: list[tuple[str, str]] | None = None
    ) -> None:
        cluster_id = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "random-uuid"],
            capture_output=True,
            text=True,
            check=False,
        )
        if cluster_id.returncode != 0:
            raise BrokerError(
                "kafka.tools.StorageTool random-uuid failed:\n" + cluster_id.stderr[-2000:]
            )
        fmt = subprocess.run(
            [
                *jvm,
                "kafka.tools.StorageTool",
                "format",
                "--standalone",
                "-t",
                cluster_id.stdout.strip().splitlines()[-1],
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

    def _wait_ready(
        self, state: BrokerState, proc: subprocess.Popen[bytes], timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = proc.poll()
            if code is not None:
                raise BrokerError(
                    f"the broker exited with code {code} while starting. "
                    f"Last lines of {self.log_file}:\n{tail(self.log_file)}\n"
                    f"Last lines of {self.state_dir / STDOUT_LOG}:\n"
                    f"{tail(self.state_dir / STDOUT_LOG, 15)}"
                )
            if answers_metadata(
                state.bootstrap, timeout=2.0, client_config=self.client_config(state)
            ):
                return
            time.sleep(0.3)
        self._terminate(proc.pid, timeout=15)
        raise BrokerError(
            f"the broker did not answer a metadata request at {state.bootstrap} within "
            f"{timeout:.0f} s. Last lines of {self.log_file}:\n{tail(self.log_file)}"
        )

    # -- down ----------------------------------------------------------------------------

    def down(self, timeout: float = 60.0) -> BrokerState | None:
        """Stop the broker and wait until its process is gone; returns what was stopped.

        Caller: ``fairstream-dev kafka down`` and the test fixtures.
        Affects: the background JVM or container; ``state.json`` keeps the ports (no pid), so
        that the next ``up`` comes back at the same address.
        """
        state = self.recorded()
        if state is None:
            return None
        stopped: BrokerState | None = None
        if state.engine == "docker":
            from fairstream_dev.kafka import docker_engine

            if docker_engine.stop(state):
                stopped = state
        elif state.pid is not None and pid_alive(state.pid) and is_our_broker(state.pid):
            self._terminate(state.pid, timeout)
            stopped = state
        # Keep the record without a pid (or container): a later `up` starts on the same port,
        # and the local engine reuses its formatted data (topics, offsets) too.
        state.pid = None
        state.container_id = None
        state.save(self.state_file)
        return stopped

    def _terminate(self, pid: int, timeout: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
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


def check_sasl_value(what: str, value: str) -> None:
    """Refuse a SASL user or password that StorageTool or JAAS would misread."""
    if not SASL_SAFE.fullmatch(value):
        raise BrokerError(f"the {what} must be 1 to 128 characters of A-Z a-z 0-9 . _ ~ @ % + -")


def describe(state: BrokerState) -> dict[str, Any]:
    """A JSON-friendly view of a running broker, for ``status --json`` (no password)."""
    return {
        **asdict(state),
        "bootstrap": state.bootstrap,
        "security_protocol": state.security_protocol,
        "sasl_mechanism": state.sasl_mechanism,
    }
