"""Adapting egress to what the paid API says: an adaptive rate and per-tenant pauses.

``AdaptiveRate`` turns the workers' api-scope feedback into the egress rate, between a
``floor`` and a ``ceiling`` (``--min-rate`` and ``--rate``):

- **Decrease** on a rate-limited outcome, at most once per overload (one overload answers
  with a batch of 429s: they count once): to ``rate * decrease``, and no higher than
  ``headroom`` times the API's measured capacity: the ok calls reported while it refused
  (its own burst is spent then, so they measure what it takes; the calls before measure
  the rate plus that burst), so a rate far above the capacity comes down to it in one
  step. Reports arrive late and out of order (the feedback topic's partitions are
  fetched apart), so a cut made on the first 429 may count only part of the calls; until
  an interval after the overload's last 429 the cut is aimed again at the measurement
  as the rest arrive, up or down (``_remeasure``).
- **Drain**: the queue an overload leaves downstream (records waiting at the workers,
  requests retrying a 429) keeps the API saturated and refusing, and competes with new
  records for its tokens. With each ok call's *sojourn* (release to report, from
  feedback's ``scheduled_at``), the least sojourn lately minus the least of the last 20 s
  is how long records wait downstream now; the 429s still coming are the retries' calls.
  The rate leaves the API those calls and the spare capacity to take the waiting records
  within ``drain`` seconds, and comes back as they drain, without a deeper cut
  (``_drained``). Without sojourns (an
  older worker), 429s that go on after a decrease cut deeper instead, each twice as deep,
  down to half the measured capacity.
- **Hold**: a reported Retry-After stops egress until it has passed (``held_for``), less
  the path a record released now takes to reach the API (the least sojourn): a Retry-After
  shorter than that holds nothing. One report holds for at most ``max_hold``. A long one
  (``_LONG_HOLD`` intervals or more) is waited out by the workers too, so the API takes
  next to nothing meanwhile: that is no measure of it, and the next probe goes slower.
- **Increase** while the feedback stays clean (no rate-limited outcome and no decrease for
  ``interval`` seconds, no hold) and the rate is in use (the calls reported over the last
  ``window`` reach ``utilization`` of it; a rate nobody uses is not raised on no
  evidence). Up to the *knee*, the capacity measured at the last decrease, the rate climbs
  fast (back within about two seconds); above it, it probes as TCP CUBIC does on its
  convex side: ``knee * (1 + cubic * t**3)`` after ``t`` seconds of probing, slow near the
  limit last measured (the API is hit gently where it was), fast far from it (a limit
  that went up, even doubled, is reached within seconds).
- **No feedback, no change**: the rate starts at the ceiling and moves only on feedback.

``TenantPauses`` keeps tenant-scope limits: a tenant whose own upstream quota said
Retry-After is paused until then, and ``expire`` says whose pause has ended.

Both are pure: time comes from an injected ``Clock`` or as ``now``, in that clock's
seconds. A caller translating a feedback record's wall-clock times (``reported_at``,
``scheduled_at``) puts them on this clock first. Outcomes are best given at the time the
call ended (``reported_at``), not when its report arrived: reports come in fetched batches,
and the API's throughput measured by arrival is off by a batch in a short span.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Final

from fairstream.core.clock import Clock

__all__ = ["AdaptiveRate", "TenantPauses"]

_BUCKETS: Final = 10  # sub-buckets of the sliding window
# Below this many ok + rate-limited calls in the window, the API's share is too noisy to
# trust: the decrease is the plain multiplicative one.
_MIN_SAMPLES: Final = 10
# The most of the rate a drain leaves to the queue an overload left downstream, and to the
# calls of requests retrying a 429.
_DEEPEST_DRAIN: Final = 0.8
_RETRY_ROOM: Final = 0.1
# A Retry-After of this many intervals or more is a long hold: the workers wait it out
# too, so the API takes next to nothing while it lasts.
_LONG_HOLD: Final = 0.5


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _fraction(name: str, value: float, *, inclusive_low: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    low_ok = value >= 0 if inclusive_low else value > 0
    if not (low_ok and value <= 1):
        bounds = "[0, 1]" if inclusive_low else "(0, 1]"
        raise ValueError(f"{name} must be in {bounds}, got {value!r}")
    return float(value)


class _Window:
    """Counts of ok, rate-limited and other calls over the last ``span`` seconds."""

    __slots__ = ("_buckets", "_start", "_width", "span")

    def __init__(self, span: float) -> None:
        self.span = span
        self._width = span / _BUCKETS
        self._start: float | None = None  # the first count: a young window is shorter
        # (bucket index, ok, limited, other), oldest first
        self._buckets: deque[list[float]] = deque()

    def _bucket(self, now: float) -> list[float]:
        index = math.floor(now / self._width)
        buckets = self._buckets
        if not buckets or buckets[-1][0] < index:
            buckets.append([index, 0, 0, 0])
            self._prune(now)
            return buckets[-1]
        # A call that ended a little before the last one counted (reports of several
        # workers interleave): its own bucket, if the window still holds it.
        for position in range(len(buckets) - 1, -1, -1):
            bucket = buckets[position]
            if bucket[0] == index:
                return bucket
            if bucket[0] < index:
                buckets.insert(position + 1, [index, 0, 0, 0])
                return buckets[position + 1]
        buckets.appendleft([index, 0, 0, 0])  # the next prune drops it if out of the window
        return buckets[0]

    def _prune(self, now: float) -> None:
        oldest = math.floor(now / self._width) - _BUCKETS + 1
        buckets = self._buckets
        while buckets and buckets[0][0] < oldest:
            buckets.popleft()

    def add(self, now: float, ok: int = 0, limited: int = 0, other: int = 0) -> None:
        if self._start is None:
            self._start = now
        bucket = self._bucket(now)
        bucket[1] += ok
        bucket[2] += limited
        bucket[3] += other

    def counts(self, now: float) -> tuple[float, float, float]:
        """(ok, limited, other) over the window ending at ``now``."""
        self._prune(now)
        ok = limited = other = 0.0
        for bucket in self._buckets:
            ok += bucket[1]
            limited += bucket[2]
            other += bucket[3]
        return ok, limited, other

    def saturated(self, now: float, least: float) -> tuple[float, float] | None:
        """(ok calls, seconds) from the oldest bucket with a rate-limited call to the end
        of the newest (or ``now``), and over at least ``least`` seconds; None when no call
        was rate-limited, or the span is no longer all in the window.

        While calls are refused the API's own bucket is empty, so the calls that go
        through measure its capacity; before that, they measure the rate plus whatever
        burst the API's bucket let through on top.
        """
        self._prune(now)
        limited = [b[0] for b in self._buckets if b[2]]
        if not limited:
            return None
        width = self._width
        first, last = limited[0], limited[-1]
        end = min(now, (last + 1) * width)
        start = min(first, math.floor((end - least) / width))
        if start < math.floor(now / width) - _BUCKETS + 1:
            return None  # the span is no longer all in the window
        ok = sum(b[1] for b in self._buckets if start <= b[0] <= last)
        # A young window covers less than its buckets. Measured from its first count,
        # which comes with a batch of the calls made before it: the measurement errs
        # high, never low, until the window has filled.
        since = now if self._start is None else self._start
        return ok, max(width / 100, end - max(start * width, since))

    def recent_limited(self, now: float) -> float:
        """Rate-limited calls per second over the last two buckets."""
        self._prune(now)
        index = math.floor(now / self._width)
        limited = sum(b[2] for b in self._buckets if b[0] >= index - 1)
        return limited / (2 * self._width)

    def seconds(self, now: float) -> float:
        """How long the window ending at ``now`` is (shorter while it is young)."""
        # The buckets kept cover from the start of the oldest one to now.
        covered = now - (math.floor(now / self._width) - _BUCKETS + 1) * self._width
        start = now if self._start is None else self._start
        return max(self._width, min(covered, now - start))


class _Sojourn:
    """How long released records take to come back settled (release to report): the least
    over the last ``base`` seconds, the path's own time (egress, the worker, the call), and
    the least over the last ``recent`` seconds. The difference is how long records wait
    downstream now: at the workers, behind calls retrying a rate limit.

    The least, not the mean: records become visible in batches (egress transactions, the
    workers' fetches), so sojourns vary by a batch's span, while the freshest record that
    went straight through still measures the path.
    """

    __slots__ = ("_base", "_buckets", "_width")

    def __init__(self, base: float, recent: float) -> None:
        self._base = base
        self._width = recent / 2  # the recent least spans the last two buckets
        self._buckets: deque[list[float]] = deque()  # [bucket index, least seconds]

    def add(self, now: float, seconds: float) -> None:
        index = math.floor(now / self._width)
        buckets = self._buckets
        if buckets and buckets[-1][0] >= index:
            # This bucket, or a record that came back a little before the last one seen
            # (reports of several workers interleave): the latest bucket takes it.
            buckets[-1][1] = min(buckets[-1][1], seconds)
        else:
            buckets.append([index, seconds])
        self._prune(now)

    def path(self, now: float) -> float:
        """The least sojourn over the last ``base`` seconds (0.0 without any): the time
        from release to report of a record that waits nowhere."""
        self._prune(now)
        return min((b[1] for b in self._buckets), default=0.0)

    def _prune(self, now: float) -> None:
        oldest = math.floor(now / self._width) - math.ceil(self._base / self._width)
        buckets = self._buckets
        while buckets and buckets[0][0] < oldest:
            buckets.popleft()

    def queue(self, now: float) -> float | None:
        """Seconds records wait downstream now; None without a sojourn seen lately."""
        self._prune(now)
        buckets = self._buckets
        index = math.floor(now / self._width)
        recent = [b[1] for b in buckets if b[0] >= index - 1]
        if not recent:
            return None
        return max(0.0, min(recent) - min(b[1] for b in buckets))


class AdaptiveRate:
    """The egress rate of the whole group, adapted to the API's rate-limited feedback.

    Not thread-safe: one owner (the scheduler's feedback reader and emitter share it under
    the caller's lock, or one thread does both).
    """

    __slots__ = (
        "_ceiling",
        "_clock",
        "_cubic",
        "_cut",
        "_decrease",
        "_drain",
        "_floor",
        "_headroom",
        "_held",
        "_hold_until",
        "_increase",
        "_interval",
        "_knee",
        "_last_decrease",
        "_last_limited",
        "_long_hold",
        "_max_hold",
        "_measuring_until",
        "_probed",
        "_rate",
        "_sojourn",
        "_streak",
        "_stretch",
        "_updated",
        "_utilization",
        "_window",
        "decreases",
        "rate_limited",
    )

    def __init__(
        self,
        clock: Clock,
        ceiling: float,
        floor: float | None = None,
        *,
        decrease: float = 0.9,
        increase: float | None = None,
        cubic: float = 0.0015,
        interval: float = 1.0,
        window: float | None = None,
        headroom: float = 0.97,
        utilization: float = 0.5,
        max_hold: float = 300.0,
        drain: float = 0.5,
    ) -> None:
        """``ceiling``: the configured ``--rate``; ``floor``: ``--min-rate``, default 1% of it.

        ``decrease``: factor of a multiplicative decrease. ``increase``: records/s added per
        clean second below the knee (default: ceiling / 50; the climb back to the knee
        takes at most about two seconds whatever it is). ``cubic``: the probe above the
        knee, as a fraction of the knee per cubed second (the default adds 0.15% of it
        after 1 s, 4% after 3 s, 51% after 7 s, 80% after 8.1 s).
        ``interval``: the shortest time between two decreases, and the clean time before
        increasing. ``window``: seconds of feedback the API's throughput and the
        utilization are measured over (default ``2 * interval``). ``headroom``: the
        fraction of the measured throughput a decrease aims at. ``utilization``: the
        fraction of the rate the reported calls must reach for an increase (0: increase
        whether or not the rate is used). ``max_hold``: the longest hold one Retry-After
        can ask for. ``drain``: seconds to empty the queue that built downstream when
        the API started refusing (measured by the records' sojourns, see ``on_ok``).
        """
        self._clock = clock
        self._ceiling = _positive("ceiling", ceiling)
        self._floor = self._ceiling / 100 if floor is None else _positive("floor", floor)
        if self._floor > self._ceiling:
            raise ValueError(f"floor {floor!r} is above the ceiling {ceiling!r}")
        self._decrease = _fraction("decrease", decrease)
        if self._decrease == 1:
            raise ValueError("decrease must be below 1: a decrease must decrease")
        self._increase = self._ceiling / 50 if increase is None else _positive("increase", increase)
        self._cubic = _positive("cubic", cubic)
        self._interval = _positive("interval", interval)
        self._headroom = _fraction("headroom", headroom)
        self._utilization = _fraction("utilization", utilization, inclusive_low=True)
        self._max_hold = _positive("max_hold", max_hold)
        self._drain = _positive("drain", drain)
        self._sojourn = _Sojourn(base=20.0, recent=0.4)
        now = clock.now()
        self._window = _Window(
            2 * self._interval if window is None else _positive("window", window)
        )
        self._rate = self._ceiling
        self._knee = self._ceiling  # below it the rate climbs fast; above it, it probes
        self._probed = 0.0  # seconds spent probing above the knee since the last decrease
        self._stretch = 1.0  # how much slower than ``cubic`` the probe goes
        self._updated = now
        self._last_decrease = -math.inf
        self._last_limited = -math.inf
        self._streak = 0  # decreases in a row, each within 2 intervals of the one before
        # The last cut, (rate before it, its multiplicative factor, the highest knee it
        # allows), re-measured until ``_measuring_until`` (see ``_remeasure``).
        self._cut = (self._ceiling, 1.0, self._ceiling)
        self._measuring_until = -math.inf
        self._hold_until = -math.inf
        # (from, until) the last hold of a Retry-After of LONG_HOLD or more
        self._long_hold = (-math.inf, -math.inf)
        self._held: deque[tuple[float, float]] = deque()  # hold spans within the window
        self.decreases = 0  # multiplicative decreases made
        self.rate_limited = 0  # api-scope rate-limited outcomes reported

    @property
    def ceiling(self) -> float:
        return self._ceiling

    @property
    def floor(self) -> float:
        return self._floor

    def _now(self, now: float | None) -> float:
        return self._clock.now() if now is None else now

    def _advance(self, now: float) -> None:
        """Add the increase earned since the last update, from when it became clean."""
        if now <= self._updated:
            return
        clean_from = max(
            self._updated,
            self._last_decrease + self._interval,
            self._last_limited + self._interval,
            self._hold_until,
        )
        if now > clean_from and self._rate < self._ceiling and self._in_use(now):
            self._climb(now - clean_from)
        self._updated = now

    def _climb(self, seconds: float) -> None:
        """``seconds`` of increase: linear up to the knee, then TCP CUBIC's convex probe,
        ``knee * (1 + cubic * t**3)`` after ``t`` seconds above it: slow near the limit
        last measured, fast far from it."""
        rate, knee = self._rate, self._knee
        if rate < knee:
            # Back to a rate the API took lately within about two seconds.
            speed = max(self._increase, knee / 2)
            step = min(seconds, (knee - rate) / speed)
            rate += speed * step
            seconds -= step
        if seconds > 0:
            self._probed += seconds
            rate = max(rate, knee * (1.0 + self._cubic * (self._probed / self._stretch) ** 3))
        self._rate = min(self._ceiling, rate)

    def _in_use(self, now: float) -> bool:
        if self._utilization == 0:
            return True
        ok, _, other = self._window.counts(now)
        # Calls the API took (or failed for reasons of their own), per second egress was
        # sending. Not the rate-limited ones: a refused request is retried by its worker
        # without the scheduler, so its 429s multiply with the retries, not with the rate.
        calls_per_second = (ok + other) / self._sending_seconds(now)
        return calls_per_second >= self._utilization * self._rate

    def _sending_seconds(self, now: float, span: float | None = None) -> float:
        """Seconds of the ``span`` (default: the window) ending at ``now`` during which
        egress was not held."""
        window = self._window.seconds(now)
        span = window if span is None else span
        held = self._held
        while held and held[0][1] <= now - window:
            held.popleft()
        start = now - span
        holding = sum(
            min(end, now) - max(begin, start) for begin, end in held if begin < now and end > start
        )
        return max(span - holding, span / _BUCKETS)

    def rate(self, now: float | None = None) -> float:
        """The egress rate now, in records/s (what the token bucket should be set to).

        Caller: the scheduler, before pacing egress. Affects: the additive increase due.
        """
        now = self._now(now)
        if now < self._measuring_until:
            self._remeasure(now)
        self._advance(now)
        return self._drained(now)

    def _drained(self, now: float) -> float:
        """The rate, lowered while what an overload left downstream drains: records
        waiting at the workers (their sojourn grew, see ``on_ok``) and records retrying a
        429. Both compete with new records for the API's tokens, so the rate leaves the
        API the spare capacity to take them within ``drain`` seconds; as they drain, the
        rate comes back, without waiting for the clean feedback an increase needs."""
        rate = self._rate
        if (
            now - self._last_limited > 2 * self._interval
            or now < self._long_hold[1] + self._interval
        ):
            # Not rate-limited lately; or a long hold, which drains that queue by itself
            # (the records that waited through it come back late, not behind others).
            return rate
        queue = self._sojourn.queue(now)
        if queue is None:
            return rate
        # Each request retrying a 429 calls the API again every so often: those calls (the
        # 429s coming in) take tokens as new records do, so the API is left room for them
        # (a tenth of the rate at most: a few requests retrying need little to get through).
        retries = min(self._window.recent_limited(now), _RETRY_ROOM * rate)
        spare = queue * rate / self._drain + retries
        return max(self._floor, rate - min(_DEEPEST_DRAIN * rate, spare))

    def held_for(self, now: float | None = None) -> float:
        """Seconds until egress may resume after a Retry-After; 0.0 when it may now."""
        return max(0.0, self._hold_until - self._now(now))

    def on_ok(self, count: int = 1, now: float | None = None, sojourn: float | None = None) -> None:
        """``count`` calls went through; ``sojourn``: seconds from the record's release to
        its report (feedback's ``reported_at`` - ``scheduled_at``), when known.

        Caller: the feedback reader. Affects: the window, the sojourns.
        """
        now = self._now(now)
        self._advance(now)
        self._window.add(now, ok=count)
        if sojourn is not None and math.isfinite(sojourn):
            self._sojourn.add(now, max(0.0, sojourn))

    def on_other(self, count: int = 1, now: float | None = None) -> None:
        """``count`` calls that used the rate and say nothing about the API's capacity (a
        failed call, a tenant-scope limit). Caller: the feedback reader."""
        now = self._now(now)
        self._advance(now)
        self._window.add(now, other=count)

    def on_rate_limited(self, retry_after: float | None = None, now: float | None = None) -> bool:
        """One api-scope rate-limited outcome; True if it lowered the rate.

        ``retry_after``: seconds from ``now`` the API asked for, if any (the caller
        subtracts the time the feedback took to arrive).

        Caller: the feedback reader. Affects: the rate, the hold, the window.
        """
        now = self._now(now)
        self._advance(now)
        self._window.add(now, limited=1)
        self.rate_limited += 1
        if retry_after is not None and math.isfinite(retry_after):
            # A record released now reaches the API one path later (the egress
            # transaction, the workers' fetch): a hold stops only what would call the API
            # before the Retry-After has passed.
            retry_after -= self._sojourn.path(now)
        if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
            until = now + min(retry_after, self._max_hold)
            self._hold(now, until)
            if retry_after >= _LONG_HOLD * self._interval and until > self._long_hold[1]:
                begun = self._long_hold[0] if self._long_hold[1] >= now else now
                self._long_hold = (begun, until)
        previous, self._last_limited = self._last_limited, now
        since = now - self._last_decrease
        # With sojourns (``on_ok``), the queue an overload leaves downstream is drained by
        # ``_drained``: 429s that go on after a decrease are that queue's (an overload
        # ends with an interval free of them), and the rate only follows the measured
        # throughput, without cutting deeper.
        timed = self._sojourn.queue(now) is not None
        if since < self._interval or (timed and now - previous < self._interval):
            # The same overload: no new cut, but the last one is aimed again at the
            # measurement, which now spans this 429 too (``_remeasure``; not while held:
            # the workers wait out the Retry-After too, and the calls that go through
            # then measure the hold, not the API).
            self._measuring_until = max(self._measuring_until, now + self._interval)
            before = self._rate
            self._remeasure(now)
            return self._rate < before
        measured = self._measured_knee(now)
        # Without sojourns, still rate-limited right after a decrease: the overload
        # outlasted it (requests stuck retrying keep the API saturated until a spare
        # capacity drains them), so each further decrease in a row cuts twice as deep.
        # With them, that queue is drained (``_drained``), and a 429 after a clean
        # interval is the next probe finding the limit: one cut.
        self._streak = self._streak + 1 if since < 2 * self._interval and not timed else 1
        factor = self._decrease ** (2 ** min(self._streak - 1, 6))
        # An overload's first 429 says the API refused this rate, so the knee is below it
        # (a measurement made while the API's own burst lasted says more).
        cap = self._headroom * self._rate if self._streak == 1 else self._ceiling
        self._cut = (self._rate, factor, cap)
        self._measuring_until = now + self._interval if measured is not None else -math.inf
        self._aim(measured)
        self._probed = 0.0
        # An overload the API answered with a long Retry-After stops every call for that
        # long (the workers wait it out too): the next probe goes slower, as much.
        self._stretch = 1.0 + max(0.0, self._long_hold[1] - now) / self._interval
        self._last_decrease = now
        self.decreases += 1
        return True

    def _aim(self, measured: float | None) -> None:
        """Set the rate and the knee for the last cut (``_cut``), by ``measured``."""
        before, factor, cap = self._cut
        target = knee = before * factor
        if measured is not None:
            # Half the measured throughput drains a backlog of retries at half the API's
            # pace: deeper cuts would only cost.
            knee = measured
            target = min(max(target, knee / 2), knee)
        knee = min(knee, cap)
        # A decrease decreases: aiming at the measurement never raises the rate.
        self._rate = max(self._floor, min(self._ceiling, target, before))
        self._knee = max(self._rate, min(self._ceiling, knee))

    def _remeasure(self, now: float) -> None:
        """Aim the last cut again at the API's throughput measured now.

        Reports arrive late, and not in the order calls ended (the feedback topic's
        partitions are fetched apart, workers' producers batch): when an overload's first
        429 arrives, some of the calls the API took before it are not counted yet, and a
        cut aimed then aims low (half the capacity, measured, with half the reports in).
        Until an interval after the overload's last 429, when the clean climb would begin,
        each look counts what arrived since and aims the cut again: up as well as down.
        """
        if now < self._long_hold[1]:
            return  # the workers wait a long hold out too: no measure of the API
        measured = self._measured_knee(now, saturated_only=True)
        if measured is not None:
            self._aim(measured)

    def _measured_knee(self, now: float, *, saturated_only: bool = False) -> float | None:
        """``headroom`` times what the API let through lately, when there is enough to
        tell: the rate to come back to quickly after a cut. Calls that went through, not
        the share of 429s: retried requests multiply the rate-limited calls, not the load.
        """
        ok, limited, _ = self._window.counts(now)
        if ok + limited < _MIN_SAMPLES:
            return None
        # Not across a long hold: a long Retry-After holds the workers' retries as well
        # as egress, so what goes through then measures the hold, not the API (the
        # decrease is then the plain multiplicative one).
        begun, ended = self._long_hold
        if begun < now and ended > now - self._window.seconds(now):
            return None
        # Over the window's saturated part: before the API refused, the calls that went
        # through measured the rate (and the API's burst on top), not its capacity.
        saturated = self._window.saturated(now, 0.4 * self._interval)
        if saturated is None:
            if saturated_only:
                return None
            return self._headroom * ok / self._window.seconds(now)
        return self._headroom * saturated[0] / saturated[1]

    def _hold(self, now: float, until: float) -> None:
        if until <= self._hold_until:
            return
        held = self._held
        if held and held[-1][1] >= now:  # overlaps the last span: extend it
            held[-1] = (held[-1][0], until)
        else:
            held.append((now, until))
        self._hold_until = until

    def __repr__(self) -> str:
        return (
            f"AdaptiveRate(rate={self._rate!r}, floor={self._floor!r}, "
            f"ceiling={self._ceiling!r}, decreases={self.decreases!r})"
        )


class TenantPauses:
    """Tenants paused by their own upstream quota (tenant-scope rate limits), until when.

    ``pause`` extends a pause, never shortens it. ``expire(now)`` returns the tenants whose
    pause has ended (each once), for the caller to resume; a pause asks for at most
    ``max_pause`` seconds. Memory is O(paused tenants) plus superseded heap entries, which
    ``expire`` drops.
    """

    __slots__ = ("_heap", "_max_pause", "_until")

    def __init__(self, max_pause: float = 300.0) -> None:
        self._max_pause = _positive("max_pause", max_pause)
        self._until: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def pause(self, tenant: str, retry_after: float, now: float) -> bool:
        """Pause ``tenant`` for ``retry_after`` s from ``now``; True if that pauses it
        longer than before (a new pause or an extension).

        Caller: the feedback reader, on a tenant-scope rate-limited outcome.
        Affects: the tenant's pause.
        """
        if isinstance(retry_after, bool) or not isinstance(retry_after, int | float):
            raise ValueError(f"retry_after must be seconds, got {retry_after!r}")
        if not math.isfinite(retry_after) or retry_after <= 0:
            return False
        until = now + min(float(retry_after), self._max_pause)
        if until <= self._until.get(tenant, -math.inf):
            return False
        self._until[tenant] = until
        heapq.heappush(self._heap, (until, tenant))
        return True

    def paused_until(self, tenant: str) -> float | None:
        """When ``tenant``'s pause ends, or None when it is not paused (or not expired yet
        by ``expire``)."""
        return self._until.get(tenant)

    def is_paused(self, tenant: str, now: float) -> bool:
        until = self._until.get(tenant)
        return until is not None and now < until

    def expire(self, now: float) -> list[str]:
        """The tenants whose pause ended by ``now``, in the order they ended; forgotten.

        Caller: the scheduler loop, to resume them. Affects: the pauses.
        """
        heap, until = self._heap, self._until
        ended: list[str] = []
        while heap and heap[0][0] <= now:
            at, tenant = heapq.heappop(heap)
            if until.get(tenant) == at:  # not superseded by a later extension
                del until[tenant]
                ended.append(tenant)
        return ended

    def next_expiry(self) -> float | None:
        """When the earliest pause ends, or None when no tenant is paused."""
        heap, until = self._heap, self._until
        while heap and until.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # superseded
        return heap[0][0] if heap else None

    def __len__(self) -> int:
        return len(self._until)

    def __contains__(self, tenant: object) -> bool:
        return tenant in self._until
