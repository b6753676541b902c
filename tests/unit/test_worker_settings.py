"""The worker's settings are declared once (``WorkerSettings``): ``fairstream worker``'s
options and variables are derived from the declarations, ``fairstream.Worker``'s keyword
arguments take their defaults from them, and both refuse what the declarations refuse.
The command runs against a stand-in ``Worker`` here: nothing connects."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import re
import signal
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from fairstream.cli.worker import worker
from fairstream.config.setting import Declared, SettingsError, declared
from fairstream.sdk.worker import consumer
from fairstream.sdk.worker.consumer import Worker
from fairstream.sdk.worker.settings import WorkerSettings

SETTINGS = declared(WorkerSettings)
DEFAULTS = dataclasses.asdict(WorkerSettings())

# What users, the Helm chart and docker-compose know: flag, variable and default, as they
# were before the declarations (a change here is a change for users).
KNOWN = {
    "--egress-topic": ("FAIRSTREAM_EGRESS_TOPIC", "fairstream.egress"),
    "--dlq-topic": ("FAIRSTREAM_DLQ_TOPIC", "fairstream.dlq"),
    "--feedback-topic": ("FAIRSTREAM_FEEDBACK_TOPIC", "fairstream.feedback"),
    "--group-id": ("FAIRSTREAM_WORKER_GROUP_ID", "fairstream-workers"),
    "--concurrency": ("FAIRSTREAM_WORKER_CONCURRENCY", 1),
    "--ordering": ("FAIRSTREAM_WORKER_ORDERING", "start"),
    "--max-attempts": ("FAIRSTREAM_WORKER_MAX_ATTEMPTS", 5),
    "--backoff-initial": ("FAIRSTREAM_WORKER_BACKOFF_INITIAL", 0.1),
    "--backoff-max": ("FAIRSTREAM_WORKER_BACKOFF_MAX", 10.0),
    "--dedup-window": ("FAIRSTREAM_WORKER_DEDUP_WINDOW", 10_000),
    "--playout-delay": ("FAIRSTREAM_WORKER_PLAYOUT_DELAY", 0.1),
    "--max-pending": ("FAIRSTREAM_WORKER_MAX_PENDING", 1000),
    "--session-timeout": ("FAIRSTREAM_WORKER_SESSION_TIMEOUT", 10.0),
    "--metrics-port": ("FAIRSTREAM_WORKER_METRICS_PORT", None),
    "--metrics-host": ("FAIRSTREAM_WORKER_METRICS_HOST", "0.0.0.0"),
}

# A valid value other than the default, for every setting.
OTHER: dict[str, Any] = {
    "egress_topic": "acme.egress",
    "dlq_topic": "acme.dlq",
    "feedback_topic": "acme.feedback",
    "group_id": "acme-workers",
    "concurrency": 7,
    "ordering": "completion",
    "max_attempts": 2,
    "backoff_initial": 0.5,
    "backoff_max": 20.0,
    "dedup_window": 0,
    "playout_delay": 0.5,
    "max_pending": 5,
    "session_timeout": 30.0,
    "metrics_port": 9102,
    "metrics_host": "127.0.0.1",
}

# A value outside the declared limits, for every setting that has limits or choices.
REFUSED = [
    ("concurrency", 0),
    ("ordering", "per-tenant"),
    ("max_attempts", 0),
    ("backoff_initial", -0.5),
    ("backoff_max", -1.0),
    ("dedup_window", -1),
    ("playout_delay", -0.1),
    ("playout_delay", 61.0),
    ("max_pending", 0),
    ("session_timeout", 5.5),
    ("metrics_port", -1),
    ("metrics_port", 65536),
]


def setting_of(name: str) -> Declared:
    (found,) = [s for s in SETTINGS if s.field.name == name]
    return found


def option_of(setting: Declared) -> click.Option:
    (found,) = [p for p in worker.params if isinstance(p, click.Option) and p.name == setting.name]
    return found


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments each ``fairstream worker`` run gives ``Worker`` (a stand-in
    that returns from ``run`` at once), with no signal handler or logging set up."""
    calls: list[dict[str, Any]] = []

    class StandIn:
        def __init__(self, handler: Any, **kwargs: Any) -> None:
            calls.append(kwargs)

        def run(self) -> None:
            pass

        def stop(self) -> None:
            pass

    monkeypatch.setattr(consumer, "Worker", StandIn)
    monkeypatch.setattr(signal, "signal", lambda *args: None)
    monkeypatch.setattr(logging, "basicConfig", lambda **kw: None)
    return calls


def run(args: list[str], env: dict[str, str] | None = None) -> Result:
    clean: dict[str, str | None] = {n: None for n in os.environ if n.startswith("FAIRSTREAM_")}
    return CliRunner(env={**clean, **(env or {})}).invoke(
        worker, ["--handler", "json:dumps", *args], terminal_width=1000
    )


def test_the_names_defaults_and_variables_users_know() -> None:
    assert {s.flag: (s.env, s.default) for s in SETTINGS} == KNOWN
    own = [s for s in SETTINGS if not s.flag.endswith("-topic")]
    assert all(s.env == "FAIRSTREAM_WORKER_" + s.name.upper() for s in own)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.flag)
def test_each_option_is_derived_from_its_declaration(setting: Declared) -> None:
    option = option_of(setting)
    assert option.opts == [setting.flag]
    assert option.envvar == setting.env
    assert option.show_envvar
    assert option.default == setting.default == DEFAULTS[setting.field.name]
    assert option.help == setting.option.help
    if setting.option.choices:
        assert isinstance(option.type, click.Choice)
        assert tuple(option.type.choices) == setting.option.choices
    if setting.option.low is not None or setting.option.high is not None:
        assert isinstance(option.type, click.IntRange | click.FloatRange)
        assert (option.type.min, option.type.max) == (setting.option.low, setting.option.high)


def test_the_sdk_keywords_take_the_declared_defaults() -> None:
    parameters = inspect.signature(Worker).parameters
    for name, default in DEFAULTS.items():
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[name].default == default, name


def test_the_command_passes_the_declared_defaults(started: list[dict[str, Any]]) -> None:
    result = run([])
    assert result.exit_code == 0, result.output
    assert started == [{"bootstrap": started[0]["bootstrap"], **DEFAULTS}]


@pytest.mark.parametrize("name", list(OTHER))
def test_a_variable_sets_each_setting_and_the_flag_wins(
    name: str, started: list[dict[str, Any]]
) -> None:
    setting = setting_of(name)
    assert OTHER[name] != DEFAULTS[name]
    result = run([], env={setting.env: str(OTHER[name])})
    assert result.exit_code == 0, result.output
    assert started[-1] == {"bootstrap": started[-1]["bootstrap"], **DEFAULTS, name: OTHER[name]}

    if DEFAULTS[name] is not None:  # (--metrics-port has no value meaning "off")
        result = run([setting.flag, str(DEFAULTS[name])], env={setting.env: str(OTHER[name])})
        assert result.exit_code == 0, result.output
        assert started[-1][name] == DEFAULTS[name]


@pytest.mark.parametrize(("name", "value"), REFUSED)
def test_a_value_outside_the_limits_is_refused_by_the_command_and_the_sdk(
    name: str, value: object, started: list[dict[str, Any]]
) -> None:
    flag = setting_of(name).flag
    for result in (run([flag, str(value)]), run([], env={setting_of(name).env: str(value)})):
        assert result.exit_code == 2, result.output
        assert f"Invalid value for '{flag}'" in result.output
    assert started == []

    with pytest.raises(SettingsError) as refused:
        WorkerSettings(**{name: value})
    assert str(refused.value).startswith(f"{flag} must be ")
    with pytest.raises(ValueError, match="^" + re.escape(str(refused.value)) + "$") as sdk:
        Worker(lambda r: None, bootstrap="127.0.0.1:1", **{name: value})
    assert isinstance(sdk.value, SettingsError)


@pytest.mark.parametrize("name", [s.field.name for s in SETTINGS if s.option.low is not None])
def test_the_declared_bound_itself_is_accepted_by_both(
    name: str, started: list[dict[str, Any]]
) -> None:
    option = setting_of(name).option
    assert option.low is not None
    assert not option.low_open
    low = setting_of(name).type(option.low)
    values = {name: low, "backoff_initial": 0.0} if name == "backoff_max" else {name: low}
    args = [arg for key, v in values.items() for arg in (setting_of(key).flag, str(v))]
    result = run(args)
    assert result.exit_code == 0, result.output
    assert started[-1][name] == low
    assert getattr(WorkerSettings(**values), name) == low


def test_backoff_max_below_backoff_initial_is_the_same_error_in_both(
    started: list[dict[str, Any]],
) -> None:
    with pytest.raises(SettingsError) as refused:
        Worker(lambda r: None, bootstrap="127.0.0.1:1", backoff_initial=2.0, backoff_max=1.0)
    message = str(refused.value)
    assert message == "--backoff-max must be at least --backoff-initial, got 1.0 < 2.0"

    result = run(["--backoff-initial", "2", "--backoff-max", "1"])
    assert result.exit_code == 2, result.output
    assert f"Error: {message}" in result.output
    result = run(
        [], env={"FAIRSTREAM_WORKER_BACKOFF_INITIAL": "2", "FAIRSTREAM_WORKER_BACKOFF_MAX": "1"}
    )
    assert result.exit_code == 2, result.output
    assert f"Error: {message}" in result.output
    assert started == []


def test_feedback_off_is_none_for_the_sdk_and_an_empty_name_for_the_command(
    started: list[dict[str, Any]],
) -> None:
    with pytest.raises(ValueError, match="--feedback-topic must be a topic name, or None"):
        Worker(lambda r: None, bootstrap="127.0.0.1:1", feedback_topic="")
    assert (
        Worker(lambda r: None, bootstrap="127.0.0.1:1", feedback_topic=None).feedback_topic is None
    )
    for args, env in (
        (["--feedback-topic", ""], {}),
        (["--no-feedback"], {}),
        ([], {"FAIRSTREAM_WORKER_NO_FEEDBACK": "1"}),
    ):
        result = run(args, env)
        assert result.exit_code == 0, result.output
        assert started[-1]["feedback_topic"] is None


def test_a_zero_dedup_window_turns_de_duplication_off_in_both() -> None:
    assert Worker(lambda r: None, bootstrap="127.0.0.1:1", dedup_window=0)._recent is None
    assert Worker(lambda r: None, bootstrap="127.0.0.1:1", dedup_window=None)._recent is None
    assert Worker(lambda r: None, bootstrap="127.0.0.1:1")._recent is not None
