"""Checks of the numeric parameters the adaptive limits take (``ConcurrencyLimit``,
``LagBound``): each returns the value, or raises ``ValueError`` naming the parameter.

Pure: no I/O.
"""

from __future__ import annotations

import math

__all__ = ["at_least", "count", "counts", "finite"]


def finite(name: str, value: float, *, low: float, strict: bool) -> float:
    """``value`` as a float: a finite number above ``low`` (``strict``) or at least it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < low or (strict and value == low):
        bound = f"> {low:g}" if strict else f">= {low:g}"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


def count(name: str, value: int) -> int:
    """``value``: an integer of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def at_least(name: str, value: float, other_name: str, other: float) -> None:
    """``value`` is at least ``other`` (a window at least its interval, say)."""
    if value < other:
        raise ValueError(f"{name} ({value!r}) must be at least {other_name} ({other!r})")


def counts(floor: int, ceiling: int, **others: int) -> None:
    """``floor``, ``ceiling`` and ``others`` are integers of at least 1, and the ceiling is
    at least the floor."""
    for name, value in (("floor", floor), ("ceiling", ceiling), *others.items()):
        count(name, value)
    at_least("ceiling", ceiling, "floor", floor)
