"""KafkaConnection: one model for every client; contradictions are usage errors; the
password never shows (help, repr, Settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from fairstream.cli import main
from fairstream.config import (
    KafkaConnection,
    KafkaConnectionError,
    Settings,
    kafka_options,
    scheduler_options,
    settings_from_options,
)

SECRET = "s3cret-Pa55"
KAFKA_ENV = (
    "FAIRSTREAM_BOOTSTRAP",
    "FAIRSTREAM_SECURITY_PROTOCOL",
    "FAIRSTREAM_SASL_MECHANISM",
    "FAIRSTREAM_SASL_USERNAME",
    "FAIRSTREAM_SASL_PASSWORD",
    "FAIRSTREAM_SSL_CA_LOCATION",
)
CLEAN_ENV: dict[str, str | None] = dict.fromkeys(KAFKA_ENV)


def scram(**overrides: Any) -> KafkaConnection:
    fields: dict[str, Any] = {
        "bootstrap": "k1:9092,k2:9092",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_username": "alice",
        "sasl_password": SECRET,
    }
    return KafkaConnection(**{**fields, **overrides})


# -- the model -------------------------------------------------------------------------


def test_plaintext_is_the_default_and_a_bare_string_means_it() -> None:
    assert KafkaConnection().librdkafka() == {
        "bootstrap.servers": "localhost:9092",
        "security.protocol": "PLAINTEXT",
    }
    assert KafkaConnection.of("h:1") == KafkaConnection(bootstrap="h:1")
    connection = scram()
    assert KafkaConnection.of(connection) is connection


def test_librdkafka_settings_for_sasl() -> None:
    assert scram().librdkafka() == {
        "bootstrap.servers": "k1:9092,k2:9092",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": SECRET,
    }


def test_librdkafka_settings_for_sasl_ssl_with_a_ca_file(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    config = scram(
        security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", ssl_ca_location=str(ca)
    ).librdkafka()
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanisms"] == "SCRAM-SHA-512"
    assert config["ssl.ca.location"] == str(ca)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sasl_password": None}, "needs --sasl-password"),
        (
            {"sasl_mechanism": None, "sasl_username": None},
            "needs --sasl-mechanism, --sasl-username",
        ),
        ({"security_protocol": "PLAINTEXT"}, "use SASL_PLAINTEXT or SASL_SSL"),
        ({"security_protocol": "SSL"}, "use SASL_PLAINTEXT or SASL_SSL"),
        ({"sasl_mechanism": "GSSAPI"}, "--sasl-mechanism must be one of"),
        ({"security_protocol": "TLS"}, "--security-protocol must be one of"),
        ({"ssl_ca_location": "/ca.pem"}, "use SSL or SASL_SSL"),
    ],
)
def test_contradictions_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(KafkaConnectionError, match=message):
        scram(**fields)


def test_the_password_is_not_in_repr_or_describe() -> None:
    connection = scram()
    assert SECRET not in repr(connection)
    assert SECRET not in connection.describe()
    assert "alice" in connection.describe()
    settings = Settings(kafka=connection)
    assert SECRET not in repr(settings)
    assert settings.bootstrap == "k1:9092,k2:9092"


# -- the options -----------------------------------------------------------------------


def run(
    args: list[str], env: dict[str, str] | None = None
) -> tuple[click.testing.Result, list[KafkaConnection]]:
    seen: list[KafkaConnection] = []

    @click.command()
    @kafka_options
    def command(kafka: KafkaConnection) -> None:
        seen.append(kafka)

    result = CliRunner(env={**CLEAN_ENV, **(env or {})}).invoke(command, args)
    return result, seen


def test_options_and_environment_build_one_connection() -> None:
    result, seen = run(
        ["--bootstrap", "b:1", "--security-protocol", "sasl_plaintext"],
        {
            "FAIRSTREAM_SASL_MECHANISM": "SCRAM-SHA-512",
            "FAIRSTREAM_SASL_USERNAME": "bob",
            "FAIRSTREAM_SASL_PASSWORD": SECRET,
        },
    )
    assert result.exit_code == 0, result.output
    assert seen == [KafkaConnection("b:1", "SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", SECRET)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--security-protocol", "SASL_SSL"], "needs --sasl-mechanism, --sasl-username"),
        (["--sasl-mechanism", "PLAIN"], "--sasl-mechanism given but --security-protocol is"),
        (["--sasl-mechanism", "KERBEROS"], "Invalid value for '--sasl-mechanism'"),
        (["--ssl-ca-location", "/nonexistent/ca.pem"], "does not exist"),
    ],
)
def test_bad_combinations_are_click_usage_errors(args: list[str], message: str) -> None:
    result, seen = run(args)
    assert result.exit_code == 2
    assert message in result.output
    assert not seen


def test_the_scheduler_settings_carry_the_connection() -> None:
    seen: list[Settings] = []

    @click.command()
    @scheduler_options
    def command(**options: Any) -> None:
        seen.append(settings_from_options(**options))

    env = {
        **CLEAN_ENV,
        "FAIRSTREAM_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "FAIRSTREAM_SASL_MECHANISM": "PLAIN",
        "FAIRSTREAM_SASL_USERNAME": "carol",
        "FAIRSTREAM_SASL_PASSWORD": SECRET,
    }
    result = CliRunner(env=env).invoke(command, ["--bootstrap", "x:9"])
    assert result.exit_code == 0, result.output
    assert seen[0].kafka == KafkaConnection("x:9", "SASL_PLAINTEXT", "PLAIN", "carol", SECRET)


@pytest.mark.parametrize(
    "command",
    [
        ["scheduler"],
        ["topics", "create"],
        ["tenants", "list"],
        ["tenants", "set"],
        ["submit"],
        ["worker"],
    ],
)
def test_every_kafka_command_has_the_options_and_never_shows_the_password(
    command: list[str],
) -> None:
    env = {**CLEAN_ENV, "FAIRSTREAM_SASL_PASSWORD": SECRET}
    result = CliRunner(env=env).invoke(
        main, [*command, "--help"], terminal_width=1000, max_content_width=1000
    )
    assert result.exit_code == 0, result.output
    # One block per option: its line and the help lines under it, up to the next option.
    blocks = " ".join(result.output.split()).split(" --")
    for option, variable in zip(
        (
            "bootstrap",
            "security-protocol",
            "sasl-mechanism",
            "sasl-username",
            "sasl-password",
            "ssl-ca-location",
        ),
        KAFKA_ENV,
        strict=True,
    ):
        rows = [block for block in blocks if block.startswith(option + " ")]
        assert len(rows) == 1, f"--{option} not listed once in {command}"
        assert f"env var: {variable}" in rows[0]
    password = next(block for block in blocks if block.startswith("sasl-password "))
    assert "default" not in password
    assert SECRET not in result.output
