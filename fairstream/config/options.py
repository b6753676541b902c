"""The click options of the settings classes, derived from their declarations.

Every option shows its ``FAIRSTREAM_*`` variable; precedence is flag, then variable, then
the declared default. Values a settings class refuses are usage errors (exit 2) before
anything connects.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from fairstream.config.kafka import KafkaConnection
from fairstream.config.setting import Declared, SettingsError, build, declared
from fairstream.config.settings import Settings, Topics

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


# The bare ParamType: generic only from click 8.5 on (fairstream supports 8.1 up; pyproject).
def _param_type(setting: Declared) -> click.ParamType | None:
    option = setting.option
    if option.choices:
        return click.Choice(option.choices, case_sensitive=option.case_sensitive)
    if option.path == "existing-file":
        return click.Path(exists=True, dir_okay=False)
    if option.path == "directory":
        return click.Path(file_okay=False, path_type=Path)
    if setting.type in (int, float) and (option.low is not None or option.high is not None):
        if setting.type is int:
            return click.IntRange(
                min=None if option.low is None else int(option.low),
                max=None if option.high is None else int(option.high),
                min_open=option.low_open,
            )
        return click.FloatRange(min=option.low, max=option.high, min_open=option.low_open)
    if setting.type in (int, float):
        return click.INT if setting.type is int else click.FLOAT
    return None  # str, or a bool flag


def click_option(setting: Declared, help: str | None = None) -> Callable[[F], F]:
    """The click option of one setting (``help`` replaces the declared help)."""
    option = setting.option
    decl = setting.flag
    if setting.type is bool:
        decl = f"{decl}/--no-{decl.removeprefix('--')}"
    extra: dict[str, Any] = {}
    if option.choices:
        extra["metavar"] = f"[{'|'.join(option.choices)}]"
    return click.option(
        decl,
        setting.name,
        envvar=setting.env,
        show_envvar=True,
        type=_param_type(setting),
        default=setting.default,
        show_default=setting.default is not None,
        help=option.help if help is None else help,
        **extra,
    )


def options_of(cls: type) -> Callable[[F], F]:
    """Every option of settings class ``cls``, passed to the command as plain values."""

    def decorate(f: F) -> F:
        for setting in reversed(declared(cls)):
            f = click_option(setting)(f)
        return f

    return decorate


def _usage_errors(make: Callable[[], T]) -> T:
    try:
        return make()
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from exc


def kafka_options(f: F) -> F:
    """``--bootstrap`` and the authentication options, passed to ``f`` as ``kafka``.

    Every command that talks to Kafka takes these six options (and their ``FAIRSTREAM_*``
    variables) and receives one ``KafkaConnection``; contradictory settings are a usage
    error before anything connects.
    """
    names = [setting.name for setting in declared(KafkaConnection)]

    @functools.wraps(f)
    def command(*args: Any, **kw: Any) -> Any:
        values = {name: kw.pop(name) for name in names}
        kw["kafka"] = _usage_errors(lambda: build(KafkaConnection, values))
        return f(*args, **kw)

    return options_of(KafkaConnection)(cast(F, command))


def topic_options(f: F) -> F:
    """``--ingest-topic``, ``--egress-topic``, ``--dlq-topic`` and ``--policy-topic``."""
    return options_of(Topics)(f)


def option_of(cls: type, name: str, help: str | None = None) -> Callable[[F], F]:
    """The option of setting ``name`` of ``cls`` alone, for a command that takes only it
    (``help``, when given, says what that command does with it)."""
    (setting,) = [setting for setting in declared(cls) if setting.field.name == name]
    return click_option(setting, help)


def policy_topic_option(f: F) -> F:
    """``--policy-topic`` alone, for commands that touch only the policy topic."""
    return option_of(Topics, "policy", help="Compacted topic of tenant policies.")(f)


def scheduler_options(f: F) -> F:
    """Every ``Settings`` option; the command builds them with ``settings_from_options``."""
    return options_of(Settings)(f)


def from_options(cls: type[T], values: Mapping[str, Any]) -> T:
    """An instance of settings class ``cls`` from the values click passes a command
    decorated with ``options_of(cls)`` (refused values are click usage errors)."""
    return _usage_errors(lambda: build(cls, values))


def settings_from_options(**kw: Any) -> Settings:
    """``Settings`` from the keyword arguments click passes a command decorated with
    ``scheduler_options`` (refused values are click usage errors)."""
    return from_options(Settings, kw)
