"""Settings: every scheduler option has its FAIRSTREAM_* variable; flag > env > default."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from fairstream.cli import main
from fairstream.config import (
    DEFAULT_APP_ID,
    DEFAULT_BOOTSTRAP,
    DEFAULT_WEB_PORT,
    Settings,
    Topics,
    default_data_dir,
    scheduler_options,
    settings_from_options,
)

# The options the scheduler issue asks for, and their environment variables.
OPTIONS = {
    "--bootstrap": "FAIRSTREAM_BOOTSTRAP",
    "--ingest-topic": "FAIRSTREAM_INGEST_TOPIC",
    "--egress-topic": "FAIRSTREAM_EGRESS_TOPIC",
    "--dlq-topic": "FAIRSTREAM_DLQ_TOPIC",
    "--policy-topic": "FAIRSTREAM_POLICY_TOPIC",
    "--app-id": "FAIRSTREAM_APP_ID",
    "--rate": "FAIRSTREAM_RATE",
    "--burst": "FAIRSTREAM_BURST",
    "--max-backlog": "FAIRSTREAM_MAX_BACKLOG",
    "--data-dir": "FAIRSTREAM_DATA_DIR",
    "--web-port": "FAIRSTREAM_WEB_PORT",
}


def _scheduler_env_names() -> list[str]:
    @click.command()
    @scheduler_options
    def probe(**_: Any) -> None:
        pass

    return [
        env
        for p in probe.params
        if isinstance(p, click.Option)
        for env in ([p.envvar] if isinstance(p.envvar, str) else list(p.envvar or []))
    ]


# Unset every FAIRSTREAM_* option variable, so the caller's environment cannot leak in.
CLEAN_ENV: dict[str, str | None] = dict.fromkeys(_scheduler_env_names())


def settings_of(args: list[str], env: Mapping[str, str] | None = None) -> Settings:
    """The Settings a command decorated with ``scheduler_options`` builds from args and env."""
    seen: list[Settings] = []

    @click.command()
    @scheduler_options
    def command(**options: Any) -> None:
        settings = settings_from_options(**options)
        seen.append(settings)
        click.echo(repr(settings))

    result = CliRunner(env={**CLEAN_ENV, **(env or {})}).invoke(command, args)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == repr(seen[0])
    return seen[0]


# -- help ------------------------------------------------------------------------------


def test_scheduler_help_shows_every_option_with_its_environment_variable() -> None:
    # Wide enough that click never wraps an option's help onto a second line.
    result = CliRunner().invoke(
        main, ["scheduler", "--help"], terminal_width=1000, max_content_width=1000
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for option, env in OPTIONS.items():
        rows = [line for line in lines if line.lstrip().startswith(option + " ")]
        assert len(rows) == 1, f"{option} not listed once in:\n{result.output}"
        assert f"env var: {env}" in rows[0], rows[0]


def test_every_scheduler_option_has_a_fairstream_variable() -> None:
    names = _scheduler_env_names()
    assert set(OPTIONS.values()) <= set(names)
    assert all(name.startswith("FAIRSTREAM_") for name in names)
    assert len(names) == len(set(names))


# -- precedence ------------------------------------------------------------------------


def test_defaults() -> None:
    settings = settings_of([])
    assert settings == Settings(data_dir=default_data_dir())
    assert settings.bootstrap == DEFAULT_BOOTSTRAP
    assert settings.topics == Topics()
    assert settings.app_id == DEFAULT_APP_ID
    assert settings.rate is None
    assert settings.burst is None
    assert settings.max_backlog == 100_000
    assert settings.web_port == DEFAULT_WEB_PORT


def test_default_data_dir_follows_xdg_data_home(tmp_path: Path) -> None:
    settings = settings_of([], env={"XDG_DATA_HOME": str(tmp_path)})
    assert settings.data_dir == tmp_path / "fairstream"


def test_environment_overrides_defaults(tmp_path: Path) -> None:
    env = {
        "FAIRSTREAM_BOOTSTRAP": "kafka-1:9092,kafka-2:9092",
        "FAIRSTREAM_INGEST_TOPIC": "env.ingest",
        "FAIRSTREAM_EGRESS_TOPIC": "env.egress",
        "FAIRSTREAM_DLQ_TOPIC": "env.dlq",
        "FAIRSTREAM_POLICY_TOPIC": "env.policy",
        "FAIRSTREAM_APP_ID": "env-app",
        "FAIRSTREAM_RATE": "250",
        "FAIRSTREAM_BURST": "40",
        "FAIRSTREAM_MAX_BACKLOG": "77",
        "FAIRSTREAM_DATA_DIR": str(tmp_path / "env-data"),
        "FAIRSTREAM_WEB_PORT": "7001",
    }
    settings = settings_of([], env=env)
    assert settings.bootstrap == "kafka-1:9092,kafka-2:9092"
    assert settings.topics == Topics("env.ingest", "env.egress", "env.dlq", "env.policy")
    assert settings.app_id == "env-app"
    assert settings.rate == 250.0
    assert settings.burst == 40.0
    assert settings.max_backlog == 77
    assert settings.data_dir == tmp_path / "env-data"
    assert settings.web_port == 7001


def test_flags_override_environment(tmp_path: Path) -> None:
    env = {
        "FAIRSTREAM_BOOTSTRAP": "env:9092",
        "FAIRSTREAM_INGEST_TOPIC": "env.ingest",
        "FAIRSTREAM_APP_ID": "env-app",
        "FAIRSTREAM_RATE": "250",
        "FAIRSTREAM_MAX_BACKLOG": "77",
        "FAIRSTREAM_DATA_DIR": str(tmp_path / "env-data"),
        "FAIRSTREAM_WEB_PORT": "7001",
    }
    args = [
        "--bootstrap", "flag:9092",
        "--ingest-topic", "flag.ingest",
        "--app-id", "flag-app",
        "--rate", "10",
        "--max-backlog", "5",
        "--data-dir", str(tmp_path / "flag-data"),
        "--web-port", "7002",
    ]  # fmt: skip
    settings = settings_of(args, env=env)
    assert settings.bootstrap == "flag:9092"
    assert settings.topics.ingest == "flag.ingest"
    assert settings.app_id == "flag-app"
    assert settings.rate == 10.0
    assert settings.max_backlog == 5
    assert settings.data_dir == tmp_path / "flag-data"
    assert settings.web_port == 7002


def test_flags_and_environment_mix_per_option() -> None:
    settings = settings_of(["--egress-topic", "flag.egress"], env={"FAIRSTREAM_RATE": "3"})
    assert settings.topics == Topics(egress="flag.egress")
    assert settings.rate == 3.0
    assert settings.burst is None


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--rate", "0"], {}),
        ([], {"FAIRSTREAM_RATE": "0"}),
        (["--burst", "0.5"], {}),
        (["--max-backlog", "0"], {}),
        ([], {"FAIRSTREAM_WEB_PORT": "70000"}),
        ([], {"FAIRSTREAM_RATE": "fast"}),
    ],
)
def test_out_of_range_values_are_refused_from_flags_and_environment(
    args: list[str], env: dict[str, str]
) -> None:
    @click.command()
    @scheduler_options
    def command(**options: Any) -> None:
        settings_from_options(**options)

    result = CliRunner(env={**CLEAN_ENV, **env}).invoke(command, args)
    assert result.exit_code == 2, result.output
    assert "Invalid value" in result.output


# -- burst -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "burst", "expected"),
    [
        (None, None, 1.0),  # unlimited: the burst does not matter, 1 keeps it well-defined
        (None, 25.0, 25.0),
        (1000.0, None, 100.0),  # a tenth of a second's worth of rate
        (5.0, None, 1.0),  # ...but at least one record
        (10.0, None, 1.0),
        (20.0, None, 2.0),
        (1000.0, 3.0, 3.0),  # an explicit burst always wins
    ],
)
def test_effective_burst(rate: float | None, burst: float | None, expected: float) -> None:
    assert Settings(rate=rate, burst=burst).effective_burst == expected


def test_effective_burst_from_the_command_line() -> None:
    assert settings_of(["--rate", "500"]).effective_burst == 50.0
    assert settings_of(["--rate", "500", "--burst", "7"]).effective_burst == 7.0


# -- console and fairness audit ----------------------------------------------------------


def test_console_is_on_by_default_and_off_with_the_flag_or_environment() -> None:
    assert settings_of([]).console is True
    assert settings_of(["--no-console"]).console is False
    assert settings_of([], env={"FAIRSTREAM_CONSOLE": "false"}).console is False
    assert settings_of(["--console"], env={"FAIRSTREAM_CONSOLE": "false"}).console is True


def test_fairness_window() -> None:
    assert settings_of([]).fairness_window == 10.0
    assert settings_of(["--fairness-window", "2.5"]).fairness_window == 2.5
    assert settings_of([], env={"FAIRSTREAM_FAIRNESS_WINDOW": "30"}).fairness_window == 30.0
