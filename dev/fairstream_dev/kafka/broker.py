"""Lifecycle of the development broker: find, start, stop, across processes.

``DevBroker`` is one broker, identified by its state directory: everything it writes
(properties, data, logs, ``state.json``) lives there, so ``up``, ``status`` and ``down`` run
from different processes agree on one broker. Where it runs is an engine's business:
``local_engine`` (the cached jars, see ``jars``, run with the machine's Java) or
``docker_engine`` (the apache/kafka image).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fairstream_dev.kafka import jars, local_engine
from fairstream_dev.kafka.process import (
    answers_metadata,
    free_port,
    is_our_broker,
    pid_alive,
    port_is_free,
    terminate,
)
from fairstream_dev.kafka.state import (
    BROKER_LOG,
    BROKER_SASL_USER,
    DEFAULT_SASL_USER,
    HOST,
    KAFKA_VERSION,
    SASL_PASSWORD_FILE,
    STATE_FILE,
    BrokerError,
    BrokerState,
    check_sasl_value,
    default_cache_dir,
    default_state_dir,
)


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
        return jars.jars_dir(self.cache_dir, self.kafka_version)

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
        return jars.jars_ready(self.jars_dir)

    def fetch_jars(self) -> Path:
        """Resolve the broker's classpath from Maven Central into the cache (once).

        Caller: ``up`` and ``fairstream-dev kafka fetch``.
        Affects: ``jars_dir``; Maven's own local repository (~/.m2).
        """
        return jars.fetch_jars(self.jars_dir, self.kafka_version, self._log)

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
            terminate(state.pid, timeout=30)

    def _start_local(
        self,
        port: int | None,
        timeout: float,
        sasl_user: str | None = None,
        sasl_password: str | None = None,
    ) -> BrokerState:
        java = jars.java_command()
        libs = self.fetch_jars()
        previous = self.recorded()
        stored_password = self.sasl_password()
        if sasl_user is not None:
            sasl_password = sasl_password or stored_password or secrets.token_urlsafe(18)
        reuse = (
            previous is not None
            and previous.engine == "local"
            # Another version's storage format may not be this one's: format anew.
            and previous.kafka_version == self.kafka_version
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
        jvm = local_engine.jvm_command(java, libs, self.heap, self.state_dir)
        if not reuse:
            scram = []
            if sasl_user is not None and broker_password is not None:
                scram = [(BROKER_SASL_USER, broker_password), (sasl_user, sasl_password or "")]
            local_engine.format_storage(jvm, properties, scram, self.kafka_version)
        proc = local_engine.spawn(jvm, properties, self.state_dir)
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
        local_engine.wait_ready(
            state.bootstrap, proc, timeout, self.state_dir, self.client_config(state)
        )
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
        """This broker's ``server.properties`` (see ``local_engine.server_properties``)."""
        return local_engine.server_properties(
            self.data_dir, port, controller_port, broker_password, self.kafka_version
        )

    # -- down ----------------------------------------------------------------------------

    def down(self, timeout: float = 60.0, *, kill: bool = False) -> BrokerState | None:
        """Stop the broker and wait until its process is gone; returns what was stopped.
        ``kill``: the local engine's broker is killed (SIGKILL), as by a crash, instead of
        shut down.

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
            terminate(state.pid, timeout, kill=kill)
            stopped = state
        # Keep the record without a pid (or container): a later `up` starts on the same port,
        # and the local engine reuses its formatted data (topics, offsets) too.
        state.pid = None
        state.container_id = None
        state.save(self.state_file)
        return stopped
