"""How every fairstream client reaches Kafka: bootstrap servers and authentication."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairstream.config.setting import SettingsError, check, setting

DEFAULT_BOOTSTRAP = "localhost:9092"

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class KafkaConnectionError(SettingsError):
    """Connection settings that contradict each other (e.g. SASL without a password)."""


@dataclass(frozen=True)
class KafkaConnection:
    """How every fairstream client reaches Kafka: bootstrap servers and authentication.

    ``librdkafka()`` configures every confluent-kafka client (ingest readers, the
    transactional producer, admin, policy store, producer, worker). The password is left out
    of ``repr``
    (so out of ``Settings``' too) and out of ``describe()``, which is what logs may show.
    """

    bootstrap: str = setting(
        DEFAULT_BOOTSTRAP, help="Kafka bootstrap servers, host:port[,host:port...]."
    )
    security_protocol: str = setting(
        "PLAINTEXT",
        choices=SECURITY_PROTOCOLS,
        case_sensitive=False,
        help="How clients talk to the brokers: SASL_* authenticate, *SSL encrypt.",
    )
    sasl_mechanism: str | None = setting(
        None,
        choices=SASL_MECHANISMS,
        case_sensitive=False,
        help="SASL mechanism (with a SASL_* protocol).",
    )
    sasl_username: str | None = setting(None, help="SASL user name (with a SASL_* protocol).")
    sasl_password: str | None = setting(
        None,
        secret=True,
        help="SASL password (with a SASL_* protocol). Prefer the environment variable: "
        "a flag shows in the process list. Never logged.",
    )
    ssl_ca_location: str | None = setting(
        None,
        path="existing-file",
        help="CA certificates (PEM file) that sign the brokers' certificates (with SSL "
        "or SASL_SSL). [default: the system's CAs]",
    )

    def __post_init__(self) -> None:
        check(self, KafkaConnectionError)
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

    @classmethod
    def of(cls, kafka: KafkaConnection | str) -> KafkaConnection:
        """``kafka`` itself, or a PLAINTEXT connection to the bootstrap servers given."""
        return kafka if isinstance(kafka, KafkaConnection) else cls(bootstrap=kafka)


# What client helpers accept: a connection, or a bare bootstrap string (PLAINTEXT).
Connection = KafkaConnection | str
