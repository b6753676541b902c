"""Each setting declared once, on its field: default, help, limits, flag and variable.

A settings class is a frozen dataclass whose fields are made with ``setting()``. The
command-line options (``fairstream.config.options``), the checks a value must pass
(``check``, called by the class itself) and the building of an instance from option values
(``build``) are all derived from those declarations, so a setting's name, default, help and
validation are written in one place.

The flag of a field is ``--<field-name>`` unless declared, its environment variable
``FAIRSTREAM_<FLAG_NAME>`` unless declared (``env``: the worker's own read
``FAIRSTREAM_WORKER_*``); a field whose type is itself a settings class (``Settings.kafka``)
contributes that class's options.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from fairstream.errors import Error

T = TypeVar("T")

OPTION = "fairstream.option"  # the key of a field's Option in its metadata
ENV_PREFIX = "FAIRSTREAM_"


class SettingsError(Error, ValueError):
    """A setting outside its limits, or settings that contradict each other."""


@dataclass(frozen=True)
class Option:
    """How a setting is given on the command line and which values it accepts."""

    help: str
    flag: str | None = None  # None: --<field-name>
    low: float | None = None  # the least value (in the option's unit)
    low_open: bool = False  # the least value itself is refused
    high: float | None = None  # the greatest value
    choices: tuple[str, ...] = ()
    case_sensitive: bool = True  # on the command line (the field holds the choice as listed)
    path: Literal["existing-file", "directory"] | None = None
    unit: int = 1  # the option counts in units of this many of the field's (MiB of bytes)
    empty_is_none: bool = False  # an empty value means None (off)
    env: str | None = None  # None: FAIRSTREAM_<FLAG_NAME>


def setting(
    default: Any = MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    secret: bool = False,
    help: str,
    **option: Any,
) -> Any:
    """A dataclass field declared as a setting (``option`` are ``Option``'s other fields).

    ``factory`` computes the default when the instance is made (the option then shows no
    default of its own); a ``secret`` is left out of ``repr``.
    """
    metadata = {OPTION: Option(help=help, **option)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, repr=not secret, metadata=metadata)
    return dataclasses.field(default=default, repr=not secret, metadata=metadata)


@dataclass(frozen=True)
class Declared:
    """One setting of a settings class, with what its option is derived from."""

    field: dataclasses.Field[Any]
    option: Option
    type: type  # the field's type without None: str, int, float, bool or Path

    @property
    def flag(self) -> str:
        return self.option.flag or "--" + self.field.name.replace("_", "-")

    @property
    def name(self) -> str:
        """The option's parameter name (what click passes the command)."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def env(self) -> str:
        return self.option.env or ENV_PREFIX + self.name.upper()

    @property
    def default(self) -> Any:
        """The option's default, in the option's unit (None when computed at build time)."""
        value = self.field.default
        if value is MISSING or value is None:
            return None
        return value // self.option.unit if self.option.unit != 1 else value


def _is_settings(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


_FIELDS: dict[type, tuple[tuple[dataclasses.Field[Any], Any], ...]] = {}


def _fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    """The fields of ``cls`` with their resolved types (checked at every construction)."""
    if cls not in _FIELDS:
        hints = typing.get_type_hints(cls)
        _FIELDS[cls] = tuple((f, hints[f.name]) for f in dataclasses.fields(cls))
    return _FIELDS[cls]


def _plain(kind: Any) -> type:
    """``float`` for ``float | None``, ``str`` for a ``Literal`` of strings (its values are
    the option's ``choices``): the type of the option."""
    literal = typing.get_origin(kind) is Literal  # its arguments are its values, not types
    args = [] if literal else [arg for arg in typing.get_args(kind) if arg is not type(None)]
    plain = args[0] if args else kind
    if typing.get_origin(plain) is Literal and all(
        isinstance(value, str) for value in typing.get_args(plain)
    ):
        return str
    if plain not in (str, int, float, bool, Path):
        raise TypeError(f"a setting cannot be of type {kind!r}")
    return typing.cast(type, plain)


@functools.cache
def declared(cls: type) -> tuple[Declared, ...]:
    """Every setting of ``cls`` in field order, a nested settings class's in its place."""
    found: list[Declared] = []
    for f, kind in _fields(cls):
        if _is_settings(kind):
            found.extend(declared(kind))
        elif OPTION in f.metadata:
            found.append(Declared(f, f.metadata[OPTION], _plain(kind)))
    return tuple(found)


def build(cls: type[T], values: Mapping[str, Any]) -> T:
    """An instance of ``cls`` from option values keyed by parameter name.

    A value of None (an option not given, with no default) leaves the field's default; a
    nested settings class is built from the same values unless ``values`` holds it whole
    under its field's name. Raises ``SettingsError`` for values the class refuses.
    """
    kwargs: dict[str, Any] = {}
    for f, kind in _fields(cls):
        if _is_settings(kind):
            kwargs[f.name] = values[f.name] if f.name in values else build(kind, values)
            continue
        if OPTION not in f.metadata:
            continue
        setting = Declared(f, f.metadata[OPTION], _plain(kind))
        value = values.get(setting.name)
        if value is None:
            continue
        if setting.option.empty_is_none and value == "":
            value = None
        elif setting.option.unit != 1:
            value = value * setting.option.unit
        kwargs[f.name] = value
    return cls(**kwargs)


def _limits(option: Option) -> str:
    low = "" if option.low is None else f"{'>' if option.low_open else '>='} {option.low}"
    high = "" if option.high is None else f"<= {option.high}"
    return " and ".join(part for part in (low, high) if part)


def check(instance: Any, error: type[SettingsError] = SettingsError) -> None:
    """Refuse a value of ``instance``'s own settings outside its declared limits or choices.

    Caller: the settings classes' ``__post_init__`` (a nested class checks its own).
    """
    for f, kind in _fields(type(instance)):
        value = getattr(instance, f.name)
        if OPTION not in f.metadata or value is None or isinstance(value, bool):
            continue
        setting = Declared(f, f.metadata[OPTION], _plain(kind))
        option = setting.option
        if option.choices and value not in option.choices:
            raise error(f"{setting.flag} must be one of {', '.join(option.choices)}, got {value!r}")
        if isinstance(value, int | float):
            scaled = value / option.unit if option.unit != 1 else value
            too_low = option.low is not None and (
                scaled <= option.low if option.low_open else scaled < option.low
            )
            too_high = option.high is not None and scaled > option.high
            if too_low or too_high:
                raise error(f"{setting.flag} must be {_limits(option)}, got {scaled!r}")
