"""``fairstream-dev kafka up | down | status | credentials | fetch``: the development broker
from the shell."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fairstream_dev.kafka.broker import DevBroker
from fairstream_dev.kafka.state import (
    DEFAULT_SASL_USER,
    KAFKA_VERSION,
    SCRAM_MECHANISM,
    BrokerError,
    default_state_dir,
    describe,
)

ENGINES = ("auto", "local", "docker")


def choose_engine(engine: str) -> str:
    """``auto`` means docker where a Docker engine answers, else local jars."""
    if engine != "auto":
        return engine
    from fairstream_dev.kafka.docker_engine import docker_available

    return "docker" if docker_available() else "local"


dir_option = click.option(
    "--dir",
    "state_dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="FAIRSTREAM_DEV_KAFKA_DIR",
    show_envvar=True,
    default=None,
    help=f"State directory: config, data, broker.log, state.json. [default: {default_state_dir()}]",
)


@click.group("kafka")
def kafka() -> None:
    """A single-node KRaft Apache Kafka on 127.0.0.1 for development and tests.

    The local engine resolves org.apache.kafka:kafka_2.13 from Maven Central with Maven
    (needs Java 17+ and mvn); the docker engine runs the apache/kafka image through
    testcontainers. Jars are cached under FAIRSTREAM_CACHE_DIR (default ~/.cache/fairstream).
    """


@kafka.command()
@dir_option
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    envvar="FAIRSTREAM_DEV_KAFKA_PORT",
    show_envvar=True,
    help="Broker port on 127.0.0.1. [default: a free port]",
)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="auto",
    show_default=True,
    envvar="FAIRSTREAM_DEV_KAFKA_ENGINE",
    show_envvar=True,
    help="auto: docker where a Docker engine answers and testcontainers is installed, else local.",
)
@click.option(
    "--kafka-version",
    default=KAFKA_VERSION,
    show_default=True,
    envvar="FAIRSTREAM_DEV_KAFKA_VERSION",
    show_envvar=True,
    help="Apache Kafka release (4.x needs Java 17+).",
)
@click.option(
    "--timeout",
    type=float,
    default=120.0,
    show_default=True,
    help="Seconds to wait for the broker to answer a metadata request.",
)
@click.option(
    "--sasl",
    is_flag=True,
    envvar="FAIRSTREAM_DEV_KAFKA_SASL",
    show_envvar=True,
    help=f"Clients must authenticate: SASL_PLAINTEXT with {SCRAM_MECHANISM} (local engine).",
)
@click.option(
    "--sasl-user",
    default=DEFAULT_SASL_USER,
    show_default=True,
    envvar="FAIRSTREAM_DEV_KAFKA_SASL_USER",
    show_envvar=True,
    help="The SCRAM user created for clients (with --sasl).",
)
@click.option(
    "--sasl-password",
    default=None,
    show_default=False,
    envvar="FAIRSTREAM_DEV_KAFKA_SASL_PASSWORD",
    show_envvar=True,
    help="Its password (with --sasl). [default: generated once, kept in the state "
    "directory's sasl-password file (mode 0600); see `fairstream-dev kafka credentials`]",
)
def up(
    state_dir: Path | None,
    port: int | None,
    engine: str,
    kafka_version: str,
    timeout: float,
    sasl: bool,
    sasl_user: str,
    sasl_password: str | None,
) -> None:
    """Start the broker (or find the running one); print its address as the last line."""
    broker = DevBroker(state_dir=state_dir, kafka_version=kafka_version)
    try:
        running = broker.status()
        if running is None:
            # SASL is set up in server.properties, which only the local engine writes.
            chosen = "local" if sasl and engine == "auto" else choose_engine(engine)
            click.echo(
                f"starting Apache Kafka {kafka_version} ({chosen}) in {broker.state_dir}", err=True
            )
            state = broker.up(
                port=port,
                engine=chosen,
                timeout=timeout,
                sasl=sasl,
                sasl_user=sasl_user,
                sasl_password=sasl_password,
            )
        else:
            state = broker.up(
                port=port,
                timeout=timeout,
                sasl=sasl,
                sasl_user=sasl_user,
                sasl_password=sasl_password,
            )
    except BrokerError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"broker log: {broker.log_file}", err=True)
    if state.sasl_username:
        click.echo(
            f"SASL_PLAINTEXT, {state.sasl_mechanism}, user {state.sasl_username}; password in "
            f"{broker.sasl_password_file} (`fairstream-dev kafka credentials` prints the "
            "FAIRSTREAM_* settings)",
            err=True,
        )
    click.echo(state.bootstrap)


@kafka.command()
@dir_option
@click.option(
    "--timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds to wait for a graceful stop before SIGKILL.",
)
def down(state_dir: Path | None, timeout: float) -> None:
    """Stop the broker and wait until its process is gone."""
    broker = DevBroker(state_dir=state_dir)
    try:
        stopped = broker.down(timeout=timeout)
    except BrokerError as exc:
        raise click.ClickException(str(exc)) from exc
    if stopped is None:
        click.echo("not running")
    else:
        click.echo(f"stopped {stopped.bootstrap}")


@kafka.command()
@dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the broker's state as JSON.")
def status(state_dir: Path | None, as_json: bool) -> None:
    """Say whether the broker runs and where (exit 0 running, 1 not)."""
    broker = DevBroker(state_dir=state_dir)
    state = broker.status()
    if state is None:
        click.echo(json.dumps({"running": False}) if as_json else "not running")
        sys.exit(1)
    if as_json:
        click.echo(json.dumps({"running": True, **describe(state)}))
    else:
        auth = f", SASL user {state.sasl_username}" if state.sasl_username else ""
        click.echo(f"running {state.bootstrap} ({state.engine}, Kafka {state.kafka_version}{auth})")


@kafka.command()
@dir_option
def credentials(state_dir: Path | None) -> None:
    """Print the running broker's connection settings as shell exports (password included).

    `eval "$(fairstream-dev kafka credentials)"` points every fairstream command at it.
    """
    import shlex

    broker = DevBroker(state_dir=state_dir)
    state = broker.status()
    if state is None:
        raise click.ClickException(f"no development broker runs in {broker.state_dir}")
    settings = {
        "FAIRSTREAM_BOOTSTRAP": state.bootstrap,
        "FAIRSTREAM_SECURITY_PROTOCOL": state.security_protocol,
    }
    if state.sasl_username:
        settings |= {
            "FAIRSTREAM_SASL_MECHANISM": state.sasl_mechanism or "",
            "FAIRSTREAM_SASL_USERNAME": state.sasl_username,
            "FAIRSTREAM_SASL_PASSWORD": broker.sasl_password() or "",
        }
    for name, value in settings.items():
        click.echo(f"export {name}={shlex.quote(value)}")


@kafka.command()
@click.option(
    "--kafka-version",
    default=KAFKA_VERSION,
    show_default=True,
    envvar="FAIRSTREAM_DEV_KAFKA_VERSION",
    show_envvar=True,
)
def fetch(kafka_version: str) -> None:
    """Resolve the broker jars from Maven Central into the cache; print their directory."""
    broker = DevBroker(kafka_version=kafka_version)
    try:
        path = broker.fetch_jars()
    except BrokerError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(str(path))
