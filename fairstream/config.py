"""One settings model for the scheduler and the tools around it.

Precedence: command-line flags, then ``FAIRSTREAM_*`` environment variables, then the
defaults below. The click options that fill ``Settings`` live here too, so every command
spells each option, its variable and its default the same way.
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import click

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_BOOTSTRAP = "localhost:9092"
DEFAULT_INGEST = "fairstream.ingest"
DEFAULT_EGRESS = "fairstream.egress"
DEFAULT_DLQ = "fairstream.dlq"
DEFAULT_POLICY = "fairstream.policy"
DEFAULT_APP_ID = "fairstream"
DEFAULT_WEB_PORT = 6066


def default_data_dir() -> Path:
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "fairstream"


@dataclass(frozen=True)
class Topics:
    """The four topics a fairstream deployment uses."""

    ingest: str = DEFAULT_INGEST
    egress: str = DEFAULT_EGRESS
    dlq: str = DEFAULT_DLQ
    policy: str = DEFAULT_POLICY


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class KafkaConnectionError(ValueError):
    """Connection settings that contradict each other (e.g. SASL without a password)."""


@dataclass(frozen=True)
class KafkaConnection:
    """How every fairstream client reaches Kafka: bootstrap servers and authentication.

    One value feeds both client stacks: ``librdkafka()`` configures the confluent-kafka
    clients (ingest reader, writer, admin, policy store, producer, worker) and
    ``faust_credentials()`` the Faust app (aiokafka). The password is left out of ``repr``
    (so out of ``Settings``' too) and out of ``describe()``, which is what logs may show.
    """

    bootstrap: str = DEFAULT_BOOTSTRAP
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None  # PEM file of CA certificates; None: the system's

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise KafkaConnectionError(
                f"--security-protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
                f"got {self.security_protocol!r}"
            )
        if self.sasl_mechanism is not None and self.sasl_mechanism not in SASL_MECHANISMS:
            raise KafkaConnectionError(
                f"--sasl-mechanism must be one of {', '.join(SASL_MECHANISMS)}, "
                f"got {self.sasl_mechanism!r}"
            )
        sasl_given = [
            option
            for option, value in (
                ("--sasl-mechanism", self.sasl_mechanism),
                ("--sasl-username", self.sasl_username),
                ("--sasl-password", self.sasl_password),
            )
            if value is not None
        ]
        if self.sasl:
            missing = [
                option
                for option in ("--sasl-mechanism", "--sasl-username", "--sasl-password")
                if option not in sasl_given
            ]
            if missing:
                raise KafkaConnectionError(
                    f"--security-protocol {self.security_protocol} needs "
                    f"{', '.join(missing)} (or FAIRSTREAM_"
                    f"{missing[0].removeprefix('--').replace('-', '_').upper()})"
                )
        elif sasl_given:
            raise KafkaConnectionError(
                f"{', '.join(sasl_given)} given but --security-protocol is "
                f"{self.security_protocol}: use SASL_PLAINTEXT or SASL_SSL"
            )
        if self.ssl_ca_location is not None and not self.tls:
            raise KafkaConnectionError(
                f"--ssl-ca-location given but --security-protocol is {self.security_protocol}: "
                "use SSL or SASL_SSL"
            )

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def describe(self) -> str:
        """The bootstrap servers and how we authenticate, for logs and errors (no secret)."""
        auth = self.security_protocol
        if self.sasl:
            auth += f", {self.sasl_mechanism} as {self.sasl_username}"
        return f"{self.bootstrap} ({auth})"

    def environment(self) -> dict[str, str]:
        """The ``FAIRSTREAM_*`` variables that make a child ``fairstream`` process connect
        the same way (the password included: pass it only to our own processes)."""
        values = {
            "FAIRSTREAM_BOOTSTRAP": self.bootstrap,
            "FAIRSTREAM_SECURITY_PROTOCOL": self.security_protocol,
            "FAIRSTREAM_SASL_MECHANISM": self.sasl_mechanism,
            "FAIRSTREAM_SASL_USERNAME": self.sasl_username,
            "FAIRSTREAM_SASL_PASSWORD": self.sasl_password,
            "FAIRSTREAM_SSL_CA_LOCATION": self.ssl_ca_location,
        }
        return {name: value for name, value in values.items() if value is not None}

    def librdkafka(self) -> dict[str, Any]:
        """The confluent-kafka (librdkafka) settings: bootstrap.servers and authentication."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.security_protocol,
        }
        if self.sasl:
            config["sasl.mechanisms"] = self.sasl_mechanism
            config["sasl.username"] = self.sasl_username
            config["sasl.password"] = self.sasl_password
        if self.ssl_ca_location is not None:
            config["ssl.ca.location"] = self.ssl_ca_location
        return config

    def faust_brokers(self) -> list[str]:
        """The Faust ``broker`` URLs (``kafka://host:port``, one per bootstrap server)."""
        return [f"kafka://{host.strip()}" for host in self.bootstrap.split(",") if host.strip()]

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context aiokafka needs for SSL and SASL_SSL (verifying the broker)."""
        if not self.tls:
            return None
        return ssl.create_default_context(cafile=self.ssl_ca_location)

    def faust_credentials(self) -> Any:
        """Faust's ``broker_credentials`` (None for PLAINTEXT).

        faust-streaming turns these into aiokafka's ``security_protocol``, ``sasl_mechanism``,
        ``sasl_plain_username``/``_password`` and ``ssl_context`` for its consumer, producer
        and admin client (``credentials_to_aiokafka_auth``); aiokafka implements PLAIN and
        SCRAM-SHA-256/512 itself.
        """
        import faust

        if self.sasl:
            return faust.SASLCredentials(
                username=self.sasl_username,
                password=self.sasl_password,
                mechanism=self.sasl_mechanism,
                # With a context Faust picks SASL_SSL, without one SASL_PLAINTEXT.
                ssl_context=self.ssl_context(),
            )
        context = self.ssl_context()
        if context is not None:
            return faust.SSLCredentials(context)
        return None

    @classmethod
    def of(cls, kafka: KafkaConnection | str) -> KafkaConnection:
        """``kafka`` itself, or a PLAINTEXT connection to the bootstrap servers given."""
        return kafka if isinstance(kafka, KafkaConnection) else cls(bootstrap=kafka)


# What client helpers accept: a connection, or a bare bootstrap string (PLAINTEXT).
Connection = KafkaConnection | str


@dataclass(frozen=True)
class Settings:
    """Everything ``fairstream scheduler`` needs; built from flags and environment."""

    kafka: KafkaConnection = field(default_factory=KafkaConnection)
    topics: Topics = field(default_factory=Topics)
    app_id: str = DEFAULT_APP_ID
    rate: float | None = None  # records/s for the whole group; None: unlimited
    burst: float | None = None  # None: a tenth of a second's worth of rate, at least 1
    cost_rate: float | None = None  # cost units/s for the whole group; None: unlimited
    max_backlog: int | None = 100_000  # records per tenant; None: unlimited
    quantum: int = 1
    max_in_flight: int = 10_000  # egress records in one transaction at most
    commit_interval: float = 0.1  # seconds between transaction commits
    transaction_timeout: float = 10.0  # seconds before the broker aborts an abandoned one
    buffer_memory: int = 512 * 1024 * 1024  # bytes of payloads held; the rest is read back
    trim: bool = True  # delete ingest records below the committed low-water mark
    share_by: str = "demand"  # how instances split the group rate: demand or partitions
    min_rate: float | None = None  # the adaptive rate's floor; None: 1% of --rate
    feedback_topic: str | None = "fairstream.feedback"  # the workers' feedback; None: off
    replication_factor: int = 1  # of the buffer changelog topic Faust creates
    session_timeout: float = 10.0  # seconds before a dead member's partitions move
    group_instance_id: str | None = None  # static membership (e.g. the pod name)
    data_dir: Path = field(default_factory=default_data_dir)
    web_port: int = DEFAULT_WEB_PORT
    web_host: str = "0.0.0.0"
    console: bool = True  # the read-only web console at / on the web port
    fairness_window: float = 10.0  # seconds per fairness-audit window (the metrics)
    log_level: str = "info"

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap

    @property
    def effective_burst(self) -> float:
        if self.burst is not None:
            return self.burst
        if self.rate is None:
            return 1.0
        return max(1.0, self.rate / 10)


def _opt(*decls: str, env: str, **kwargs: Any) -> Callable[[F], F]:
    return click.option(*decls, envvar=f"FAIRSTREAM_{env}", show_envvar=True, **kwargs)


KAFKA_OPTION_NAMES = (
    "bootstrap",
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_ca_location",
)


def kafka_options(f: F) -> F:
    """``--bootstrap`` and the authentication options, passed to ``f`` as ``kafka``.

    Every command that talks to Kafka takes these six options (and their ``FAIRSTREAM_*``
    variables) and receives one ``KafkaConnection``; contradictory settings are a usage
    error before anything connects.
    """

    @functools.wraps(f)
    def command(*args: Any, **kw: Any) -> Any:
        values = {name: kw.pop(name) for name in KAFKA_OPTION_NAMES}
        try:
            kw["kafka"] = KafkaConnection(**values)
        except KafkaConnectionError as exc:
            raise click.UsageError(str(exc)) from exc
        return f(*args, **kw)

    options = [
        _opt(
            "--bootstrap",
            env="BOOTSTRAP",
            default=DEFAULT_BOOTSTRAP,
            show_default=True,
            help="Kafka bootstrap servers, host:port[,host:port...].",
        ),
        _opt(
            "--security-protocol",
            env="SECURITY_PROTOCOL",
            type=click.Choice(SECURITY_PROTOCOLS, case_sensitive=False),
            metavar=f"[{'|'.join(SECURITY_PROTOCOLS)}]",
            default="PLAINTEXT",
            show_default=True,
            help="How clients talk to the brokers: SASL_* authenticate, *SSL encrypt.",
        ),
        _opt(
            "--sasl-mechanism",
            env="SASL_MECHANISM",
            type=click.Choice(SASL_MECHANISMS, case_sensitive=False),
            metavar=f"[{'|'.join(SASL_MECHANISMS)}]",
            default=None,
            help="SASL mechanism (with a SASL_* protocol).",
        ),
        _opt(
            "--sasl-username",
            env="SASL_USERNAME",
            default=None,
            help="SASL user name (with a SASL_* protocol).",
        ),
        _opt(
            "--sasl-password",
            env="SASL_PASSWORD",
            default=None,
            show_default=False,
            help="SASL password (with a SASL_* protocol). Prefer the environment variable: "
            "a flag shows in the process list. Never logged.",
        ),
        _opt(
            "--ssl-ca-location",
            env="SSL_CA_LOCATION",
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            help="CA certificates (PEM file) that sign the brokers' certificates (with SSL "
            "or SASL_SSL). [default: the system's CAs]",
        ),
    ]
    wrapped: Any = command
    for option in reversed(options):
        wrapped = option(wrapped)
    return cast(F, wrapped)


def policy_topic_option(f: F) -> F:
    """``--policy-topic`` alone, for commands that touch only the policy topic."""
    return _opt(
        "--policy-topic",
        env="POLICY_TOPIC",
        default=DEFAULT_POLICY,
        show_default=True,
        help="Compacted topic of tenant policies.",
    )(f)


def topic_options(f: F) -> F:
    for decl, env, default, what in reversed(
        [
            (
                "--ingest-topic",
                "INGEST_TOPIC",
                DEFAULT_INGEST,
                "Topic producers write, keyed by tenant.",
            ),
            ("--egress-topic", "EGRESS_TOPIC", DEFAULT_EGRESS, "Topic the paid-API workers read."),
            ("--dlq-topic", "DLQ_TOPIC", DEFAULT_DLQ, "Dead-letter topic (reason in headers)."),
            (
                "--policy-topic",
                "POLICY_TOPIC",
                DEFAULT_POLICY,
                "Compacted topic of tenant policies (fairstream tenants writes it; every "
                "scheduler applies changes live).",
            ),
        ]
    ):
        f = _opt(decl, env=env, default=default, show_default=True, help=what)(f)
    return f


def scheduler_options(f: F) -> F:
    options: list[Callable[[F], F]] = [
        kafka_options,
        topic_options,
        _opt(
            "--app-id",
            env="APP_ID",
            default=DEFAULT_APP_ID,
            show_default=True,
            help="Consumer group id; also names the internal progress topic "
            "<app-id>-progress and prefixes the transactional ids.",
        ),
        _opt(
            "--rate",
            env="RATE",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="Egress records per second for the whole group (each instance takes its "
            "share by assigned partitions). [default: unlimited]",
        ),
        _opt(
            "--burst",
            env="BURST",
            type=click.FloatRange(min=1),
            default=None,
            help="Records that may go back to back above the rate, for the whole group. "
            "[default: rate/10, at least 1]",
        ),
        _opt(
            "--cost-rate",
            env="COST_RATE",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="Egress cost units per second for the whole group. [default: unlimited]",
        ),
        _opt(
            "--max-backlog",
            env="MAX_BACKLOG",
            type=click.IntRange(min=1),
            default=100_000,
            show_default=True,
            help="Records buffered per tenant before new ones go to the "
            "dead-letter topic as backlog-full.",
        ),
        _opt(
            "--quantum",
            env="QUANTUM",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help="Base DRR quantum in cost units (a tenant's quantum is weight x quantum).",
        ),
        _opt(
            "--max-in-flight",
            env="MAX_IN_FLIGHT",
            type=click.IntRange(min=1),
            default=10_000,
            show_default=True,
            help="Egress records in one transaction at most (a transaction commits every "
            "--commit-interval, or sooner when it reaches this many).",
        ),
        _opt(
            "--commit-interval",
            env="COMMIT_INTERVAL",
            type=click.FloatRange(min=0.01, max=60),
            default=0.1,
            show_default=True,
            help="Seconds between transaction commits. Egress records become visible to "
            "read_committed consumers when their transaction commits.",
        ),
        _opt(
            "--transaction-timeout",
            env="TRANSACTION_TIMEOUT",
            type=click.FloatRange(min=1, max=900),
            default=10.0,
            show_default=True,
            help="Seconds after which the broker aborts a transaction its instance left open "
            "(a crash): until then a new owner of its partitions waits.",
        ),
        _opt(
            "--buffer-memory",
            env="BUFFER_MEMORY",
            type=click.IntRange(min=1),
            default=512,
            show_default=True,
            help="MiB of buffered payloads held in memory; beyond that records are indexed "
            "without their payload and read back from the ingest topic when their turn comes.",
        ),
        _opt(
            "--min-rate",
            env="MIN_RATE",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="The lowest the egress rate goes when the paid API pushes back (429s "
            "reported on the feedback topic). [default: 1% of --rate]",
        ),
        _opt(
            "--feedback-topic",
            env="FEEDBACK_TOPIC",
            default="fairstream.feedback",
            show_default=True,
            help="Topic the workers report outcomes to: 429s adapt the rate between "
            "--min-rate and --rate, measured costs correct the tenants' shares. An empty "
            "value turns feedback off.",
        ),
        _opt(
            "--share-by",
            env="SHARE_BY",
            type=click.Choice(["demand", "partitions"]),
            default="demand",
            show_default=True,
            help="How the instances of the group split --rate: by demand (each instance's "
            "backlogged tenants' weights, exchanged through <app-id>-coordination: weighted "
            "max-min fair over the whole group) or statically by owned ingest partitions.",
        ),
        _opt(
            "--trim/--no-trim",
            env="TRIM",
            default=True,
            show_default=True,
            help="Delete ingest records below the committed low-water mark (AdminClient "
            "delete_records), so the ingest topic holds just the backlog. Turn off when other "
            "consumers read the ingest topic too.",
        ),
        _opt(
            "--replication-factor",
            env="REPLICATION_FACTOR",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help="Replication factor of the progress topic the scheduler creates if "
            "`fairstream topics create` did not (use 3 on a production cluster).",
        ),
        _opt(
            "--session-timeout",
            env="SESSION_TIMEOUT",
            type=click.FloatRange(min=6),
            default=10.0,
            show_default=True,
            help="Seconds without heartbeats after which the group gives a dead "
            "instance's partitions to the others.",
        ),
        _opt(
            "--group-instance-id",
            env="GROUP_INSTANCE_ID",
            default=None,
            help="Static group membership id, stable across restarts of this instance (the "
            "Helm chart sets the pod name): a restart within --session-timeout causes no "
            "rebalance. [default: none, dynamic membership]",
        ),
        _opt(
            "--data-dir",
            env="DATA_DIR",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="State directory: holds this instance's identity (its transactional id) "
            "when --group-instance-id is not given, so a restart on the same disk fences "
            f"what its previous run left open at once. [default: {default_data_dir()}]",
        ),
        _opt(
            "--web-port",
            env="WEB_PORT",
            type=click.IntRange(0, 65535),
            default=DEFAULT_WEB_PORT,
            show_default=True,
            help="Port of the console (/), /healthz, /readyz, /metrics and /tenants.",
        ),
        _opt(
            "--web-host",
            env="WEB_HOST",
            default="0.0.0.0",
            show_default=True,
            help="Address the web endpoints bind to.",
        ),
        _opt(
            "--console/--no-console",
            env="CONSOLE",
            default=True,
            show_default=True,
            help="Serve the read-only web console at / on the web port (tenants, shares "
            "against entitlements, dwell, live charts; never payloads).",
        ),
        _opt(
            "--fairness-window",
            env="FAIRNESS_WINDOW",
            type=click.FloatRange(min=1, max=3600),
            default=10.0,
            show_default=True,
            help="Seconds per window of the fairness audit: each window sets "
            "fairstream_fairness_jain_index and fairstream_fairness_shortfall_ratio.",
        ),
        _opt(
            "--log-level",
            env="LOG_LEVEL",
            type=click.Choice(["debug", "info", "warning", "error"]),
            default="info",
            show_default=True,
            help="Log level.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def settings_from_options(**kw: Any) -> Settings:
    """Build ``Settings`` from the keyword arguments click passes a command."""
    return Settings(
        kafka=kw["kafka"],
        topics=Topics(kw["ingest_topic"], kw["egress_topic"], kw["dlq_topic"], kw["policy_topic"]),
        app_id=kw["app_id"],
        rate=kw["rate"],
        burst=kw["burst"],
        cost_rate=kw["cost_rate"],
        max_backlog=kw["max_backlog"],
        quantum=kw["quantum"],
        max_in_flight=kw["max_in_flight"],
        commit_interval=kw["commit_interval"],
        transaction_timeout=kw["transaction_timeout"],
        buffer_memory=kw["buffer_memory"] * 1024 * 1024,
        trim=kw["trim"],
        share_by=kw["share_by"],
        min_rate=kw["min_rate"],
        feedback_topic=kw["feedback_topic"] or None,
        replication_factor=kw["replication_factor"],
        session_timeout=kw["session_timeout"],
        group_instance_id=kw["group_instance_id"] or None,
        data_dir=kw["data_dir"] or default_data_dir(),
        web_port=kw["web_port"],
        web_host=kw["web_host"],
        console=kw["console"],
        fairness_window=kw["fairness_window"],
        log_level=kw["log_level"],
    )
