"""Settings: each declared once; options, variables and checks derived from the declaration.

flag > FAIRSTREAM_* variable > default; refused values are usage errors (exit 2) on the
command line and ``SettingsError`` from Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import fairstream
from fairstream.cli import main
from fairstream.config import (
    DEFAULT_APP_ID,
    DEFAULT_BOOTSTRAP,
    DEFAULT_WEB_PORT,
    KafkaConnection,
    KafkaConnectionError,
    Settings,
    SettingsError,
    Topics,
    default_data_dir,
    scheduler_options,
    settings_from_options,
)
from fairstream.config.options import options_of
from fairstream.config.setting import build, declared, setting

# Unset every FAIRSTREAM_* variable of a setting, so the caller's environment cannot leak in.
CLEAN_ENV: dict[str, str | None] = dict.fromkeys(s.env for s in declared(Settings))


def invoke(args: list[str], env: Mapping[str, str] | None = None) -> tuple[Any, list[Settings]]:
    seen: list[Settings] = []

    @click.command()
    @scheduler_options
    def command(**options: Any) -> None:
        seen.append(settings_from_options(**options))

    result = CliRunner(env={**CLEAN_ENV, **(env or {})}).invoke(command, args)
    return result, seen


def settings_of(args: list[str], env: Mapping[str, str] | None = None) -> Settings:
    """The Settings a command decorated with ``scheduler_options`` builds from args and env."""
    result, seen = invoke(args, env)
    assert result.exit_code == 0, result.output
    return seen[0]


# -- help ------------------------------------------------------------------------------


def scheduler_help() -> str:
    # Wide enough that click never wraps an option's help onto a second line.
    result = CliRunner(env=CLEAN_ENV).invoke(
        main, ["scheduler", "--help"], terminal_width=1000, max_content_width=1000
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_scheduler_help_lists_every_setting_with_its_variable_and_default() -> None:
    # One block per option: its line and the help lines indented under it.
    blocks: list[str] = []
    for line in scheduler_help().split("Options:")[1].splitlines():
        if line.startswith("  -"):
            blocks.append(line.strip())
        elif blocks:
            blocks[-1] += " " + line.strip()
    settings = declared(Settings)
    assert len(settings) == 50  # 6 connection, 4 topics, 40 scheduler
    for option in settings:
        start = f"{option.flag} / --no-" if option.type is bool else f"{option.flag} "
        rows = [block for block in blocks if block.startswith(start)]
        assert len(rows) == 1, f"{option.flag} not listed once"
        assert f"[env var: {option.env}" in rows[0], rows[0]
        assert (f"{option.env}; default: " in rows[0]) == (option.default is not None), rows[0]


def test_scheduler_help_lists_the_options_in_a_stable_order() -> None:
    flags = [
        line.split()[0]
        for line in scheduler_help().splitlines()
        if line.startswith("  --") and not line.startswith("  --help")
    ]
    assert flags[:11] == [
        "--bootstrap",
        "--security-protocol",
        "--sasl-mechanism",
        "--sasl-username",
        "--sasl-password",
        "--ssl-ca-location",
        "--ingest-topic",
        "--egress-topic",
        "--dlq-topic",
        "--policy-topic",
        "--app-id",
    ]
    assert "--trim" in flags  # listed as --trim / --no-trim
    assert "--console" in flags
    assert flags[-1] == "--log-level"
    assert "--buffer-memory INTEGER RANGE" in scheduler_help()
    assert "--share-by [demand|partitions]" in scheduler_help()


# -- defaults --------------------------------------------------------------------------


def test_defaults() -> None:
    settings = settings_of([])
    assert settings == Settings()
    assert settings.kafka == KafkaConnection()
    assert settings.bootstrap == DEFAULT_BOOTSTRAP
    assert settings.topics == Topics(
        "fairstream.ingest", "fairstream.egress", "fairstream.dlq", "fairstream.policy"
    )
    assert settings.app_id == DEFAULT_APP_ID
    assert (settings.rate, settings.burst, settings.cost_rate, settings.min_rate) == (None,) * 4
    assert settings.max_backlog == 100_000
    assert settings.quantum == 1
    assert settings.max_in_flight == 10_000
    assert settings.commit_interval == 0.1
    assert settings.transaction_timeout == 10.0
    assert settings.buffer_memory == 512 * 1024 * 1024
    assert settings.feedback_topic == "fairstream.feedback"
    assert settings.share_by == "demand"
    assert settings.trim is True
    assert settings.replication_factor == -1
    assert settings.session_timeout == 10.0
    assert settings.membership == "static"
    assert settings.group_instance_id is None  # the data directory's identity (run)
    assert settings.data_dir == default_data_dir()
    assert (settings.web_host, settings.web_port) == ("0.0.0.0", DEFAULT_WEB_PORT)
    assert settings.console is True
    assert settings.fairness_window == 10.0
    assert settings.log_level == "info"


def test_default_data_dir_follows_xdg_data_home(tmp_path: Path) -> None:
    settings = settings_of([], env={"XDG_DATA_HOME": str(tmp_path)})
    assert settings.data_dir == tmp_path / "fairstream"


# -- precedence ------------------------------------------------------------------------


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
        "FAIRSTREAM_BUFFER_MEMORY": "3",
        "FAIRSTREAM_TRIM": "false",
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
    assert settings.buffer_memory == 3 * 1024 * 1024
    assert settings.trim is False
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
        "FAIRSTREAM_CONSOLE": "false",
    }
    args = [
        "--bootstrap",
        "flag:9092",
        "--ingest-topic",
        "flag.ingest",
        "--app-id",
        "flag-app",
        "--rate",
        "10",
        "--max-backlog",
        "5",
        "--data-dir",
        str(tmp_path / "flag-data"),
        "--web-port",
        "7002",
        "--console",
    ]
    settings = settings_of(args, env=env)
    assert settings.bootstrap == "flag:9092"
    assert settings.topics.ingest == "flag.ingest"
    assert settings.app_id == "flag-app"
    assert settings.rate == 10.0
    assert settings.max_backlog == 5
    assert settings.data_dir == tmp_path / "flag-data"
    assert settings.web_port == 7002
    assert settings.console is True


def test_flags_and_environment_mix_per_option() -> None:
    settings = settings_of(["--egress-topic", "flag.egress"], env={"FAIRSTREAM_RATE": "3"})
    assert settings.topics == Topics(egress="flag.egress")
    assert settings.rate == 3.0
    assert settings.burst is None


# -- parsing ---------------------------------------------------------------------------


def test_buffer_memory_is_given_in_mib_and_held_in_bytes() -> None:
    assert settings_of(["--buffer-memory", "64"]).buffer_memory == 64 * 1024 * 1024


def test_empty_feedback_topic_and_group_instance_id_mean_none() -> None:
    settings = settings_of(["--feedback-topic", ""], env={"FAIRSTREAM_GROUP_INSTANCE_ID": ""})
    assert settings.feedback_topic is None
    assert settings.group_instance_id is None
    settings = settings_of(["--group-instance-id", "pod-0", "--feedback-topic", "fb"])
    assert (settings.group_instance_id, settings.feedback_topic) == ("pod-0", "fb")


def test_choices() -> None:
    settings = settings_of(
        ["--share-by", "partitions", "--log-level", "debug", "--no-trim"],
        env={
            "FAIRSTREAM_SECURITY_PROTOCOL": "sasl_plaintext",  # case does not matter here
            "FAIRSTREAM_SASL_MECHANISM": "scram-sha-512",
            "FAIRSTREAM_SASL_USERNAME": "u",
            "FAIRSTREAM_SASL_PASSWORD": "p",
        },
    )
    assert (settings.share_by, settings.log_level, settings.trim) == ("partitions", "debug", False)
    assert settings.kafka.security_protocol == "SASL_PLAINTEXT"
    assert settings.kafka.sasl_mechanism == "SCRAM-SHA-512"


def test_console_is_on_by_default_and_off_with_the_flag_or_environment() -> None:
    assert settings_of([]).console is True
    assert settings_of(["--no-console"]).console is False
    assert settings_of([], env={"FAIRSTREAM_CONSOLE": "false"}).console is False
    assert settings_of(["--console"], env={"FAIRSTREAM_CONSOLE": "false"}).console is True


def test_concurrency_limit_and_lease() -> None:
    assert settings_of([]).max_concurrency is None
    assert settings_of([]).concurrency_lease == 60.0
    settings = settings_of(["--max-concurrency", "20"], env={"FAIRSTREAM_CONCURRENCY_LEASE": "2.5"})
    assert (settings.max_concurrency, settings.concurrency_lease) == (20, 2.5)
    result, seen = invoke(["--max-concurrency", "20", "--feedback-topic", ""])
    assert result.exit_code == 2, result.output
    assert not seen
    assert "--max-concurrency needs the feedback topic" in result.output


def test_fairness_window() -> None:
    assert settings_of(["--fairness-window", "2.5"]).fairness_window == 2.5
    assert settings_of([], env={"FAIRSTREAM_FAIRNESS_WINDOW": "30"}).fairness_window == 30.0


# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--rate", "0"], {}, "'--rate'"),
        ([], {"FAIRSTREAM_RATE": "0"}, "'--rate'"),
        ([], {"FAIRSTREAM_RATE": "fast"}, "'--rate'"),
        (["--burst", "0.5"], {}, "'--burst'"),
        (["--max-backlog", "0"], {}, "'--max-backlog'"),
        (["--commit-interval", "61"], {}, "'--commit-interval'"),
        (["--transaction-timeout", "0.5"], {}, "'--transaction-timeout'"),
        (["--buffer-memory", "0"], {}, "'--buffer-memory'"),
        (["--session-timeout", "5"], {}, "'--session-timeout'"),
        (["--fairness-window", "3601"], {}, "'--fairness-window'"),
        ([], {"FAIRSTREAM_WEB_PORT": "70000"}, "'--web-port'"),
        (["--share-by", "luck"], {}, "'--share-by'"),
        (["--log-level", "INFO"], {}, "'--log-level'"),
        (["--max-concurrency", "0"], {}, "'--max-concurrency'"),
        ([], {"FAIRSTREAM_MAX_CONCURRENCY": "1.5"}, "'--max-concurrency'"),
        (["--concurrency-lease", "0"], {}, "'--concurrency-lease'"),
    ],
)
def test_out_of_range_values_are_refused_from_flags_and_environment(
    args: list[str], env: dict[str, str], message: str
) -> None:
    result, seen = invoke(args, env)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {message}" in result.output
    assert not seen


@pytest.mark.parametrize(
    "args", [["--min-rate", "5"], ["--min-rate", "5", "--rate", "4"], ["--min-rate", "0.1"]]
)
def test_min_rate_needs_a_rate_at_least_as_large(args: list[str]) -> None:
    result, seen = invoke(args)
    assert result.exit_code == 2, result.output
    assert not seen
    assert "--min-rate needs a --rate at least as large" in result.output
    assert settings_of(["--min-rate", "5", "--rate", "5"]).min_rate == 5.0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rate": 0.0}, "--rate must be > 0, got 0.0"),
        ({"burst": 0.5}, "--burst must be >= 1, got 0.5"),
        ({"web_port": 70_000}, "--web-port must be >= 0 and <= 65535, got 70000"),
        ({"buffer_memory": 1000}, "--buffer-memory must be >= 1"),
        ({"log_level": "loud"}, "--log-level must be one of debug, info, warning, error"),
        ({"share_by": "luck"}, "--share-by must be one of demand, partitions"),
        ({"min_rate": 1.0}, "--min-rate needs a --rate at least as large"),
    ],
)
def test_settings_made_in_python_are_checked_the_same_way(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings(**fields)


def test_settings_errors_are_fairstream_errors_and_value_errors() -> None:
    assert issubclass(SettingsError, fairstream.Error)
    assert issubclass(SettingsError, ValueError)
    assert issubclass(KafkaConnectionError, SettingsError)


def test_max_backlog_may_be_unlimited_from_python() -> None:
    assert Settings(max_backlog=None).max_backlog is None


# -- the declaration mechanism on a class of its own -------------------------------------


@dataclass(frozen=True)
class Example:
    size: int = setting(2048, low=1, unit=1024, help="KiB of things.")
    mode: str = setting("a", choices=("a", "b"), case_sensitive=False, help="A or B.")
    name: str | None = setting(None, flag="--example-name", empty_is_none=True, help="Name.")
    loud: bool = setting(False, help="Shout.")


def test_a_declared_class_gets_its_options_and_is_built_from_them() -> None:
    seen: list[Example] = []

    @click.command()
    @options_of(Example)
    def command(**options: Any) -> None:
        seen.append(build(Example, options))

    runner = CliRunner(env={"FAIRSTREAM_EXAMPLE_NAME": "env"})
    result = runner.invoke(command, ["--size", "3", "--mode", "B", "--loud"])
    assert result.exit_code == 0, result.output
    assert seen == [Example(size=3072, mode="b", name="env", loud=True)]
    help_text = runner.invoke(command, ["--help"], terminal_width=1000).output
    assert "--size INTEGER RANGE" in help_text
    assert "default: 2; x>=1" in help_text
    assert "--loud / --no-loud" in help_text
    assert "FAIRSTREAM_EXAMPLE_NAME" in help_text


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
