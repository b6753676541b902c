"""Time as a parameter: the ``Clock`` port and its two implementations.

The scheduling algorithms never read the system clock themselves. They receive a
``Clock`` (or a ``now`` value read from one), so that tests and the ``simulate`` tool can
drive time by hand and production code can use a monotonic clock that never jumps back.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "MonotonicClock"]


@runtime_checkable
class Clock(Protocol):
    """Anything that tells the time in seconds, never going backwards."""

    def now(self) -> float:
        """Return the current time in seconds from an arbitrary origin."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic()``, immune to wall-clock adjustments."""

    __slots__ = ()

    def now(self) -> float:
        """Return ``time.monotonic()``."""
        return time.monotonic()

    def __repr__(self) -> str:
        return "MonotonicClock()"


class ManualClock:
    """A clock that only moves when told to: for tests and simulation.

    It refuses to go backwards, like the monotonic clock it stands in for, so that a test
    cannot accidentally exercise a situation production never sees.
    """

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        """Return the time last set or advanced to."""
        return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` (>= 0) and return the new time.

        Caller: tests and the simulator.
        Affects: the time returned by ``now()``.
        """
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {seconds!r})")
        self._now += seconds
        return self._now

    def set(self, when: float) -> float:
        """Move the clock to ``when``, which must not be earlier than now; return it.

        Caller: the simulator, jumping to the next arrival or departure.
        Affects: the time returned by ``now()``.
        """
        if when < self._now:
            raise ValueError(f"a clock cannot go backwards (from {self._now!r} to {when!r})")
        self._now = float(when)
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now!r})"
