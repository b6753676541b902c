"""Time as a parameter: the ``Clock`` port and its two implementations.

The scheduling algorithms never read the system clock themselves. They receive a
``Clock`` (or a ``now`` value read from one), so that tests and the ``simulate`` tool can
drive time by hand and production code can use a monotonic clock that never jumps back.

The scheduler's records also carry wall-clock times (deadlines, ``fairstream-scheduled-ms``,
in epoch milliseconds): a ``RecordClock`` tells both, so that one injected object is all the
time a component reads.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["EPOCH_MS", "Clock", "ManualClock", "MonotonicClock", "RecordClock"]

EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: where a ManualClock's wall clock starts


@runtime_checkable
class Clock(Protocol):
    """Anything that tells the time in seconds, never going backwards."""

    def now(self) -> float:
        """Return the current time in seconds from an arbitrary origin."""
        ...


@runtime_checkable
class RecordClock(Clock, Protocol):
    """A clock that also tells the wall-clock time records carry."""

    def epoch_ms(self) -> int:
        """Return the wall-clock time in epoch milliseconds."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic()``, immune to wall-clock adjustments; and the wall
    clock for what records carry (``epoch_ms``)."""

    __slots__ = ()

    def now(self) -> float:
        """Return ``time.monotonic()``."""
        return time.monotonic()

    def epoch_ms(self) -> int:
        """Return the wall clock in epoch milliseconds (``time.time_ns() // 1_000_000``)."""
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "MonotonicClock()"


class ManualClock:
    """A clock that only moves when told to: for tests and simulation.

    It refuses to go backwards, like the monotonic clock it stands in for, so that a test
    cannot accidentally exercise a situation production never sees.
    """

    __slots__ = ("_epoch_ms", "_now")

    def __init__(self, start: float = 0.0, *, epoch_ms: int = EPOCH_MS) -> None:
        self._now = float(start)
        self._epoch_ms = epoch_ms - round(self._now * 1000)  # the wall clock at now() == 0

    def now(self) -> float:
        """Return the time last set or advanced to."""
        return self._now

    def epoch_ms(self) -> int:
        """Return the wall clock: ``epoch_ms`` (given at construction) plus the time the
        clock moved since, in milliseconds."""
        return self._epoch_ms + round(self._now * 1000)

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
