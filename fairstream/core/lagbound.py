"""Credit from the egress consumer group's committed offsets, for workers that send no
feedback.

A plain Kafka consumer (or a Faust app without the SDK) reading egress reports nothing on
the feedback topic, so the concurrency limit (``fairstream.core.credit``) has nothing to go
by. What it does leave is its committed offsets: the records released to egress and not yet
committed by the group (its lag) are the records waiting downstream. Two pieces turn them
into a bound on what the scheduler releases:

- ``OffsetLag`` reads one sample of the group's committed offsets and the egress
  partitions' end offsets (high watermarks) and keeps what the group consumed since it
  started watching (``consumed``, offsets the group moved past, summed over partitions) and
  its lag now (``lag``):

  - a partition the group has no committed offset for counts from its end offset when it
    was first seen so: the records released there since are waiting (a consumer that never
    got a record there has committed nothing), those from before are none of ours;
  - a committed offset that goes back (a consumer reset its offsets) starts that partition
    afresh: nothing is counted as consumed by going back;
  - a transactional producer's commit or abort marker occupies one offset of each
    partition the transaction wrote to, and aborted records occupy theirs: neither is ever
    delivered, so the end offset less the committed one counts them as waiting. The marker
    at the end of a partition is always there once the group caught up (the consumer
    commits past the last record, not past the marker behind it): one offset of each
    lagging partition is taken off. The markers between records are left in: ``consumed``
    counts them too, at the same pace, so lag over progress is still the time a record
    waits (Little's law in offsets) and the bound below, made of that progress, holds them
    in the same proportion.
  - None when the group has no committed offset on any partition (absent, or it never
    committed): nothing to go by.

- ``LagBound`` turns the samples into the bound: the records (offsets) that may wait
  downstream at most. Little's law: with the group consuming ``rate`` offsets a second,
  ``rate * horizon`` of them wait ``horizon`` seconds; the bound is that with ``headroom``
  and ``spare`` slots above, between ``floor`` and ``ceiling``. It only moves on samples
  where it binds (the lag plus what the group consumed since the last sample is at least
  ``_BINDING`` of it: the emitter refills up to the bound as each sample frees slots), and
  the rate is measured over a run of such samples: only then is it what the group can take
  rather than what was offered, and only then is there demand to grow for. Up by
  ``growth`` per ``interval`` at most (a consumer faster than the bound lets it be: a bound
  that binds while records wait less than the horizon meets a target above it, and grows
  until they wait the horizon); down to the target at once (a consumer that slowed down).
  A group that stopped consuming brings the bound to ``floor``: a few records
  still go, none pile up. Without a sample (``OffsetLag`` says None, or the reader could not
  read) it is None: unlimited, and what was learnt is forgotten.

Pure: no I/O; time comes from an injected ``Clock`` (or as ``now``, on its seconds). Not
thread-safe: one owner (the egress lag reader) calls every method.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Final, NamedTuple

from fairstream.core.clock import Clock
from fairstream.core.parameters import at_least, counts, finite

__all__ = ["LagBound", "LagSample", "OffsetLag"]

# The bound binds when the lag reaches this fraction of it: transactions land records in
# batches, so a bound that holds the emitter back shows a lag a little below it.
_BINDING: Final = 0.9


class LagSample(NamedTuple):
    """The group's progress and lag, in offsets: ``consumed`` since watching began (never
    goes back), ``lag`` now (the offsets released and not yet committed)."""

    consumed: int
    lag: int


class OffsetLag:
    """The egress group's consumed offsets and lag, from its committed offsets and the
    partitions' end offsets (see the module docstring)."""

    __slots__ = ("_base", "_committed", "_consumed")

    def __init__(self) -> None:
        self._committed: dict[int, int] = {}  # partition -> last committed offset seen
        self._base: dict[int, int] = {}  # partition -> end offset when first seen uncommitted
        self._consumed = 0

    def observe(self, ends: Mapping[int, int], committed: Mapping[int, int]) -> LagSample | None:
        """One sample: ``ends`` the end offset (high watermark) of each egress partition,
        ``committed`` the group's committed offset of each partition that has one (those
        without are left out). None when the group has committed none: unknown."""
        if not any(p in ends for p in committed):
            self.reset()
            return None
        lag = 0
        for partition, end in ends.items():
            offset = committed.get(partition)
            if offset is None:
                start = self._base.setdefault(partition, end)
            else:
                start = offset
                previous = self._committed.get(partition)
                if previous is None:  # its first commit: consumed from its first end seen
                    previous = self._base.pop(partition, offset)
                if offset >= previous:
                    self._consumed += offset - previous
                self._committed[partition] = offset
            waiting = end - start
            if waiting > 0:
                lag += waiting - 1  # the marker at the end (see the module docstring)
        return LagSample(self._consumed, lag)

    def reset(self) -> None:
        """Forget every partition (the group is gone, or the partitions changed)."""
        self._committed.clear()
        self._base.clear()


class LagBound:
    """The offsets that may wait for the egress group at most, from its lag samples (see
    the module docstring). ``bound`` is None (unlimited) until the first sample.

    ``horizon``: seconds a record should wait downstream at most; ``headroom`` and
    ``spare``: the fraction and the records above ``rate * horizon``; ``floor`` and
    ``ceiling`` bound it (``initial`` is where it starts, ``floor`` by default); ``growth``
    the factor per ``interval`` at most; ``window`` the seconds of samples the rate is
    measured over.
    """

    __slots__ = (
        "_bound",
        "_clock",
        "_next_update",
        "_samples",
        "ceiling",
        "floor",
        "growth",
        "headroom",
        "horizon",
        "initial",
        "interval",
        "lag",
        "rate",
        "spare",
        "window",
    )

    def __init__(
        self,
        clock: Clock,
        *,
        horizon: float = 0.15,
        headroom: float = 0.2,
        spare: float = 2.0,
        floor: int = 4,
        ceiling: int = 100_000,
        initial: int | None = None,
        growth: float = 1.5,
        interval: float = 0.25,
        window: float = 2.0,
    ) -> None:
        counts(floor, ceiling)
        start = floor if initial is None else initial
        if isinstance(start, bool) or not isinstance(start, int) or not floor <= start <= ceiling:
            raise ValueError(f"initial must be an integer from floor to ceiling, got {start!r}")
        self._clock = clock
        self.floor = floor
        self.ceiling = ceiling
        self.initial = start
        self.horizon = finite("horizon", horizon, low=0, strict=True)
        self.headroom = finite("headroom", headroom, low=0, strict=False)
        self.spare = finite("spare", spare, low=0, strict=False)
        self.growth = finite("growth", growth, low=1, strict=True)
        self.interval = finite("interval", interval, low=0, strict=True)
        self.window = finite("window", window, low=0, strict=True)
        at_least("window", window, "interval", interval)
        self._samples: deque[tuple[float, int]] = deque()  # (at, consumed), oldest first
        self._bound: float | None = None
        self._next_update = -math.inf
        self.lag: int | None = None  # the last sample's lag (None: unknown)
        self.rate = 0.0  # offsets a second the group consumed over the window, last measured

    @property
    def bound(self) -> int | None:
        """The offsets that may wait downstream now (None: unlimited, nothing to go by)."""
        if self._bound is None:
            return None
        return max(self.floor, min(self.ceiling, math.ceil(self._bound)))

    def observe(self, sample: LagSample | None, now: float | None = None) -> int | None:
        """One sample of the group's progress and lag (None: unknown: the group is absent
        or its offsets could not be read); the bound. It is recomputed at most once per
        ``interval``.

        Caller: the egress lag reader, a few times a second."""
        if now is None:
            now = self._clock.now()
        if sample is None:
            self._forget()
            return None
        consumed, lag = sample
        samples = self._samples
        self.lag = lag
        if self._bound is None:
            self._bound = float(self.initial)
            self._next_update = now + self.interval
            samples.append((now, consumed))
            return self.bound
        bound = self._bound
        # What the lag would be had the group consumed nothing since the last sample: the
        # emitter refills what a sample frees, so at the bound it is the bound however fast
        # the group consumed in between.
        gone = consumed - samples[-1][1] if samples else 0
        if gone < 0:  # a new run of the counter
            gone = 0
            samples.clear()
        binding = lag + gone >= _BINDING * bound
        if not binding:
            # The rate is measured over a run of binding samples only: otherwise it is what
            # was offered, not what the group can take.
            samples.clear()
        samples.append((now, consumed))
        while len(samples) > 2 and samples[1][0] <= now - self.window:
            samples.popleft()  # the oldest kept is at or before the window's start
        if not binding or now < self._next_update:
            return self.bound
        first_at, first = samples[0]
        span = now - first_at
        if span < self.interval:
            return self.bound
        self._next_update = now + self.interval
        self.rate = (consumed - first) / span
        target = self.rate * self.horizon * (1 + self.headroom) + self.spare
        growth = bound * self.growth
        self._bound = max(float(self.floor), min(float(self.ceiling), target, growth))
        return self.bound

    def wait(self) -> float | None:
        """Seconds the last lag takes the group at its measured rate (Little's law), or None
        without a lag or a rate: what a record released now waits downstream."""
        if self.lag is None or self.rate <= 0:
            return None
        return self.lag / self.rate

    def _forget(self) -> None:
        self._samples.clear()
        self._bound = None
        self.lag = None
        self.rate = 0.0
